package encryption

import (
	"context"
	"sync"
	"sync/atomic"

	"bonsai.dev/bonsai/store"
)

// Store encrypts the values of the resources its configuration lists on
// their way into the underlying store and decrypts them on their way
// out: gets, lists, watch events and what a delete returns. Callers see
// plaintext only, the store holds what the configuration says. Keys are
// never encrypted (upstream neither).
//
// Replace hands the store the plaintext the caller read as the event's
// previous value: the store keeps it in memory only, for watch events,
// which come out of this Store decrypted (plaintext reads as it is).
type Store struct {
	raw store.Store
	cfg atomic.Pointer[Config]
	// rotate serialises rotations and re-encryptions.
	rotate sync.Mutex

	// writing maps the stored form of a write under way (by its first
	// byte) to the plaintext the caller gave: the store's own event for
	// it carries that very slice, and handing the caller's slice back
	// keeps the API server's watch cache from decoding what its writer
	// just encoded (it recognises the slice), and skips a decryption.
	mu      sync.Mutex
	writing map[*byte][]byte
}

// NewStore wraps raw with cfg's encryption.
func NewStore(raw store.Store, cfg *Config) *Store {
	s := &Store{raw: raw, writing: map[*byte][]byte{}}
	s.cfg.Store(cfg)
	return s
}

// Config is the configuration values are written with now.
func (s *Store) Config() *Config { return s.cfg.Load() }

func (s *Store) rule(key string) *rule { return s.cfg.Load().ruleFor(key) }

// encrypt is value's stored form and a function to call once the write
// returns.
func (s *Store) encrypt(key string, value []byte) ([]byte, func(), error) {
	r := s.rule(key)
	if !r.encrypts() {
		return value, func() {}, nil
	}
	out, err := r.write(key, value)
	if err != nil || len(out) == 0 {
		return out, func() {}, err
	}
	k := &out[0]
	s.mu.Lock()
	s.writing[k] = value
	s.mu.Unlock()
	return out, func() {
		s.mu.Lock()
		delete(s.writing, k)
		s.mu.Unlock()
	}, nil
}

// decrypt is the plaintext of a stored value of key.
func (s *Store) decrypt(key string, v []byte) ([]byte, error) {
	if len(v) == 0 || !IsEncrypted(v) {
		return v, nil
	}
	s.mu.Lock()
	plain, ok := s.writing[&v[0]]
	s.mu.Unlock()
	if ok {
		return plain, nil
	}
	out, _, err := s.rule(key).read(key, v)
	return out, err
}

func (s *Store) Get(ctx context.Context, key string) (store.KeyValue, error) {
	kv, err := s.raw.Get(ctx, key)
	if err != nil {
		return kv, err
	}
	if kv.Value, err = s.decrypt(key, kv.Value); err != nil {
		return store.KeyValue{}, err
	}
	return kv, nil
}

// GetUnless leaves the value unread, as the store does, when the caller
// has the revision's value already (in plaintext: its cache is filled
// from this Store).
func (s *Store) GetUnless(ctx context.Context, key string, have func(rev uint64) bool) (store.KeyValue, error) {
	kv, err := store.GetUnless(ctx, s.raw, key, have)
	if err != nil || kv.Value == nil {
		return kv, err
	}
	if kv.Value, err = s.decrypt(key, kv.Value); err != nil {
		return store.KeyValue{}, err
	}
	return kv, nil
}

func (s *Store) List(ctx context.Context, prefix string, opts store.ListOptions) (store.ListResult, error) {
	res, err := s.raw.List(ctx, prefix, opts)
	if err != nil {
		return res, err
	}
	for i := range res.Items {
		if res.Items[i].Value, err = s.decrypt(res.Items[i].Key, res.Items[i].Value); err != nil {
			return store.ListResult{}, err
		}
	}
	return res, nil
}

func (s *Store) Create(ctx context.Context, key string, value []byte) (uint64, error) {
	if err := store.ValidateKey(key); err != nil {
		return 0, err
	}
	out, done, err := s.encrypt(key, value)
	if err != nil {
		return 0, err
	}
	defer done()
	return s.raw.Create(ctx, key, out)
}

func (s *Store) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	if err := store.ValidateKey(key); err != nil {
		return 0, err
	}
	out, done, err := s.encrypt(key, value)
	if err != nil {
		return 0, err
	}
	defer done()
	return s.raw.Update(ctx, key, out, rev)
}

