// Package store owns bonsai's single source of truth: a versioned key-value
// store with watch, shaped like etcd's MVCC. It knows nothing about API
// objects; values are opaque bytes and the API server encodes them.
//
// One global, strictly increasing revision orders every write. An object's
// resourceVersion is the revision of its last write. Reads and lists happen at
// one revision; watches deliver events in revision order, strictly after the
// revision they start from.
//
// Two backends implement Store: badger (embedded, the default) and etcd (for
// scale-out). Both pass the same conformance suite.
package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Store is the interface the API server uses.
type Store interface {
	// Get returns the current value of key, or ErrNotFound.
	Get(ctx context.Context, key string) (KeyValue, error)
	// List returns the keys under prefix (which must end in "/"), in key
	// order, all read at one revision. A Continue token from a previous page
	// keeps reading at that page's revision.
	List(ctx context.Context, prefix string, opts ListOptions) (ListResult, error)
	// Create writes key if it does not exist (ErrExists otherwise) and returns
	// the new revision.
	Create(ctx context.Context, key string, value []byte) (uint64, error)
	// Update replaces key's value if its current revision is rev (ErrConflict
	// otherwise, ErrNotFound if absent) and returns the new revision.
	Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error)
	// Delete removes key if its current revision is rev, or unconditionally
	// when rev is 0. It returns the deleted value with the revision of the
	// deletion.
	Delete(ctx context.Context, key string, rev uint64) (KeyValue, error)
	// Watch streams events under prefix with revisions strictly above rev
	// (0: from the current revision). A start older than the compacted
	// revision fails with ErrCompacted. The watch ends when ctx is done or
	// Stop is called; a watcher that falls too far behind ends with
	// ErrWatcherTooSlow so that its client re-lists.
	Watch(ctx context.Context, prefix string, rev uint64) (Watcher, error)
	// CurrentRevision returns the revision of the newest acknowledged write.
	CurrentRevision(ctx context.Context) (uint64, error)
	// Compact discards history at and below rev: reads, lists and watches
	// that need an older revision fail with ErrCompacted.
	Compact(ctx context.Context, rev uint64) error
	// Close releases the store. Writes in flight finish first.
	Close() error
}

// ValueSkipper is implemented by stores that can leave a value unread:
// GetUnless is Get, except that when have, called with the key's
// current revision, says the caller holds that revision's value
// already, the KeyValue comes back without it (Value nil). A write that
// finds what it is about to change in a cache of recent writes needs
// only the revision.
type ValueSkipper interface {
	GetUnless(ctx context.Context, key string, have func(rev uint64) bool) (KeyValue, error)
}

// GetUnless is st's GetUnless, or its Get (the value read whatever
// have says) when it has none.
func GetUnless(ctx context.Context, st Store, key string, have func(rev uint64) bool) (KeyValue, error) {
	if vs, ok := st.(ValueSkipper); ok {
		return vs.GetUnless(ctx, key, have)
	}
	return st.Get(ctx, key)
}

// Replacer is implemented by stores that can take the value a
// conditional update replaces from its caller, who read it at rev,
// instead of reading it back for the change's event (Event.PrevValue).
// prev must be the value stored at rev: the store trusts it.
type Replacer interface {
	Replace(ctx context.Context, key string, value []byte, rev uint64, prev []byte) (uint64, error)
}

// Replace is st's Replace, or its Update when it has none or prev is
// nil.
func Replace(ctx context.Context, st Store, key string, value []byte, rev uint64, prev []byte) (uint64, error) {
	if r, ok := st.(Replacer); ok && prev != nil {
		return r.Replace(ctx, key, value, rev, prev)
	}
	return st.Update(ctx, key, value, rev)
}

// KeyValue is a key at one revision. For a deleted key returned by Delete,
// Value is its last value and Revision the revision of the deletion.
type KeyValue struct {
	Key      string
	Value    []byte
	Revision uint64
}

// EventType says what a watch event is.
type EventType int

const (
	Added EventType = iota + 1
	Modified
	Deleted
)

func (t EventType) String() string {
	switch t {
	case Added:
		return "ADDED"
	case Modified:
		return "MODIFIED"
	case Deleted:
		return "DELETED"
	}
	return fmt.Sprintf("EventType(%d)", int(t))
}

// Event is one change to one key. Value is the new value (for Deleted: the
// last value before deletion); PrevValue is the value before the change (nil
// for Added). Revision is the revision of the change.
type Event struct {
	Type      EventType
	Key       string
	Value     []byte
	PrevValue []byte
	Revision  uint64
}

