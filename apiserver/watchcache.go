package apiserver

import (
	"bytes"
	"encoding/json"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"

	"bonsai.dev/bonsai/store"
)

// sharedEvent is one stored event as every watcher of a resource sees it:
// decoded once, encoded once. Watchers must treat obj and prev as
// read-only.
type sharedEvent struct {
	once     sync.Once
	obj      runtime.Object
	err      error
	jsonOnce sync.Once
	json     []byte // obj as JSON
	jsonErr  error
	pbOnce   sync.Once
	pb       []byte // obj in Kubernetes protobuf
	pbErr    error
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

// jsonBytes encodes the object once for JSON watchers; protobuf and
// metadata watchers, and events every watcher filters out, never pay
// for it.
func (e *sharedEvent) jsonBytes() ([]byte, error) {
	e.jsonOnce.Do(func() {
		e.json, e.jsonErr = json.Marshal(e.obj)
	})
	return e.json, e.jsonErr
}

// previous decodes the object before the change, for selector filtering.
func (e *sharedEvent) previous(res *resource, ev store.Event) (runtime.Object, error) {
	e.prevOnce.Do(func() {
		e.prev, e.prevErr = decodeStored(res, store.KeyValue{Key: ev.Key, Value: ev.PrevValue, Revision: ev.Revision})
	})
	return e.prev, e.prevErr
}

// protobuf encodes the object once for protobuf watchers.
func (e *sharedEvent) protobuf() ([]byte, error) {
	e.pbOnce.Do(func() {
		var b bytes.Buffer
		e.pbErr = protobufSerializer.Encode(e.obj, &b)
		e.pb = b.Bytes()
	})
	return e.pb, e.pbErr
}
