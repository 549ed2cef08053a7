package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"bonsai.dev/bonsai/apiserver/params"
	"bonsai.dev/bonsai/apiserver/registry"
)

// deleteOptions reads DeleteOptions as kube-apiserver does: from the
// body when there is one (as kubectl sends them), else from the query,
// then validates them.
func deleteOptions(r *http.Request, res *resource) (*metav1.DeleteOptions, error) {
	opts := &metav1.DeleteOptions{}
	body, err := readBody(r)
	if err != nil {
		return nil, err
	}
	if len(body) > 0 {
		if err := checkBodyMediaType(r, nil); err != nil {
			return nil, err
		}
		if err := decodeRequest(nil, r, body, opts, validationIgnore); err != nil {
			return nil, err
		}
	} else if opts, err = params.Delete(r.URL.Query()); err != nil {
		return nil, err
	}
	if err := params.ValidateDelete(opts); err != nil {
		return nil, err
	}
	// A negative grace period means one second, as in kube-apiserver.
	if g := opts.GracePeriodSeconds; g != nil && *g < 0 {
		opts.GracePeriodSeconds = ptr.To[int64](1)
	}
	return opts, nil
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request, ri requestInfo, res *resource) error {
	format, err := negotiate(r, res, false)
	if err != nil {
		return err
	}
	opts, err := deleteOptions(r, res)
	if err != nil {
		return err
	}
	out, deleted, err := s.deleteObject(r.Context(), res, ri.namespace, ri.name, opts)
	if err != nil {
		return err
	}
	if deleted && !res.returnDeleted {
		m, _ := metaOf(out)
		writeStatus(w, &metav1.Status{Code: http.StatusOK, Details: &metav1.StatusDetails{
			Name: ri.name, Group: res.gvr.Group, Kind: res.gvr.Resource, UID: m.GetUID(),
		}})
		return nil
	}
	code := http.StatusOK
	if !deleted && opts.OrphanDependents != nil && !*opts.OrphanDependents {
		code = http.StatusAccepted
	}
	return s.respond(w, r, code, res, out, format)
}

// deleteObject deletes one object, or marks it deleting when finalizers or
// a grace period hold it. deleted says whether it is gone.
func (s *Server) deleteObject(ctx context.Context, res *resource, namespace, name string, opts *metav1.DeleteOptions) (runtime.Object, bool, error) {
	dry := len(opts.DryRun) > 0
	if err := deleteForbidden(res, name); err != nil {
		return nil, false, err
	}
	wc := s.newWriteCtx(res, dry)
	for attempt := 0; ; attempt++ {
		old, rev, err := s.getObject(ctx, res, namespace, name)
		if err != nil {
			return nil, false, err
		}
		steps := deleteSteps{res: res, name: name, opts: opts, old: old}
		a := newAdmissionAttrs(ctx, wc, admissionv1.Delete, "", namespace, name, nil, old)
		if err := s.admit(ctx, &a, steps); err != nil {
			return nil, false, err
		}
		obj := old.DeepCopyObject()
		m, _ := metaOf(obj)
		_, graceful := res.strategy.(registry.GracefulDeleter)
		finalizersChanged := updateDeletionFinalizers(m, opts, graceful)
		var grace int64
		if g, ok := res.strategy.(registry.GracefulDeleter); ok {
			grace = g.GracePeriod(obj, opts.GracePeriodSeconds)
		}
		blocker, hasBlocker := res.strategy.(registry.DeletionBlocker)
		pending := len(m.GetFinalizers()) > 0 || grace > 0 || (hasBlocker && blocker.BlocksDeletion(obj))
		if pending {
			now := time.Now()
			changed := finalizersChanged
			if m.GetDeletionTimestamp() == nil {
				ts := metav1.NewTime(now.Add(time.Duration(grace) * time.Second).Truncate(time.Second))
				m.SetDeletionTimestamp(&ts)
				m.SetDeletionGracePeriodSeconds(&grace)
				if res.strategy.TracksGeneration() {
					m.SetGeneration(m.GetGeneration() + 1)
				}
				changed = true
			} else if cur := m.GetDeletionGracePeriodSeconds(); cur != nil && grace < *cur {
				// A shorter grace period overrides a longer one.
				ts := metav1.NewTime(now.Add(time.Duration(grace) * time.Second).Truncate(time.Second))
				if ts.Before(m.GetDeletionTimestamp()) {
					m.SetDeletionTimestamp(&ts)
				}
				m.SetDeletionGracePeriodSeconds(&grace)
				changed = true
			}
			if hasBlocker {
				blocker.MarkDeleting(obj)
				changed = true
			}
			// Once nothing holds it (grace 0, no finalizers), delete below.
			if heldFromDeletion(res, obj, m) {
				if !changed || dry {
					return obj, false, nil
				}
				data, err := encodeForStore(res, obj)
				if err != nil {
					return nil, false, apierrors.NewInternalError(err)
				}
				newRev, err := s.cfg.Store.Update(ctx, res.key(namespace, name), data, rev)
				if err != nil {
					if apierrors.IsConflict(storeError(err, res, name)) && attempt < maxUnconditionalRetries {
						if err := waitToRetry(ctx, attempt); err != nil {
							return nil, false, err
						}
						continue
					}
					return nil, false, storeError(err, res, name)
				}
				setResourceVersion(obj, newRev)
				return obj, false, nil
			}
		}
		if dry {
			return obj, true, nil
		}
		kv, err := s.cfg.Store.Delete(ctx, res.key(namespace, name), rev)
		if err != nil {
			if apierrors.IsConflict(storeError(err, res, name)) && attempt < maxUnconditionalRetries {
				if err := waitToRetry(ctx, attempt); err != nil {
					return nil, false, err
				}
				continue
			}
			return nil, false, storeError(err, res, name)
		}
		s.afterDelete(res, obj)
		setResourceVersion(obj, kv.Revision)
		return obj, true, nil
	}
}

