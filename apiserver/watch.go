package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"

	"bonsai.dev/bonsai/store"
)

// bookmarkInterval is how often a watch that asked for bookmarks gets one.
const bookmarkInterval = 30 * time.Second

// initialEventsEndAnnotation marks the bookmark that ends a watch's initial
// events (sendInitialEvents=true), as client-go's watch-list expects.
const initialEventsEndAnnotation = "k8s.io/initial-events-end"

type watchEvent struct {
	Type   watch.EventType `json:"type"`
	Object any             `json:"object"`
}

func (s *Server) watch(w http.ResponseWriter, r *http.Request, ri requestInfo, res *resource) error {
	format, err := negotiate(r)
	if err != nil {
		return err
	}
	if format == outYAML || format == outProtobuf {
		// Watch streams are JSON; clients decode by the content type.
		format = outJSON
	}
	o, err := parseListOptions(r, res)
	if err != nil {
		return err
	}
	if ri.name != "" {
		// A watch of one object (the legacy /watch/.../name path).
		o.fields = fields.AndSelectors(o.fields, fields.OneTermEqualSelector("metadata.name", ri.name))
		o.filtering = true
	}
	if o.sendInitial != nil {
		var errs field.ErrorList
		if o.rvMatch != metav1.ResourceVersionMatchNotOlderThan {
			errs = append(errs, field.Forbidden(field.NewPath("resourceVersionMatch"), "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"))
		}
		if *o.sendInitial && !o.bookmarks {
			errs = append(errs, field.Forbidden(field.NewPath("allowWatchBookmarks"), "sendInitialEvents requires setting allowWatchBookmarks to true"))
		}
		if len(errs) > 0 {
			return apierrors.NewInvalid(metav1.SchemeGroupVersion.WithKind("ListOptions").GroupKind(), "", errs)
		}
	}
	ctx := r.Context()
	ended := s.watchesContext().Done()
	if o.timeoutSeconds > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(o.timeoutSeconds)*time.Second)
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

	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	sw := &watchStream{s: s, r: r, w: w, res: res, format: format, enc: json.NewEncoder(w)}
	sw.flusher, _ = w.(http.Flusher)

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
	for _, obj := range initial {
		if !sw.send(watch.Added, obj) {
			return nil
		}
	}
	last := start
	if o.sendInitial != nil && *o.sendInitial && o.bookmarks {
		if !sw.bookmark(last, true) {
			return nil
		}
	}
	var tick <-chan time.Time
	if o.bookmarks {
		t := time.NewTicker(bookmarkInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ended:
			return nil
		case <-tick:
			if !sw.bookmark(last, false) {
				return nil
			}
		case ev, ok := <-sw2.Events():
			if !ok {
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
			typ, obj, err := filterEvent(res, &o, ev)
			if err != nil {
				sw.sendStatus(apierrors.NewInternalError(err))
				return nil
			}
			if obj != nil && !sw.send(typ, obj) {
				return nil
			}
		}
	}
}

// filterEvent turns a store event into the watch event this watcher sees:
// with selectors, an object that starts or stops matching is ADDED or
// DELETED, and one that never matches is nothing (nil).
func filterEvent(res *resource, o *listOptions, ev store.Event) (watch.EventType, runtime.Object, error) {
	kv := store.KeyValue{Key: ev.Key, Value: ev.Value, Revision: ev.Revision}
	obj, err := decodeStored(res, kv)
	if err != nil {
		return "", nil, err
	}
	var typ watch.EventType
	switch ev.Type {
	case store.Added:
		typ = watch.Added
	case store.Modified:
		typ = watch.Modified
	case store.Deleted:
		typ = watch.Deleted
	}
	if !o.filtering {
		return typ, obj, nil
	}
	cur := res.matches(o, obj)
	if ev.Type != store.Modified {
		if !cur {
			return "", nil, nil
		}
		return typ, obj, nil
	}
	prev, err := decodeStored(res, store.KeyValue{Key: ev.Key, Value: ev.PrevValue, Revision: ev.Revision})
	if err != nil {
		return "", nil, err
	}
	was := res.matches(o, prev)
	switch {
	case was && cur:
		return watch.Modified, obj, nil
	case was:
		return watch.Deleted, obj, nil
	case cur:
		return watch.Added, obj, nil
	}
	return "", nil, nil
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
}

func (sw *watchStream) flush() {
	if sw.flusher != nil {
		sw.flusher.Flush()
	}
}

func (sw *watchStream) write(ev watchEvent) bool {
	if err := sw.enc.Encode(ev); err != nil {
		return false
	}
	sw.flush()
	return true
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
	case outPartialMetadata:
		return sw.write(watchEvent{Type: typ, Object: partialMetadata(obj)})
	}
	return sw.write(watchEvent{Type: typ, Object: obj})
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
	if sw.format == outPartialMetadata {
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
