package apiserver

import (
	"bytes"
	"container/heap"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"bonsai.dev/bonsai/store"
)

// sharedEvent is one stored event as every watcher of a resource sees it:
// decoded once, encoded once. Watchers must treat obj and prev as
// read-only.
type sharedEvent struct {
	once sync.Once
	obj  runtime.Object
	err  error
	// stored is the store's value at the event's revision (nil for a
	// deletion), set when the entry is made, under the cache's lock.
	stored []byte
	// filled is set once obj and err are, for readers that must not
	// wait for them (current).
	filled atomic.Bool
	// The object's encodings, each made once when a watcher first needs
	// it: [0] the whole object, [1] its PartialObjectMetadata.
	json     [2]lazyBytes
	pb       [2]lazyBytes
	prevOnce sync.Once
	prev     runtime.Object
	prevErr  error
}

type sharedEventKey struct {
	res *resource
	rev uint64
}

// eventCache shares decoding and encoding of recent events between the
// watchers of a resource: with N watchers, a write used to be decoded and
// encoded N times. Kept small: only events still being fanned out matter.
// It keeps the newest eventCacheKeep events, and newer ones than
// eventCacheAge up to eventCacheMax: in a burst of writes a slow watcher
// (a remote client, the garbage collector's) trails the fast ones by
// thousands of events, and each it reads after the cache let go of it
// was decoded and encoded once more for it alone.
type eventCache struct {
	mu sync.Mutex
	m  map[sharedEventKey]*sharedEvent
	// byRev holds the keys of m, the lowest revision first: the cache
	// lets go of the oldest revisions first, however recently they were
	// asked for. A watcher far behind the others asks for old events;
	// dropped in the order they came, each would push out one of the
	// newest, which the writes that follow need (a simulated pod's
	// status write came 0.1-0.6 s after its binding in the 1,000-node
	// scheduling burst, about 3,300 writes a second).
	byRev     revHeap
	keep, max int
	age       time.Duration
	now       func() time.Time
	// writing are the objects of writes under way, by the first byte of
	// their stored encoding (the store's event carries the very slice it
	// was given): their event's watchers take a copy of the writer's
	// object instead of decoding what it just encoded.
	writing map[*byte]offered
	// decoded counts the events decoded from the store's bytes;
	// reused the objects current copied instead of decoding.
	decoded, reused atomic.Int64
}

// offered is a writer's object, and the resource it was written as.
type offered struct {
	res *resource
	obj runtime.Object
}

type cachedKey struct {
	key sharedEventKey
	at  time.Time
}

// The cache is at most eventCacheMax entries during a burst (each a
// decoded object, its stored bytes and encodings: about 12 KB for a pod),
// and eventCacheKeep within eventCacheAge after it.
const (
	eventCacheKeep = 512
	eventCacheMax  = 2048
	eventCacheAge  = 2 * time.Second
)

func newEventCache(keep, max int, age time.Duration) *eventCache {
	return &eventCache{m: map[sharedEventKey]*sharedEvent{}, keep: keep, max: max, age: age, now: time.Now,
		writing: map[*byte]offered{}}
}

// offer hands obj, a built-in object whose protobuf encoding for the
// store is data, to the watchers of the write of data about to be made,
// so that they need not decode what the writer just encoded. done must
// be called as soon as the write returns, with the revision it wrote (0
// if it failed), before the writer changes obj again (its
// resourceVersion, say); obj must stay as it was encoded until then.
// Watchers get a shallow copy at the event's revision: its own metadata
// struct, so the writer's later changes to obj's own fields never reach
// them; nothing below those fields may change afterwards.
//
// The event can reach a watcher while the write is under way (the
// store's event carries the very slice it was given: writing is keyed by
// its first byte) or after it returned (done has then cached the event).
func (c *eventCache) offer(res *resource, data []byte, obj runtime.Object) (done func(rev uint64)) {
	if res.storage != nil || res.custom != nil || !bytes.HasPrefix(data, protobufPrefix) {
		return func(uint64) {}
	}
	k := &data[0]
	c.mu.Lock()
	c.writing[k] = offered{res, obj}
	c.mu.Unlock()
	return func(rev uint64) {
		var e *sharedEvent
		c.mu.Lock()
		if rev != 0 {
			key := sharedEventKey{res, rev}
			if e = c.m[key]; e == nil {
				e = c.addLocked(key)
			}
			e.stored = data
		}
		c.mu.Unlock()
		if e != nil {
			// A no-op if a watcher filled the entry first; while this
			// runs, a watcher filling it still finds obj in writing.
			e.fill(func() (runtime.Object, error) {
				if cp := c.copyAt(res, obj, rev); cp != nil {
					return cp, nil
				}
				return decodeStored(res, store.KeyValue{Value: data, Revision: rev})
			})
		}
		c.mu.Lock()
		delete(c.writing, k)
		c.mu.Unlock()
	}
}

// copyAt is the watchers' copy of a writer's object at revision rev.
func (c *eventCache) copyAt(res *resource, obj runtime.Object, rev uint64) runtime.Object {
	cp := shallowCopy(obj)
	if cp == nil {
		return nil
	}
	cp.GetObjectKind().SetGroupVersionKind(res.gvk())
	setResourceVersion(cp, rev)
	return cp
}

// taken is the writer's object for an event whose value is being written
// now, as decodeStored would give it; nil when no writer offered it.
func (c *eventCache) taken(res *resource, ev store.Event) runtime.Object {
	if len(ev.Value) == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// A kind stored as another (events.k8s.io Events as core ones)
	// shares the store's events: its watchers decode their own shape.
	o, ok := c.writing[&ev.Value[0]]
	if !ok || o.res != res {
		return nil
	}
	return c.copyAt(res, o.obj, ev.Revision)
}