// Watcher is an open watch. Events is closed when the watch ends; Err then
// says why (nil after Stop or a cancelled context).
type Watcher interface {
	Events() <-chan Event
	Err() error
	Stop()
	// Progress is a revision up to which every event under the watched
	// prefix has been put on Events: once Events is drained, the watcher
	// has seen everything at or below it, even if nothing under the prefix
	// changed (what bookmarks carry).
	Progress() uint64
}

// ListOptions narrow a List.
type ListOptions struct {
	// Limit caps the items returned (0: no limit).
	Limit int64
	// Continue is the token of the previous page.
	Continue string
	// Revision reads at this exact revision (0: the current one). Ignored
	// when Continue is set.
	Revision uint64
}

// ListResult is one page of a List.
type ListResult struct {
	Items []KeyValue
	// Revision is the revision every item of every page was read at.
	Revision uint64
	// Continue is set when more items follow.
	Continue string
	// RemainingCount is how many items follow this page.
	RemainingCount int64
}

// Errors, tested with errors.Is. The API server maps them to Kubernetes
// status codes: NotFound 404, Exists 409 AlreadyExists, Conflict 409,
// Compacted and WatcherTooSlow 410 Gone (Expired), InvalidKey and
// InvalidContinue 400, ValueTooLarge 413, QuotaExceeded and DiskFull 500
// (what kube-apiserver answers for etcd's NOSPACE alarm).
var (
	ErrNotFound        = errors.New("key not found")
	ErrExists          = errors.New("key already exists")
	ErrConflict        = errors.New("revision conflict: the object has been modified")
	ErrCompacted       = errors.New("required revision has been compacted")
	ErrFutureRevision  = errors.New("required revision is newer than the current revision")
	ErrWatcherTooSlow  = errors.New("watcher fell too far behind")
	ErrInvalidKey      = errors.New("invalid key")
	ErrInvalidContinue = errors.New("invalid continue token")
	ErrClosed          = errors.New("store is closed")
	ErrValueTooLarge   = errors.New("value too large")
	// ErrQuotaExceeded: the store is over its quota (a SpaceError says
	// by how much); writes other than deletes are refused until
	// deletes and compaction bring it under.
	ErrQuotaExceeded = errors.New("database space exceeded")
	// ErrDiskFull: the file system under the store has too little room
	// left to write safely (a SpaceError says how much); writes are
	// refused until there is room again.
	ErrDiskFull = errors.New("no space left on device")
)

// DefaultMaxValueBytes is the largest value a store takes unless told
// otherwise: etcd's default request limit (--max-request-bytes, 1.5 MiB),
// so that what fits one backend fits the other.
const DefaultMaxValueBytes = 1572864

// ValueTooLargeError is a write refused because its value is over the
// store's limit; nothing was written. It is ErrValueTooLarge to
// errors.Is.
type ValueTooLargeError struct {
	Key         string
	Size, Limit int
}

func (e *ValueTooLargeError) Error() string {
	return fmt.Sprintf("%v: %s is %d bytes, limit is %d", ErrValueTooLarge, e.Key, e.Size, e.Limit)
}

func (e *ValueTooLargeError) Is(target error) bool { return target == ErrValueTooLarge }

// checkValue refuses a value over limit before anything is queued: a
// backend must never be handed one (badger fails its whole commit on a
// value over its log file size, etcd refuses the request).
func checkValue(key string, value []byte, limit int) error {
	if len(value) > limit {
		return &ValueTooLargeError{Key: key, Size: len(value), Limit: limit}
	}
	return nil
}

// SpaceError is a write refused for want of space; nothing was written.
// It is its Cause (ErrQuotaExceeded or ErrDiskFull) to errors.Is. Its
// message says what is full and what to do, for the API server to pass
// on as it is.
type SpaceError struct {
	Cause error
	// Where is what is full: the store's directory, or the etcd servers.
	Where string
	// For ErrQuotaExceeded: the store's size and its quota. For
	// ErrDiskFull: the bytes free on the file system and the bytes the
	// store keeps free there. Zero when unknown (etcd's own alarm).
	Have, Limit int64
	// Deletes says whether deletes still go through.
	Deletes bool
	// Backend is the backend's own error, if it refused the write.
	Backend error
}

