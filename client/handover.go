package client

import (
	"context"
	"io"
	"reflect"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// Watches handed over as objects. A watch of an informer in `bonsai
// server` goes through the API server's whole handler chain like any
// request, but its events come back as objects on a channel instead of
// being encoded by the server, piped, and decoded again by the client:
// the object a watch event carries is already in the server's memory.
// The client's objects are its own deep copies, so nothing it does to
// them reaches the server, as with decoding.

// HandsOverWatches is implemented by the transport of a rest.Config
// whose requests the API server serves in the same process (see
// apiserver.Server.ClientConfig).
type HandsOverWatches interface {
	HandsOverWatches()
}

func handsOverWatches(cfg *rest.Config) bool {
	_, ok := cfg.Transport.(HandsOverWatches)
	return ok
}

type watchSinkKey struct{}

// WatchSink carries one watch's events from the API server to the
// in-process client that asked for them.
type WatchSink struct {
	ch       chan watch.Event
	done     chan struct{} // the client stopped
	finished chan struct{} // the server sends nothing more
	accepted atomic.Bool
	// copy makes the client's own object of a server's one.
	copy func(runtime.Object) runtime.Object
}

// WatchSinkFrom is the sink an in-process watch request asks its events
// to be handed over to, nil if none. Only the API server calls it, and
// only for requests from its own process.
func WatchSinkFrom(ctx context.Context) *WatchSink {
	s, _ := ctx.Value(watchSinkKey{}).(*WatchSink)
	return s
}

// Accept tells the client its events come through the sink; the server
// calls it before it answers the request, and Finish once it has sent
// the last event.
func (s *WatchSink) Accept() { s.accepted.Store(true) }

// Finish ends the watch's events.
func (s *WatchSink) Finish() { close(s.finished) }

// Send hands an event over; obj may be shared with other watchers and is
// never changed. False once the client stopped watching.
func (s *WatchSink) Send(typ watch.EventType, obj runtime.Object) bool {
	select {
	case <-s.done:
		return false
	default:
	}
	ev := watch.Event{Type: typ, Object: s.copy(obj)}
	select {
	case s.ch <- ev:
		return true
	case <-s.done:
		return false
	}
}

// handedOverWatch is the client's end: a watch.Interface.
type handedOverWatch struct {
	sink   *WatchSink
	cancel context.CancelFunc
	once   sync.Once
}

func (w *handedOverWatch) ResultChan() <-chan watch.Event { return w.sink.ch }

func (w *handedOverWatch) Stop() {
	w.once.Do(func() {
		close(w.sink.done)
		w.cancel()
	})
}

// WatchHandedOver starts the watch req describes (options.Watch set)
// with its events handed over, each object passed through copy. When the
// server did not take the sink, it starts the watch with fallback.
func WatchHandedOver(ctx context.Context, req *rest.Request, copy func(runtime.Object) runtime.Object, fallback func(context.Context) (watch.Interface, error)) (watch.Interface, error) {
	sink := &WatchSink{ch: make(chan watch.Event, 16), done: make(chan struct{}), finished: make(chan struct{}), copy: copy}
	wctx, cancel := context.WithCancel(context.WithValue(ctx, watchSinkKey{}, sink))
	body, err := req.Stream(wctx)
	if err != nil {
		cancel()
		return nil, err
	}
	if !sink.accepted.Load() {
		cancel()
		body.Close()
		return fallback(ctx)
	}
	w := &handedOverWatch{sink: sink, cancel: cancel}
	go func() {
		// The server writes nothing: the body ends when its handler
		// returns, or when Stop cancels the request.
		_, _ = io.Copy(io.Discard, body)
		body.Close()
		<-sink.finished
		close(sink.ch)
		w.Stop()
	}()
	return w, nil
}

// cacheCopy is the object an informer caches for obj, as decoding the
// event would give it and StripManagedFields would leave it: a deep
// copy without managedFields (not copied at all) and without its kind.
func cacheCopy(obj runtime.Object) runtime.Object {
	// The kinds of every pod's events first: no shallow copy of the
	// whole object on the way.
	switch o := obj.(type) {
	case *corev1.Pod:
		out := &corev1.Pod{}
		copyMetaWithoutManagedFields(&o.ObjectMeta, &out.ObjectMeta)
		o.Spec.DeepCopyInto(&out.Spec)
		o.Status.DeepCopyInto(&out.Status)
		return out
	case *metav1.PartialObjectMetadata:
		out := &metav1.PartialObjectMetadata{}
		copyMetaWithoutManagedFields(&o.ObjectMeta, &out.ObjectMeta)
		return out
	}
	if v := reflect.ValueOf(obj); v.Kind() == reflect.Pointer && v.Elem().Kind() == reflect.Struct {
		c := reflect.New(v.Elem().Type())
		c.Elem().Set(v.Elem())
		if cp, ok := c.Interface().(runtime.Object); ok {
			if m, err := meta.Accessor(cp); err == nil {
				m.SetManagedFields(nil)
				obj = cp
			}
		}
	}
	out := obj.DeepCopyObject()
	out.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	return out
}

// copyMetaWithoutManagedFields deep-copies in to out, but for its
// managedFields.
func copyMetaWithoutManagedFields(in, out *metav1.ObjectMeta) {
	m := *in
	m.ManagedFields = nil
	m.DeepCopyInto(out)
}

// exactCopy is the object decoding the event would give: a deep copy
// without its kind.
func exactCopy(obj runtime.Object) runtime.Object {
	out := obj.DeepCopyObject()
	out.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	return out
}