func (c *eventCache) get(res *resource, ev store.Event) *sharedEvent {
	k := sharedEventKey{res, ev.Revision}
	c.mu.Lock()
	e, ok := c.m[k]
	if !ok {
		e = c.addLocked(k)
		if ev.Type != store.Deleted {
			e.stored = ev.Value
		}
	}
	c.mu.Unlock()
	e.fill(func() (runtime.Object, error) {
		if ev.Type != store.Deleted {
			if obj := c.taken(res, ev); obj != nil {
				return obj, nil
			}
		}
		c.decoded.Add(1)
		return decodeStored(res, store.KeyValue{Key: ev.Key, Value: ev.Value, Revision: ev.Revision})
	})
	return e
}

// fill sets the event's object, once.
func (e *sharedEvent) fill(f func() (runtime.Object, error)) {
	e.once.Do(func() {
		e.obj, e.err = f()
		e.filled.Store(true)
	})
}

// current is a private copy of the object that res's write at revision
// rev left, as decodeStored would give it, and the value the store holds
// for it; nil when the cache no longer holds them: a write reads what it
// is about to change without decoding it, or reading it from the store,
// as kube-apiserver's GuaranteedUpdate takes its object from the watch
// cache. A revision is one write of one key, so the entry is the key's.
func (c *eventCache) current(res *resource, rev uint64) (runtime.Object, []byte) {
	c.mu.Lock()
	e := c.m[sharedEventKey{res, rev}]
	var stored []byte
	if e != nil {
		stored = e.stored
	}
	c.mu.Unlock()
	if e == nil || stored == nil || !e.filled.Load() || e.obj == nil || e.err != nil {
		return nil, nil
	}
	c.reused.Add(1)
	return e.obj.DeepCopyObject(), stored
}

// addLocked adds an empty entry for k, dropping the lowest revisions when
// the cache is full and those past keep that are older than age. An
// entry older than all a full cache holds is not kept at all: it is the
// caller's alone.
func (c *eventCache) addLocked(k sharedEventKey) *sharedEvent {
	now := c.now()
	e := &sharedEvent{}
	if len(c.byRev) >= c.max && c.max > 0 && k.rev < c.byRev[0].key.rev {
		return e
	}
	for len(c.byRev) > 0 && (len(c.byRev) >= c.max || len(c.byRev) > c.keep && now.Sub(c.byRev[0].at) > c.age) {
		delete(c.m, heap.Pop(&c.byRev).(cachedKey).key)
	}
	heap.Push(&c.byRev, cachedKey{key: k, at: now})
	c.m[k] = e
	return e
}

// revHeap orders cached keys by revision, the lowest first.
type revHeap []cachedKey

func (h revHeap) Len() int           { return len(h) }
func (h revHeap) Less(i, j int) bool { return h[i].key.rev < h[j].key.rev }
func (h revHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *revHeap) Push(x any)        { *h = append(*h, x.(cachedKey)) }
func (h *revHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// lazyBytes is an encoding made on first use.
type lazyBytes struct {
	once sync.Once
	b    []byte
	err  error
}

func (l *lazyBytes) get(encode func() ([]byte, error)) ([]byte, error) {
	l.once.Do(func() { l.b, l.err = encode() })
	return l.b, l.err
}

// shape is what a watcher is sent: the object, or (metadataOnly) its
// PartialObjectMetadata, built from the shared object without changing it.
func (e *sharedEvent) shape(metadataOnly bool) runtime.Object {
	if metadataOnly {
		return partialMetadata(e.obj)
	}
	return e.obj
}

func shapeIndex(metadataOnly bool) int {
	if metadataOnly {
		return 1
	}
	return 0
}

// jsonBytes encodes the event's object once for JSON watchers; watchers
// of other formats, and events every watcher filters out, never pay for
// it.
func (e *sharedEvent) jsonBytes(metadataOnly bool) ([]byte, error) {
	return e.json[shapeIndex(metadataOnly)].get(func() ([]byte, error) { return json.Marshal(e.shape(metadataOnly)) })
}

// previous decodes the object before the change, for selector filtering.
func (e *sharedEvent) previous(res *resource, ev store.Event) (runtime.Object, error) {
	e.prevOnce.Do(func() {
		e.prev, e.prevErr = decodeStored(res, store.KeyValue{Key: ev.Key, Value: ev.PrevValue, Revision: ev.Revision})
	})
	return e.prev, e.prevErr
}

// protobuf encodes the event's object once for protobuf watchers.
func (e *sharedEvent) protobuf(metadataOnly bool) ([]byte, error) {
	return e.pb[shapeIndex(metadataOnly)].get(func() ([]byte, error) { return protobufBytes(e.shape(metadataOnly)) })
}

// frame is the watch frame of the event as typ (a JSON line when
// asJSON) in parts: the event's own head (and tail) around the object's
// encoding, made once for every watcher that sees it.
func (e *sharedEvent) frame(typ watch.EventType, metadataOnly, asJSON bool) (head, body, tail []byte, err error) {
	if asJSON {
		js, err := e.jsonBytes(metadataOnly)
		if err != nil {
			return nil, nil, nil, err
		}
		head, tail := jsonFrameParts(typ)
		return head, js, tail, nil
	}
	pb, err := e.protobuf(metadataOnly)
	if err != nil {
		return nil, nil, nil, err
	}
	return protobufFrameHead(typ, len(pb)), pb, nil, nil
}
