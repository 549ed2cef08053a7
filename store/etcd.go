package store

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// EtcdOptions configure the etcd backend.
type EtcdOptions struct {
	// Endpoint is what --datastore-endpoint takes: one or more
	// comma-separated http:// or https:// URLs.
	Endpoint string
	// CAFile, CertFile and KeyFile set up TLS for https endpoints.
	CAFile, CertFile, KeyFile string
	// DialTimeout bounds the first connection (default 5s).
	DialTimeout time.Duration
	// CompactInterval is how often history older than one interval is
	// compacted, as kube-apiserver does for etcd (default 5m; negative: off).
	CompactInterval time.Duration
	// MaxWatchLag is how many events a watcher may have undelivered before
	// it is ended with ErrWatcherTooSlow (default 10,000).
	MaxWatchLag int
	// MaxValueBytes is the largest value Create and Update send (default
	// DefaultMaxValueBytes, etcd's own default limit); larger ones fail
	// with a ValueTooLargeError, as do those the etcd server refuses as
	// too large.
	MaxValueBytes int
	Logger        *slog.Logger
}

// ParseEtcdEndpoints checks a --datastore-endpoint value and returns its
// URLs.
func ParseEtcdEndpoints(endpoint string) ([]string, error) {
	if strings.TrimSpace(endpoint) == "" {
		return nil, errors.New("datastore endpoint is empty")
	}
	var out []string
	for _, e := range strings.Split(endpoint, ",") {
		e = strings.TrimSpace(e)
		u, err := url.Parse(e)
		if err != nil {
			return nil, fmt.Errorf("datastore endpoint %q: %v", e, err)
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return nil, fmt.Errorf("datastore endpoint %q: scheme must be http or https (etcd)", e)
		}
		if u.Host == "" {
			return nil, fmt.Errorf("datastore endpoint %q: no host", e)
		}
		out = append(out, e)
	}
	return out, nil
}

type etcdStore struct {
	cli    *clientv3.Client
	opts   EtcdOptions
	log    *slog.Logger
	stop   chan struct{}
	wg     sync.WaitGroup
	closed sync.Once
}

// OpenEtcd connects to etcd and checks that it answers.
func OpenEtcd(opts EtcdOptions) (Store, error) {
	endpoints, err := ParseEtcdEndpoints(opts.Endpoint)
	if err != nil {
		return nil, err
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 5 * time.Second
	}
	if opts.CompactInterval == 0 {
		opts.CompactInterval = 5 * time.Minute
	}
	if opts.MaxWatchLag <= 0 {
		opts.MaxWatchLag = 10000
	}
	if opts.MaxValueBytes <= 0 {
		opts.MaxValueBytes = DefaultMaxValueBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	cfg := clientv3.Config{Endpoints: endpoints, DialTimeout: opts.DialTimeout, Logger: zap.NewNop()}
	if strings.HasPrefix(endpoints[0], "https://") || opts.CAFile != "" {
		tc, err := etcdTLS(opts)
		if err != nil {
			return nil, err
		}
		cfg.TLS = tc
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("open etcd datastore %s: %w", opts.Endpoint, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opts.DialTimeout)
	defer cancel()
	if _, err := cli.Get(ctx, "/", clientv3.WithCountOnly()); err != nil {
		cli.Close()
		return nil, fmt.Errorf("open etcd datastore %s: %w", opts.Endpoint, err)
	}
	s := &etcdStore{cli: cli, opts: opts, log: opts.Logger, stop: make(chan struct{})}
	if opts.CompactInterval > 0 {
		s.wg.Add(1)
		go s.compactLoop()
	}
	return s, nil
}

func etcdTLS(o EtcdOptions) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("datastore CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("datastore CA %s: no certificates in it", o.CAFile)
		}
		tc.RootCAs = pool
	}
	if o.CertFile != "" || o.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("datastore client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

func mapEtcdErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, rpctypes.ErrCompacted):
		return fmt.Errorf("%w: %v", ErrCompacted, err)
	case errors.Is(err, rpctypes.ErrFutureRev):
		return fmt.Errorf("%w: %v", ErrFutureRevision, err)
	}
	return err
}

func (s *etcdStore) Get(ctx context.Context, key string) (KeyValue, error) {
	if err := ValidateKey(key); err != nil {
		return KeyValue{}, err
	}
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return KeyValue{}, mapEtcdErr(err)
	}
	if len(resp.Kvs) == 0 {
		return KeyValue{}, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	kv := resp.Kvs[0]
	return KeyValue{Key: key, Value: kv.Value, Revision: uint64(kv.ModRevision)}, nil
}

