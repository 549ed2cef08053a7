package store

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math"
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
	// QuotaBytes, when set, bounds the etcd database's bytes in use (its
	// status' dbSizeInUse, which compaction lowers without a defrag):
	// past it, writes other than deletes fail with a SpaceError
	// (ErrQuotaExceeded), and history is compacted to the present every
	// few seconds until deletes bring it under. 0: only etcd's own quota
	// (its --quota-backend-bytes), whose NOSPACE alarm gets the same
	// error.
	QuotaBytes int64
	// Expire makes keys expire after their last write (see ExpiryRule),
	// with etcd leases as kube-apiserver attaches them to Events.
	Expire []ExpiryRule
	Logger *slog.Logger
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
	leases *leaseManager
	// inUse is the database's bytes in use as last read, when there is a
	// QuotaBytes; lastQuotaCompact is when the quota last compacted.
	inUse            atomic.Int64
	admitted         atomic.Int64 // bytes put since inUse was read
	overQuota        atomic.Bool
	refusals         atomic.Int64 // writes refused for the quota
	lastQuotaCompact time.Time
	// compactedRefusals and compactedAt are refusals and the revision at
	// the last compaction for the quota.
	compactedRefusals int64
	compactedAt       uint64
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
	if err := checkExpiryRules(opts.Expire); err != nil {
		return nil, fmt.Errorf("open etcd datastore %s: %w", opts.Endpoint, err)
	}
	if opts.QuotaBytes < 0 {
		return nil, fmt.Errorf("open etcd datastore %s: quota %d bytes is negative", opts.Endpoint, opts.QuotaBytes)
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
	s := &etcdStore{cli: cli, opts: opts, log: opts.Logger, stop: make(chan struct{}), leases: newLeaseManager(cli)}
	if opts.CompactInterval > 0 {
		s.wg.Add(1)
		go s.compactLoop()
	}
	if opts.QuotaBytes > 0 {
		if err := s.readInUse(ctx); err != nil {
			s.Close()
			return nil, fmt.Errorf("open etcd datastore %s: status: %w", opts.Endpoint, err)
		}
		s.wg.Add(1)
		go s.quotaLoop()
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
	put, err := s.put(ctx, key, value)
	if err != nil {
		return 0, err
	}
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(put).
		Commit()
	if err != nil {
		if rev, ok := s.appliedAnyway(ctx, err, key, value, 0); ok {
			return rev, nil
		}
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
	put, err := s.put(ctx, key, value)
	if err != nil {
		return 0, err
	}
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", int64(rev))).
		Then(put).
		Else(clientv3.OpGet(key, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		if rev, ok := s.appliedAnyway(ctx, err, key, value, rev); ok {
			return rev, nil
		}
		return 0, s.writeErr(key, value, err)
	}
	if !resp.Succeeded {
		return 0, s.casFailure(key, rev, resp)
	}
	return uint64(resp.Header.Revision), nil
}

// put is the put of a Create or Update: refused over the quota, with
// the lease of the key's ExpiryRule if it has one.
func (s *etcdStore) put(ctx context.Context, key string, value []byte) (clientv3.Op, error) {
	if q := s.opts.QuotaBytes; q > 0 {
		n := int64(len(key) + len(value))
		if used := s.inUse.Load() + s.admitted.Load(); used+n > q {
			s.refusals.Add(1)
			if !s.overQuota.Swap(true) {
				s.log.Error("etcd datastore over the quota: refusing writes other than deletes until deletes and compaction bring it under", "in_use", used, "quota", q)
			}
			return clientv3.Op{}, &SpaceError{Cause: ErrQuotaExceeded, Where: s.opts.Endpoint, Have: used, Limit: q, Deletes: true}
		}
		// Until the next status read, the bytes in use are what it said
		// and what was put since.
		s.admitted.Add(n)
		if s.overQuota.Swap(false) {
			s.log.Info("etcd datastore takes writes again", "in_use", s.inUse.Load(), "quota", q)
		}
	}
	ttl := ttlOf(s.opts.Expire, key)
	if ttl <= 0 {
		return clientv3.OpPut(key, string(value)), nil
	}
	id, err := s.leases.lease(ctx, ttl)
	if err != nil {
		return clientv3.Op{}, s.writeErr(key, value, err)
	}
	return clientv3.OpPut(key, string(value), clientv3.WithLease(id)), nil
}

// writeErr is a failed put's error. A value under this store's limit
// can still be over the etcd server's (--max-request-bytes counts the
// key and the request around the value) or the client's message limit:
// the same refusal, typed the same. etcd's NOSPACE alarm (its own quota)
// is a SpaceError; it shares the gRPC code of a message too large.
func (s *etcdStore) writeErr(key string, value []byte, err error) error {
	if isNoSpace(err) {
		return &SpaceError{Cause: ErrQuotaExceeded, Where: s.opts.Endpoint, Deletes: true, Backend: err}
	}
	if errors.Is(err, rpctypes.ErrGRPCRequestTooLarge) || errors.Is(err, rpctypes.ErrRequestTooLarge) ||
		status.Code(err) == codes.ResourceExhausted {
		return fmt.Errorf("%w (%v)", &ValueTooLargeError{Key: key, Size: len(value), Limit: s.opts.MaxValueBytes}, err)
	}
	return mapEtcdErr(err)
}

// appliedAnyway tells a put that etcd applied and then answered NOSPACE
// from one it refused: etcd applies the write whose apply finds the
// backend over its quota, raises the alarm and answers NOSPACE (only the
// writes after it are refused unapplied). Such a write is durable, so it
// is acknowledged as written: the key holds exactly its value, created
// by it (a create: after is 0) or modified after the revision it
// replaced (an update).
func (s *etcdStore) appliedAnyway(ctx context.Context, err error, key string, value []byte, after uint64) (uint64, bool) {
	if !isNoSpace(err) {
		return 0, false
	}
	resp, gerr := s.cli.Get(ctx, key)
	if gerr != nil || len(resp.Kvs) != 1 {
		return 0, false
	}
	kv := resp.Kvs[0]
	if !bytes.Equal(kv.Value, value) || uint64(kv.ModRevision) <= after || (after == 0 && kv.CreateRevision != kv.ModRevision) {
		return 0, false
	}
	s.log.Warn("etcd applied a write and then answered NOSPACE: the write is kept; writes after it are refused", "key", key, "revision", kv.ModRevision)
	return uint64(kv.ModRevision), true
}

func isNoSpace(err error) bool {
	return errors.Is(err, rpctypes.ErrNoSpace) || errors.Is(err, rpctypes.ErrGRPCNoSpace) ||
		rpctypes.ErrorDesc(err) == rpctypes.ErrorDesc(rpctypes.ErrGRPCNoSpace)
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

// readInUse reads the database's bytes in use from the first endpoint
// that answers.
func (s *etcdStore) readInUse(ctx context.Context) error {
	var errs []error
	for _, ep := range s.cli.Endpoints() {
		st, err := s.cli.Status(ctx, ep)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		inUse := st.DbSizeInUse
		if inUse == 0 {
			inUse = st.DbSize // etcd before 3.4 reports no size in use
		}
		s.inUse.Store(inUse)
		s.admitted.Store(0)
		return nil
	}
	return errors.Join(errs...)
}

// quotaLoop re-reads the size in use every second; while it is over the
// quota or writes are refused for it, it compacts history to the present
// every reclaimEvery (if anything was written since), since the writes
// that would let the periodic compaction catch up are the ones refused.
func (s *etcdStore) quotaLoop() {
	defer s.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := s.readInUse(ctx); err != nil {
			s.log.Warn("etcd datastore status", "err", err)
		}
		refusals := s.refusals.Load()
		pressed := s.inUse.Load() >= s.opts.QuotaBytes || refusals != s.compactedRefusals
		if pressed && time.Since(s.lastQuotaCompact) >= reclaimEvery {
			if cur, err := s.CurrentRevision(ctx); err == nil && cur != s.compactedAt {
				s.lastQuotaCompact, s.compactedRefusals, s.compactedAt = time.Now(), refusals, cur
				if err := s.Compact(ctx, cur); err != nil {
					s.log.Warn("etcd datastore over the quota: compaction failed", "err", err)
				} else {
					s.releaseFreedPages(ctx)
				}
			}
		}
		cancel()
	}
}

// releaseFreedPages makes etcd count the pages a compaction freed as
// free: its database (bbolt) frees them only when a later write
// transaction begins, and with writes refused there may be none. A
// lease granted and revoked writes without taking a revision; the two
// writes fall in two of etcd's batches (100 ms apart by default).
func (s *etcdStore) releaseFreedPages(ctx context.Context) {
	lease, err := s.cli.Grant(ctx, 60)
	if err != nil {
		return
	}
	time.Sleep(200 * time.Millisecond)
	s.cli.Revoke(ctx, lease.ID)
}

func (s *etcdStore) Close() error {
	s.closed.Do(func() { close(s.stop) })
	s.wg.Wait()
	return s.cli.Close()
}

// leaseManager hands out etcd leases for keys that expire, shared by
// writes close in time as kube-apiserver's does (its storage leaseManager,
// with its defaults): a lease is reused while it outlives the TTL by no
// more than 5 % of it (at most a minute) and holds under 1000 keys. So a
// key lives between its TTL and that much longer, and a busy writer does
// not grant a lease per write.
type leaseManager struct {
	cli *clientv3.Client
	mu  sync.Mutex
	// by TTL in seconds: the lease last granted, its expiry, its keys.
	cur map[int64]*sharedLease
}

type sharedLease struct {
	id       clientv3.LeaseID
	expires  time.Time
	attached int
}

const (
	leaseReuseFraction = 0.05
	leaseReuseMax      = 60 // seconds
	leaseMaxAttached   = 1000
)

func newLeaseManager(cli *clientv3.Client) *leaseManager {
	return &leaseManager{cli: cli, cur: map[int64]*sharedLease{}}
}

func (l *leaseManager) lease(ctx context.Context, ttl time.Duration) (clientv3.LeaseID, error) {
	secs := max(int64(math.Ceil(ttl.Seconds())), 1)
	reuse := min(int64(leaseReuseFraction*float64(secs)), leaseReuseMax)
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.cur[secs]; p != nil {
		valid := now.Add(time.Duration(secs) * time.Second).Before(p.expires)
		sufficient := now.Add(time.Duration(secs+reuse) * time.Second).After(p.expires)
		if valid && sufficient && p.attached < leaseMaxAttached {
			p.attached++
			return p.id, nil
		}
	}
	resp, err := l.cli.Grant(ctx, secs+reuse)
	if err != nil {
		return 0, err
	}
	l.cur[secs] = &sharedLease{id: resp.ID, expires: now.Add(time.Duration(secs+reuse) * time.Second), attached: 1}
	return resp.ID, nil
}