func (e *SpaceError) Error() string {
	var b strings.Builder
	switch {
	case e.Cause == ErrQuotaExceeded && e.Backend != nil:
		// etcd's own quota (its --quota-backend-bytes): its NOSPACE
		// alarm stays raised until an operator disarms it.
		fmt.Fprintf(&b, "etcdserver: mvcc: database space exceeded: the etcd datastore %s is over its own quota (etcd's --quota-backend-bytes) and refuses writes other than deletes; "+
			"delete objects you no longer need, compact and defragment etcd (etcdctl defrag), then disarm its NOSPACE alarm (etcdctl alarm disarm)", e.Where)
	case e.Cause == ErrQuotaExceeded:
		fmt.Fprintf(&b, "mvcc: database space exceeded: the store (%s) holds %s and its quota (--quota-backend-bytes) is %s; writes other than deletes are refused. "+
			"Delete objects you no longer need: writes resume by themselves once compaction brings the store under its quota; or restart bonsai with a larger --quota-backend-bytes", e.Where, mib(e.Have), mib(e.Limit))
	default:
		what := "writes other than deletes are"
		if !e.Deletes {
			what = "all writes are"
		}
		fmt.Fprintf(&b, "no space left on device: the file system holding the store (%s) has %s free, less than the %s the store keeps free to write safely; %s refused. "+
			"Free space on that file system (old container logs, unused images, other files): writes resume by themselves when there is room again", e.Where, mib(e.Have), mib(e.Limit), what)
	}
	if e.Backend != nil && e.Cause != ErrQuotaExceeded {
		fmt.Fprintf(&b, " (%v)", e.Backend)
	}
	return b.String()
}

func (e *SpaceError) Is(target error) bool { return target == e.Cause }

// mib prints a size in MiB, with one decimal below 10 MiB.
func mib(n int64) string {
	if n < 10<<20 {
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d MiB", n>>20)
}

// ExpiryRule makes every key under Prefix expire TTL after its last
// write, as kube-apiserver's --event-ttl does for Events: the store
// deletes it on its own, at a revision of its own, with a Deleted event
// as for any delete. Each write restarts the TTL. Expiry is not exact:
// a key goes within about a second of its time on badger and within
// etcd's lease granularity (whole seconds, leases shared by writes close
// in time, as kube-apiserver shares them) on etcd.
type ExpiryRule struct {
	Prefix string
	TTL    time.Duration
}

// checkExpiryRules checks rules for a backend's options.
func checkExpiryRules(rules []ExpiryRule) error {
	for _, r := range rules {
		if err := ValidatePrefix(r.Prefix); err != nil {
			return fmt.Errorf("expiry rule: %w", err)
		}
		if r.TTL <= 0 {
			return fmt.Errorf("expiry rule for %s: TTL %v must be positive", r.Prefix, r.TTL)
		}
	}
	return nil
}

// ttlOf is the TTL of key under rules, 0 if none applies.
func ttlOf(rules []ExpiryRule, key string) time.Duration {
	for _, r := range rules {
		if strings.HasPrefix(key, r.Prefix) {
			return r.TTL
		}
	}
	return 0
}

// MaxKeyLen bounds keys: far above any Kubernetes key, well below badger's
// limit.
const MaxKeyLen = 4096

// ValidateKey checks a key for Get, Create, Update and Delete.
func ValidateKey(key string) error {
	if err := validatePath(key); err != nil {
		return err
	}
	if strings.HasSuffix(key, "/") {
		return fmt.Errorf("%w %q: must not end in /", ErrInvalidKey, key)
	}
	return nil
}

// ValidatePrefix checks a prefix for List and Watch.
func ValidatePrefix(prefix string) error {
	if err := validatePath(prefix); err != nil {
		return err
	}
	if !strings.HasSuffix(prefix, "/") {
		return fmt.Errorf("%w %q: a prefix must end in /", ErrInvalidKey, prefix)
	}
	return nil
}

func validatePath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	case p[0] != '/':
		return fmt.Errorf("%w %q: must start with /", ErrInvalidKey, p)
	case len(p) > MaxKeyLen:
		return fmt.Errorf("%w: longer than %d bytes", ErrInvalidKey, MaxKeyLen)
	case strings.IndexByte(p, 0) >= 0:
		return fmt.Errorf("%w %q: contains a NUL byte", ErrInvalidKey, p)
	case strings.Contains(p, "//"):
		return fmt.Errorf("%w %q: empty path segment", ErrInvalidKey, p)
	}
	for _, seg := range strings.Split(strings.Trim(p, "/"), "/") {
		if seg == "." || seg == ".." {
			return fmt.Errorf("%w %q: path segment %q", ErrInvalidKey, p, seg)
		}
	}
	return nil
}