func (s *etcdStore) List(ctx context.Context, prefix string, opts ListOptions) (ListResult, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return ListResult{}, err
	}
	start, rev := prefix, opts.Revision
	if opts.Continue != "" {
		var err error
		if start, rev, err = DecodeContinue(prefix, opts.Continue); err != nil {
			return ListResult{}, err
		}
	}
	ops := []clientv3.OpOption{clientv3.WithRange(clientv3.GetPrefixRangeEnd(prefix))}
	if rev > 0 {
		ops = append(ops, clientv3.WithRev(int64(rev)))
	}
	if opts.Limit > 0 {
		ops = append(ops, clientv3.WithLimit(opts.Limit))
	}
	resp, err := s.cli.Get(ctx, start, ops...)
	if err != nil {
		return ListResult{}, mapEtcdErr(err)
	}
	if rev == 0 {
		rev = uint64(resp.Header.Revision)
	}
	res := ListResult{Revision: rev, Items: make([]KeyValue, 0, len(resp.Kvs))}
	for _, kv := range resp.Kvs {
		res.Items = append(res.Items, KeyValue{Key: string(kv.Key), Value: kv.Value, Revision: uint64(kv.ModRevision)})
	}
	if resp.More && len(res.Items) > 0 {
		next := res.Items[len(res.Items)-1].Key + "\x00"
		if res.Continue, err = EncodeContinue(prefix, next, rev); err != nil {
			return ListResult{}, err
		}
		res.RemainingCount = resp.Count - int64(len(res.Items))
	}
	return res, nil
}

func (s *etcdStore) Create(ctx context.Context, key string, value []byte) (uint64, error) {
	if err := ValidateKey(key); err != nil {
		return 0, err
	}
	if err := checkValue(key, value, s.opts.MaxValueBytes); err != nil {
		return 0, err
	}
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(value))).
		Commit()
	if err != nil {
		return 0, s.writeErr(key, value, err)
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("%w: %s", ErrExists, key)
	}
	return uint64(resp.Header.Revision), nil
}

func (s *etcdStore) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	if err := ValidateKey(key); err != nil {
		return 0, err
	}
	if err := checkValue(key, value, s.opts.MaxValueBytes); err != nil {
		return 0, err
	}
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", int64(rev))).
		Then(clientv3.OpPut(key, string(value))).
		Else(clientv3.OpGet(key, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		return 0, s.writeErr(key, value, err)
	}
	if !resp.Succeeded {
		return 0, s.casFailure(key, rev, resp)
	}
	return uint64(resp.Header.Revision), nil
}

// writeErr is a failed put's error. A value under this store's limit
// can still be over the etcd server's (--max-request-bytes counts the
// key and the request around the value) or the client's message limit:
// the same refusal, typed the same.
func (s *etcdStore) writeErr(key string, value []byte, err error) error {
	if errors.Is(err, rpctypes.ErrGRPCRequestTooLarge) || errors.Is(err, rpctypes.ErrRequestTooLarge) ||
		status.Code(err) == codes.ResourceExhausted {
		return fmt.Errorf("%w (%v)", &ValueTooLargeError{Key: key, Size: len(value), Limit: s.opts.MaxValueBytes}, err)
	}
	return mapEtcdErr(err)
}

func (s *etcdStore) casFailure(key string, rev uint64, resp *clientv3.TxnResponse) error {
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	return fmt.Errorf("%w: %s is at revision %d, not %d", ErrConflict, key, kvs[0].ModRevision, rev)
}

func (s *etcdStore) Delete(ctx context.Context, key string, rev uint64) (KeyValue, error) {
	if err := ValidateKey(key); err != nil {
		return KeyValue{}, err
	}
	cmp := clientv3.Compare(clientv3.ModRevision(key), "=", int64(rev))
	if rev == 0 {
		cmp = clientv3.Compare(clientv3.CreateRevision(key), ">", 0)
	}
	resp, err := s.cli.Txn(ctx).
		If(cmp).
		Then(clientv3.OpDelete(key, clientv3.WithPrevKV())).
		Else(clientv3.OpGet(key, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		return KeyValue{}, mapEtcdErr(err)
	}
	if !resp.Succeeded {
		return KeyValue{}, s.casFailure(key, rev, resp)
	}
	prev := resp.Responses[0].GetResponseDeleteRange().PrevKvs
	if len(prev) == 0 {
		// Deleted between compare and delete cannot happen in one txn.
		return KeyValue{}, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	return KeyValue{Key: key, Value: prev[0].Value, Revision: uint64(resp.Header.Revision)}, nil
}

func (s *etcdStore) CurrentRevision(ctx context.Context) (uint64, error) {
	resp, err := s.cli.Get(ctx, "/", clientv3.WithCountOnly())
	if err != nil {
		return 0, mapEtcdErr(err)
	}
	return uint64(resp.Header.Revision), nil
}

func (s *etcdStore) Compact(ctx context.Context, rev uint64) error {
	_, err := s.cli.Compact(ctx, int64(rev), clientv3.WithCompactPhysical())
	if errors.Is(err, rpctypes.ErrCompacted) {
		return nil
	}
	return mapEtcdErr(err)
}

// compactLoop compacts to the revision seen one interval ago, so at least
// one interval of history stays for watch resumption.
func (s *etcdStore) compactLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.opts.CompactInterval)
	defer t.Stop()
	var last uint64
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if last > 0 {
			if err := s.Compact(ctx, last); err != nil {
				s.log.Warn("etcd compaction failed", "revision", last, "err", err)
			}
		}
		if cur, err := s.CurrentRevision(ctx); err == nil {
			last = cur
		}
		cancel()
	}
}