// Replace is Update, the store taking prev (plaintext, as the caller
// read it) as the event's previous value instead of reading it back.
func (s *Store) Replace(ctx context.Context, key string, value []byte, rev uint64, prev []byte) (uint64, error) {
	if err := store.ValidateKey(key); err != nil {
		return 0, err
	}
	out, done, err := s.encrypt(key, value)
	if err != nil {
		return 0, err
	}
	defer done()
	return store.Replace(ctx, s.raw, key, out, rev, prev)
}

// Delete deletes as the store does; the value it returns is decrypted
// when it can be (callers use its revision): a delete that was made is
// not reported as failed.
func (s *Store) Delete(ctx context.Context, key string, rev uint64) (store.KeyValue, error) {
	kv, err := s.raw.Delete(ctx, key, rev)
	if err != nil {
		return kv, err
	}
	if v, err := s.decrypt(key, kv.Value); err == nil {
		kv.Value = v
	} else {
		kv.Value = nil
	}
	return kv, nil
}

func (s *Store) CurrentRevision(ctx context.Context) (uint64, error) {
	return s.raw.CurrentRevision(ctx)
}

func (s *Store) Compact(ctx context.Context, rev uint64) error { return s.raw.Compact(ctx, rev) }

func (s *Store) Close() error { return s.raw.Close() }

// Watch decrypts the events of the store's watch. A prefix inside one
// resource the configuration does not list is the store's watch itself:
// its values are never encrypted by this configuration (a value
// encrypted under an older one is refused by the API server's decoding,
// naming its key).
func (s *Store) Watch(ctx context.Context, prefix string, rev uint64) (store.Watcher, error) {
	w, err := s.raw.Watch(ctx, prefix, rev)
	if err != nil {
		return nil, err
	}
	if _, one := groupResource(prefix); one && s.rule(prefix) == nil {
		return w, nil
	}
	dw := &decryptingWatcher{raw: w, s: s, out: make(chan store.Event, max(cap(w.Events()), 1)), progress: make(chan chan uint64), done: make(chan struct{}), exited: make(chan struct{})}
	go dw.run()
	return dw, nil
}

// decryptingWatcher forwards a store watch's events decrypted. Its
// progress is the store's only once every event at or below it has been
// forwarded: a bookmark must never get ahead of an event still on its
// way.
type decryptingWatcher struct {
	raw      store.Watcher
	s        *Store
	out      chan store.Event
	progress chan chan uint64
	done     chan struct{}
	stopOnce sync.Once
	err      error // set before out is closed
	// exited is closed when run returns, lastSafe then its last progress.
	exited   chan struct{}
	lastSafe atomic.Uint64
}

func (w *decryptingWatcher) run() {
	// safe is a revision every event at or below which is on out.
	var safe uint64
	defer func() {
		w.lastSafe.Store(safe)
		close(w.out)
		close(w.exited)
	}()
	in := w.raw.Events()
	for {
		select {
		case <-w.done:
			return
		case reply := <-w.progress:
			// Nothing is in hand: what the store has put on in is on out
			// once in is empty. Progress is read first, so any event at
			// or below it was on in by then.
			p := w.raw.Progress()
			if len(in) == 0 {
				safe = max(safe, p)
			}
			reply <- safe
		case ev, ok := <-in:
			if !ok {
				w.err = w.raw.Err()
				return
			}
			var err error
			if ev.Value, err = w.s.decrypt(ev.Key, ev.Value); err == nil {
				ev.PrevValue, err = w.s.decrypt(ev.Key, ev.PrevValue)
			}
			if err != nil {
				w.err = err
				w.raw.Stop()
				return
			}
			for sent := false; !sent; {
				select {
				case w.out <- ev:
					sent = true
					safe = max(safe, ev.Revision)
				case reply := <-w.progress:
					reply <- safe
				case <-w.done:
					return
				}
			}
		}
	}
}

func (w *decryptingWatcher) Events() <-chan store.Event { return w.out }

// Err is why the watch ended: the store's reason, or a value it could
// not decrypt (naming its key).
func (w *decryptingWatcher) Err() error {
	select {
	case <-w.done:
		return nil
	default:
	}
	return w.err
}

func (w *decryptingWatcher) Stop() {
	w.stopOnce.Do(func() {
		close(w.done)
		w.raw.Stop()
	})
}

func (w *decryptingWatcher) Progress() uint64 {
	reply := make(chan uint64, 1)
	select {
	case w.progress <- reply:
		return <-reply
	case <-w.exited:
		return w.lastSafe.Load()
	}
}
