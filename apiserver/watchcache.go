package apiserver

import (
	"bytes"
	"encoding/json"
	"sync"

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
	// The object's encodings, each made once when a watcher first needs
	// it: [0] the whole object, [1] its PartialObjectMetadata.
	json [2]lazyBytes
	pb   [2]lazyBytes
	// Whole watch frames, by encoding (protobuf, JSON), shape and event
	// type (added, modified, deleted): every watcher of the same kind of
	// stream writes the same bytes.
	frames   [2][2][3]lazyBytes
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
type eventCache struct {
	mu    sync.Mutex
	m     map[sharedEventKey]*sharedEvent
	ring  []sharedEventKey
	next  int
	limit int
}

func newEventCache(limit int) *eventCache {
	return &eventCache{m: map[sharedEventKey]*sharedEvent{}, ring: make([]sharedEventKey, limit), limit: limit}
}

func (c *eventCache) get(res *resource, ev store.Event) *sharedEvent {
	k := sharedEventKey{res, ev.Revision}
	c.mu.Lock()
	e, ok := c.m[k]
	if !ok {
		e = &sharedEvent{}
		if old := c.ring[c.next]; old.res != nil {
			delete(c.m, old)
		}
		c.ring[c.next] = k
		c.next = (c.next + 1) % c.limit
		c.m[k] = e
	}
	c.mu.Unlock()
	e.once.Do(func() {
		e.obj, e.err = decodeStored(res, store.KeyValue{Key: ev.Key, Value: ev.Value, Revision: ev.Revision})
	})
	return e
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
	return e.pb[shapeIndex(metadataOnly)].get(func() ([]byte, error) {
		var b bytes.Buffer
		err := protobufSerializer.Encode(e.shape(metadataOnly), &b)
		return b.Bytes(), err
	})
}

// frame is the watch frame of the event as typ (a JSON line when
// asJSON), made once for every watcher that sees it so.
func (e *sharedEvent) frame(typ watch.EventType, metadataOnly, asJSON bool) ([]byte, error) {
	encode := func() ([]byte, error) {
		if asJSON {
			js, err := e.jsonBytes(metadataOnly)
			if err != nil {
				return nil, err
			}
			return jsonFrame(typ, js), nil
		}
		pb, err := e.protobuf(metadataOnly)
		if err != nil {
			return nil, err
		}
		return protobufFrame(typ, pb), nil
	}
	t := 0
	switch typ {
	case watch.Added:
	case watch.Modified:
		t = 1
	case watch.Deleted:
		t = 2
	default:
		return encode()
	}
	f := 0
	if asJSON {
		f = 1
	}
	return e.frames[f][shapeIndex(metadataOnly)][t].get(encode)
}
