package apiserver

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/store"
)

// defaultBookmarkInterval is how often a watch that asked for bookmarks
// gets one.
const defaultBookmarkInterval = 30 * time.Second

// bookmarkBeforeTimeout is how long before timeoutSeconds ends a watch
// that asked for bookmarks it gets its last one (kube-apiserver's figure).
const bookmarkBeforeTimeout = 2 * time.Second

// initialEventsEndAnnotation marks the bookmark that ends a watch's initial
// events (sendInitialEvents=true), as client-go's watch-list expects.
const initialEventsEndAnnotation = "k8s.io/initial-events-end"

type watchEvent struct {
	Type   watch.EventType `json:"type"`
	Object any             `json:"object"`
}

func (s *Server) watch(w http.ResponseWriter, r *http.Request, ri requestInfo, res *resource) error {
	format, err := negotiate(r, res, true)
	if err != nil {
		return err
	}
	o, err := parseListOptions(r, res, true)
	if err != nil {
		return err
	}
	if ri.name != "" {
		// A watch of one object (the legacy /watch/.../name path).
		o.fields = fields.AndSelectors(o.fields, fields.OneTermEqualSelector("metadata.name", ri.name))
		o.filtering = true
	}
	ctx := r.Context()
	ended := s.watchesContext().Done()
	var gone <-chan struct{} // a custom resource's CRD changed or went
	if res.custom != nil {
		gone = res.custom.Gone()
	}
	var deadline time.Time
	// A negative timeout ends the watch at once, as in kube-apiserver.
	if o.timeoutSeconds != 0 {
		var cancel context.CancelFunc
		deadline = time.Now().Add(time.Duration(o.timeoutSeconds) * time.Second)
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	// Initial state: synthetic ADDED events for what exists now, unless the
	// client resumes from a resourceVersion.
	var initial []runtime.Object
	var start uint64
	sendInitial := o.rv == "" || o.rv == "0"
	if o.sendInitial != nil {
		sendInitial = *o.sendInitial
	}
	if sendInitial {
		lo := o
		lo.limit, lo.cont, lo.rvMatch = 0, "", ""
		lo.metadataOnly = format.metadataOnly()
		if o.resourceVersion > 0 {
			lo.rvMatch = metav1.ResourceVersionMatchNotOlderThan
		}
		items, lm, err := s.listObjects(ctx, res, ri.namespace, lo)
		if err != nil {
			return err
		}
		initial = items
		start, _ = strconv.ParseUint(lm.ResourceVersion, 10, 64)
	} else if o.resourceVersion > 0 {
		start = o.resourceVersion
	} else if start, err = s.cfg.Store.CurrentRevision(ctx); err != nil {
		return apierrors.NewInternalError(err)
	}

	if format.protobuf() {
		w.Header().Set("Content-Type", protobufContentType+";stream=watch")
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	sw := &watchStream{s: s, r: r, w: w, res: res, format: format, enc: json.NewEncoder(w), frames: format.protobuf()}
	sw.flusher, _ = w.(http.Flusher)
	if sink := client.WatchSinkFrom(r.Context()); sink != nil && format != outTable {
		if fromInProcess(r) {
			sw.sink = sink
			sink.Accept()
			s.handingOver.Add(1)
			defer func() {
				sink.Finish()
				s.handingOver.Add(-1)
			}()
		}
	}

	sw2, err := s.cfg.Store.Watch(ctx, res.prefix(ri.namespace), start)
	if err != nil {
		w.WriteHeader(http.StatusOK)
		if errors.Is(err, store.ErrCompacted) {
			sw.sendStatus(apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%s)", start, "compacted")))
		} else {
			sw.sendStatus(storeError(err, res, ""))
		}
		return nil
	}
	defer sw2.Stop()
	w.WriteHeader(http.StatusOK)
	sw.flush()
	for i, obj := range initial {
		sw.more = i < len(initial)-1
		if !sw.send(watch.Added, obj) {
			return nil
		}
	}
	sw.more = false
	last := start
	if o.sendInitial != nil && *o.sendInitial && o.bookmarks {
		if !sw.bookmark(last, true) {
			return nil
		}
	}
	var tick, beforeEnd <-chan time.Time
	if o.bookmarks {
		t := time.NewTicker(s.bookmarkEvery)
		defer t.Stop()
		tick = t.C
		// As kube-apiserver does, one more bookmark shortly before
		// timeoutSeconds ends the watch: the client's next watch then
		// resumes from the latest revision, however quiet the resource
		// was. Clients that watch with short timeouts (the Python
		// client's watch.stream with timeout_seconds, scripts polling in
		// a loop) would otherwise never see a bookmark at all.
		if !deadline.IsZero() {
			if d := time.Until(deadline) - bookmarkBeforeTimeout; d > 0 {
				t := time.NewTimer(d)
				defer t.Stop()
				beforeEnd = t.C
			}
		}
	}
	// progress sends a bookmark at the latest revision this watch has
	// seen everything up to.
	progress := func() bool {
		// With nothing left to deliver, the watch has seen everything
		// up to the store's progress, even if its resource was quiet:
		// the bookmark says so, and a resume from it needs no re-list
		// after the old revision is compacted.
		sw.more = len(sw2.Events()) > 0
		if p := sw2.Progress(); p > last && !sw.more {
			last = p
		}
		return sw.bookmark(last, false)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ended:
			return nil
		case <-gone:
			return nil
		case <-tick:
			if !progress() {
				return nil
			}
		case <-beforeEnd:
			if !progress() {
				return nil
			}
		case ev, ok := <-sw2.Events():
			if !ok {
				sw.more = false
				if err := sw2.Err(); err != nil {
					if errors.Is(err, store.ErrWatcherTooSlow) || errors.Is(err, store.ErrCompacted) {
						sw.sendStatus(apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%v)", last, err)))
					} else {
						sw.sendStatus(apierrors.NewInternalError(err))
					}
				}
				return nil
			}
			last = ev.Revision
			typ, shared, left, err := s.filterEvent(res, &o, ev)
			if err != nil {
				sw.sendStatus(apierrors.NewInternalError(err))
				return nil
			}
			sw.more = len(sw2.Events()) > 0
			switch {
			case left != nil:
				if !sw.send(typ, left.DeepCopyObject()) {
					return nil
				}
			case shared != nil:
				if !sw.sendShared(typ, shared) {
					return nil
				}
			case !sw.more:
				sw.flush() // what an earlier event left buffered
			}
		}
	}
}

// filterEvent turns a store event into the watch event this watcher sees:
// with selectors, an object that starts matching is ADDED, one that never
// matches is nothing (nil, nil). The returned event is shared with other
// watchers and must not be changed. An object that stops matching is
// DELETED with left set instead: the object as it was before the change,
// which the watcher last saw and whose labels and fields match its
// selectors, at the change's revision, as kube-apiserver sends it (left
// is shared too: the watcher sends a copy).
func (s *Server) filterEvent(res *resource, o *listOptions, ev store.Event) (typ watch.EventType, shared *sharedEvent, left runtime.Object, err error) {
	e := s.events.get(res, ev)
	if e.err != nil {
		return "", nil, nil, e.err
	}
	switch ev.Type {
	case store.Added:
		typ = watch.Added
	case store.Modified:
		typ = watch.Modified
	case store.Deleted:
		typ = watch.Deleted
	}
	if !o.filtering {
		return typ, e, nil, nil
	}
	cur := res.matches(o, e.obj)
	if ev.Type != store.Modified {
		if !cur {
			return "", nil, nil, nil
		}
		return typ, e, nil, nil
	}
	prev, err := e.previous(res, ev)
	if err != nil {
		return "", nil, nil, err
	}
	was := res.matches(o, prev)
	switch {
	case was && cur:
		return watch.Modified, e, nil, nil
	case was:
		return watch.Deleted, nil, prev, nil
	case cur:
		return watch.Added, e, nil, nil
	}
	return "", nil, nil, nil
}

// watchStream writes one watch's events.
type watchStream struct {
	s       *Server
	r       *http.Request
	w       http.ResponseWriter
	res     *resource
	format  outputFormat
	enc     *json.Encoder
	flusher http.Flusher
	tableN  int
	frames  bool // a protobuf stream: length-delimited frames
	// sink takes the events of an in-process watch as objects, which
	// are then never encoded for it (see client.WatchSink).
	sink *client.WatchSink
	// more says that more events are already waiting to be written: the
	// frame stays in the response's buffer until the last of them, as
	// kube-apiserver's watch flushes only with nothing left to send. In
	// a burst that is one TLS record and write for many frames.
	more bool
}

func (sw *watchStream) flush() {
	if sw.flusher != nil && !sw.more {
		sw.flusher.Flush()
	}
}

func (sw *watchStream) write(ev watchEvent) bool {
	if sw.sink != nil {
		obj, ok := ev.Object.(runtime.Object)
		return ok && sw.sink.Send(ev.Type, obj)
	}
	if sw.frames {
		obj, ok := ev.Object.(runtime.Object)
		if !ok {
			return false
		}
		b, err := protobufBytes(obj)
		if err != nil {
			return false
		}
		return sw.writeParts(protobufFrameHead(ev.Type, len(b)), b, nil)
	}
	if err := sw.enc.Encode(ev); err != nil {
		return false
	}
	sw.flush()
	return true
}

// writeParts writes one watch frame given in parts, one after another:
// the event's own few bytes around an encoding every watcher shares.
// The response buffers them; nothing is copied into a frame first.
func (sw *watchStream) writeParts(head, body, tail []byte) bool {
	for _, b := range [...][]byte{head, body, tail} {
		if len(b) == 0 {
			continue
		}
		if _, err := sw.w.Write(b); err != nil {
			return false
		}
	}
	sw.flush()
	return true
}

// jsonFrameParts are what a JSON watch stream's line for an event has
// around the object's JSON.
func jsonFrameParts(typ watch.EventType) (head, tail []byte) {
	head = make([]byte, 0, len(typ)+22)
	head = append(head, `{"type":"`...)
	head = append(head, typ...)
	head = append(head, `","object":`...)
	return head, jsonFrameTail
}

var jsonFrameTail = []byte("}\n")

// protobufFrameHead is what a protobuf watch stream's frame for an event
// has before the object's n bytes: the length of the WatchEvent,
// big-endian in four bytes, then its type (field 1) and its object
// (field 2, a RawExtension whose raw bytes, field 1, are the object).
func protobufFrameHead(typ watch.EventType, n int) []byte {
	raw := 1 + protowire.SizeVarint(uint64(n)) + n
	event := 1 + protowire.SizeBytes(len(typ)) + 1 + protowire.SizeVarint(uint64(raw)) + raw
	b := make([]byte, 4, 4+event-n)
	binary.BigEndian.PutUint32(b, uint32(event))
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, string(typ))
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(raw))
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	return protowire.AppendVarint(b, uint64(n))
}