type etcdWatcher struct {
	out      chan Event
	err      error
	cancel   context.CancelFunc
	done     chan struct{}
	progress atomic.Uint64
}

func (w *etcdWatcher) Progress() uint64 { return w.progress.Load() }

func (w *etcdWatcher) Events() <-chan Event { return w.out }
func (w *etcdWatcher) Err() error {
	<-w.done
	return w.err
}
func (w *etcdWatcher) Stop() {
	w.cancel()
	<-w.done
}

func (s *etcdStore) Watch(ctx context.Context, prefix string, rev uint64) (Watcher, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	cur, err := s.CurrentRevision(ctx)
	if err != nil {
		return nil, err
	}
	if rev == 0 {
		rev = cur
	} else if rev > cur {
		return nil, fmt.Errorf("%w: %d > %d", ErrFutureRevision, rev, cur)
	}
	if rev < cur {
		// A read at the start revision fails the same way the watch would
		// if that history is compacted; ask first, so Watch itself reports it.
		if _, err := s.cli.Get(ctx, "/", clientv3.WithRev(int64(rev)), clientv3.WithCountOnly()); err != nil {
			return nil, mapEtcdErr(err)
		}
	}
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	wch := s.cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(int64(rev)+1), clientv3.WithPrevKV(), clientv3.WithProgressNotify())
	w := &etcdWatcher{out: make(chan Event, 100), cancel: cancel, done: make(chan struct{})}
	var first []Event
	go func() {
		defer close(w.done)
		defer close(w.out)
		defer cancel()
		w.progress.Store(rev)
		w.err = s.pump(ctx, wch, w.out, first, &w.progress)
	}()
	return w, nil
}

func watchRespErr(resp clientv3.WatchResponse) error {
	if resp.CompactRevision != 0 {
		return fmt.Errorf("%w: compacted at %d", ErrCompacted, resp.CompactRevision)
	}
	if err := resp.Err(); err != nil {
		return mapEtcdErr(err)
	}
	return nil
}

func convertEtcdEvents(evs []*clientv3.Event) []Event {
	out := make([]Event, 0, len(evs))
	for _, e := range evs {
		ev := Event{Key: string(e.Kv.Key), Revision: uint64(e.Kv.ModRevision)}
		if e.PrevKv != nil {
			ev.PrevValue = e.PrevKv.Value
		}
		switch {
		case e.Type == mvccpb.DELETE:
			ev.Type, ev.Value = Deleted, ev.PrevValue
		case e.Kv.CreateRevision == e.Kv.ModRevision:
			ev.Type, ev.Value = Added, e.Kv.Value
		default:
			ev.Type, ev.Value = Modified, e.Kv.Value
		}
		out = append(out, ev)
	}
	return out
}

// pump moves events from etcd to the watcher's channel through a bounded
// queue: a consumer that lets MaxWatchLag events pile up is ended.
func (s *etcdStore) pump(ctx context.Context, wch clientv3.WatchChan, out chan<- Event, pending []Event, progress *atomic.Uint64) error {
	// seen is the newest revision etcd has answered at; once everything
	// queued is sent, the watcher has progressed to it.
	var seen uint64
	for {
		if len(pending) == 0 && seen > progress.Load() {
			progress.Store(seen)
		}
		var send chan<- Event
		var next Event
		if len(pending) > 0 {
			send, next = out, pending[0]
		}
		select {
		case resp, ok := <-wch:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return errors.New("etcd watch closed")
			}
			if err := watchRespErr(resp); err != nil {
				return err
			}
			pending = append(pending, convertEtcdEvents(resp.Events)...)
			// Only a progress notification vouches for every event up to its
			// header revision; an event response from a watcher still
			// catching up may carry a newer one.
			if n := len(resp.Events); n > 0 {
				seen = max(seen, uint64(resp.Events[n-1].Kv.ModRevision))
			}
			if resp.IsProgressNotify() {
				seen = max(seen, uint64(resp.Header.Revision))
			}
			if len(pending) > s.opts.MaxWatchLag {
				return ErrWatcherTooSlow
			}
		case send <- next:
			pending = pending[1:]
		case <-ctx.Done():
			return nil
		}
	}
}

func (s *etcdStore) Close() error {
	s.closed.Do(func() { close(s.stop) })
	s.wg.Wait()
	return s.cli.Close()
}