// deleteSteps are a delete's own step inside admission: the request's
// preconditions, checked against the object found.
type deleteSteps struct {
	res  *resource
	name string
	opts *metav1.DeleteOptions
	old  runtime.Object
}

func (d deleteSteps) Prepare(context.Context) error {
	p := d.opts.Preconditions
	if p == nil {
		return nil
	}
	m, _ := metaOf(d.old)
	if p.UID != nil && *p.UID != m.GetUID() {
		return apierrors.NewConflict(qualified(d.res), d.name, fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", *p.UID, m.GetUID()))
	}
	if p.ResourceVersion != nil && *p.ResourceVersion != m.GetResourceVersion() {
		return apierrors.NewConflict(qualified(d.res), d.name, fmt.Errorf("Precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", *p.ResourceVersion, m.GetResourceVersion()))
	}
	return nil
}

func (deleteSteps) Validate(context.Context) error { return nil }

// updateDeletionFinalizers adds the garbage collector's finalizer for the
// requested propagation, as kube-apiserver does; it reports a change.
// graceful says the kind has graceful deletion (pods).
func updateDeletionFinalizers(m metav1.Object, opts *metav1.DeleteOptions, graceful bool) bool {
	var policy metav1.DeletionPropagation
	switch {
	case opts.PropagationPolicy != nil:
		policy = *opts.PropagationPolicy
	case opts.OrphanDependents != nil && *opts.OrphanDependents:
		policy = metav1.DeletePropagationOrphan
	case opts.OrphanDependents != nil:
		policy = metav1.DeletePropagationBackground
	}
	fins := m.GetFinalizers()
	has := func(f string) bool { return contains(fins, f) }
	without := func(f string) []string {
		var out []string
		for _, x := range fins {
			if x != f {
				out = append(out, x)
			}
		}
		return out
	}
	before := len(fins)
	switch policy {
	case metav1.DeletePropagationOrphan:
		fins = without(metav1.FinalizerDeleteDependents)
		if !has(metav1.FinalizerOrphanDependents) {
			fins = append(fins, metav1.FinalizerOrphanDependents)
		}
	case metav1.DeletePropagationForeground:
		fins = without(metav1.FinalizerOrphanDependents)
		if !has(metav1.FinalizerDeleteDependents) {
			fins = append(fins, metav1.FinalizerDeleteDependents)
		}
	case metav1.DeletePropagationBackground:
		fins = without(metav1.FinalizerOrphanDependents)
		fins = without(metav1.FinalizerDeleteDependents)
	default:
		return false
	}
	// kube-apiserver sets the GC finalizers on every delete of a kind
	// without graceful deletion, even one already deleting (the rule
	// against new finalizers on a deleting object is update validation,
	// which delete does not run): kubectl delete --cascade=orphan of an
	// object held by another finalizer adds "orphan". A pod whose
	// graceful deletion is under way gets no new ones.
	pendingGrace := m.GetDeletionGracePeriodSeconds() != nil && *m.GetDeletionGracePeriodSeconds() > 0
	if graceful && m.GetDeletionTimestamp() != nil && pendingGrace && len(fins) > before {
		return false
	}
	changed := len(fins) != before || !equalStrings(fins, m.GetFinalizers())
	m.SetFinalizers(fins)
	return changed
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// deleteCollection deletes what a list with the request's options finds
// and answers that list, as kube-apiserver does: the objects as they
// were listed, in a list of their kind.
func (s *Server) deleteCollection(w http.ResponseWriter, r *http.Request, ri requestInfo, res *resource) error {
	format, err := negotiate(r, res, false)
	if err != nil {
		return err
	}
	opts, err := deleteOptions(r, res)
	if err != nil {
		return err
	}
	lo, err := parseListOptions(r, res, false)
	if err != nil {
		return err
	}
	items, lm, err := s.listObjects(r.Context(), res, ri.namespace, lo)
	if err != nil {
		return err
	}
	if err := s.deleteEach(r.Context(), res, items, opts); err != nil {
		return err
	}
	return s.writeList(w, r, res, format, items, lm)
}

// deleteCollectionWorkers delete a collection's objects in parallel, as
// kube-apiserver's --delete-collection-workers do: each delete waits for
// its durable write, and concurrent writes share a sync, so emptying a
// namespace of thousands of objects takes seconds, not minutes.
const deleteCollectionWorkers = 16

// deleteEach deletes items; an object already gone is no error. It stops
// at the first error, which it returns.
func (s *Server) deleteEach(ctx context.Context, res *resource, items []runtime.Object, opts *metav1.DeleteOptions) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan runtime.Object)
	errs := make(chan error, deleteCollectionWorkers)
	var wg sync.WaitGroup
	for range min(deleteCollectionWorkers, len(items)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for obj := range next {
				m, _ := metaOf(obj)
				if _, _, err := s.deleteObject(ctx, res, m.GetNamespace(), m.GetName(), opts); err != nil && !apierrors.IsNotFound(err) {
					errs <- err
					cancel()
					return
				}
			}
		}()
	}
feed:
	for _, obj := range items {
		select {
		case next <- obj:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	return ctx.Err()
}