func (sw *watchStream) send(typ watch.EventType, obj runtime.Object) bool {
	obj.GetObjectKind().SetGroupVersionKind(sw.res.gvk())
	switch sw.format {
	case outTable:
		t, err := sw.s.table(sw.r, sw.res, []runtime.Object{obj}, "", "")
		if err != nil {
			return false
		}
		return sw.write(watchEvent{Type: typ, Object: t})
	case outPartialMetadata, outPartialMetadataProtobuf:
		return sw.write(watchEvent{Type: typ, Object: partialMetadata(obj)})
	}
	return sw.write(watchEvent{Type: typ, Object: obj})
}

// sendShared sends an event decoded and encoded once for all watchers:
// JSON, protobuf and metadata watchers get shared bytes; tables are built
// from a copy, since the shared object must stay untouched.
func (sw *watchStream) sendShared(typ watch.EventType, e *sharedEvent) bool {
	if sw.sink != nil {
		return sw.sink.Send(typ, e.shape(sw.format.metadataOnly()))
	}
	switch sw.format {
	case outProtobuf, outPartialMetadataProtobuf, outJSON, outPartialMetadata:
		head, body, tail, err := e.frame(typ, sw.format == outPartialMetadataProtobuf || sw.format == outPartialMetadata, sw.format == outJSON || sw.format == outPartialMetadata)
		if err != nil {
			return false
		}
		return sw.writeParts(head, body, tail)
	}
	return sw.send(typ, e.obj.DeepCopyObject())
}

// bookmark sends an object of the watched kind carrying only the
// resourceVersion everything up to which has been sent.
func (sw *watchStream) bookmark(rev uint64, initialEnd bool) bool {
	obj := sw.res.newObject()
	obj.GetObjectKind().SetGroupVersionKind(sw.res.gvk())
	m, _ := metaOf(obj)
	m.SetResourceVersion(strconv.FormatUint(rev, 10))
	if initialEnd {
		m.SetAnnotations(map[string]string{initialEventsEndAnnotation: "true"})
	}
	if sw.format.metadataOnly() {
		return sw.write(watchEvent{Type: watch.Bookmark, Object: partialMetadata(obj)})
	}
	return sw.write(watchEvent{Type: watch.Bookmark, Object: obj})
}

func (sw *watchStream) sendStatus(err error) {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		st = apierrors.NewInternalError(err)
	}
	status := st.Status()
	status.Kind, status.APIVersion = "Status", "v1"
	sw.write(watchEvent{Type: watch.Error, Object: &status})
}
