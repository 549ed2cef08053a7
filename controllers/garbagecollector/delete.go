package garbagecollector

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

var (
	errUnknownKind                    = errors.New("owner kind not known to discovery")
	errNamespacedOwnerOfClusterScoped = errors.New("cluster-scoped objects cannot refer to namespaced owners")
)

// ownerKey identifies an owner verified absent. namespace is empty for
// a cluster-scoped kind.
type ownerKey struct {
	uid                          types.UID
	group, kind, name, namespace string
}

// attemptToDeleteItem decides the fate of one object from its live
// state: an owner deleting in the foreground waits for its blocking
// dependents; a dependent with no live owner left is deleted; one with a
// live owner loses its references to absent owners.
func (gc *Controller) attemptToDeleteItem(ctx context.Context, ref objectRef) error {
	if cur, ok := gc.cachedObject(ref); ok {
		// Deleting is one way: unless it waits for its dependents, nothing
		// is left to do. (A later foreground delete is an update event.)
		if cur.GetDeletionTimestamp() != nil && !hasFinalizer(cur, metav1.FinalizerDeleteDependents) {
			return nil
		}
		if gc.ownersLiveInCache(ref.namespace, cur) {
			return nil
		}
	}
	latest, err := gc.get(ctx, ref)
	switch {
	case isNotFound(err):
		return nil // its delete event enqueues what depended on it
	case err != nil:
		return fmt.Errorf("get %s: %w", ref, err)
	}
	if latest.UID != ref.uid {
		return nil // re-created: the new object gets its own events
	}
	if latest.DeletionTimestamp != nil {
		// Deletion is one way; only the foreground wait is ours to finish.
		if hasFinalizer(latest, metav1.FinalizerDeleteDependents) {
			return gc.processDeletingDependents(ctx, ref)
		}
		return nil
	}
	owners := latest.OwnerReferences
	if len(owners) == 0 {
		return nil
	}
	solid, dangling, waiting, err := gc.classifyReferences(ctx, ref, owners)
	if err != nil {
		return err
	}
	switch {
	case len(solid) > 0:
		if len(dangling) == 0 && len(waiting) == 0 {
			return nil
		}
		// References to owners waiting for their dependents go too, or
		// those owners would wait for this object forever.
		remove := map[types.UID]bool{}
		for _, r := range append(dangling, waiting...) {
			remove[r.UID] = true
		}
		gc.log.Debug("garbage collector: removing references to absent owners", "item", ref, "owners", len(remove))
		return gc.patchOwnerReferences(ctx, ref, func(r metav1.OwnerReference) (metav1.OwnerReference, bool) {
			return r, !remove[r.UID]
		})
	case len(waiting) > 0 && len(gc.dependents(ref.uid)) > 0:
		// An owner waits for this object, which has dependents of its own:
		// go in the foreground too, so the owner waits for the whole tree.
		// If one of those dependents waits for this object's deletion as
		// well, a cycle could block forever: stop blocking owners first.
		for _, dep := range gc.dependents(ref.uid) {
			if dep.meta.GetDeletionTimestamp() != nil && hasFinalizer(dep.meta, metav1.FinalizerDeleteDependents) {
				if err := gc.patchOwnerReferences(ctx, ref, func(r metav1.OwnerReference) (metav1.OwnerReference, bool) {
					if blocks(r) {
						r.BlockOwnerDeletion = new(bool)
					}
					return r, true
				}); err != nil {
					return err
				}
				// The delete below is conditional on what was read.
				if latest, err = gc.get(ctx, ref); err != nil {
					return fmt.Errorf("get %s: %w", ref, err)
				}
				break
			}
		}
		return gc.deleteObject(ctx, ref, latest, metav1.DeletePropagationForeground)
	default:
		// No live owner: collect it, honouring a cascade already chosen.
		policy := metav1.DeletePropagationBackground
		switch {
		case hasFinalizer(latest, metav1.FinalizerOrphanDependents):
			policy = metav1.DeletePropagationOrphan
		case hasFinalizer(latest, metav1.FinalizerDeleteDependents):
			policy = metav1.DeletePropagationForeground
		}
		gc.log.Debug("garbage collector: deleting", "item", ref, "propagationPolicy", policy)
		return gc.deleteObject(ctx, ref, latest, policy)
	}
}

// cachedObject is ref as the caches have it.
func (gc *Controller) cachedObject(ref objectRef) (metav1.Object, bool) {
	gc.mu.RLock()
	m := gc.monitors[ref.gvr]
	gc.mu.RUnlock()
	if m == nil {
		return nil, false
	}
	key := ref.name
	if ref.namespace != "" {
		key = ref.namespace + "/" + ref.name
	}
	obj, ok, _ := m.informer.GetIndexer().GetByKey(key)
	if !ok || obj.(metav1.Object).GetUID() != ref.uid {
		return nil, false
	}
	return obj.(metav1.Object), true
}

// ownersLiveInCache says whether the caches show o, not deleting, with
// every owner present and not deleting: nothing to do, and no need to
// ask the server (every object with owners is checked when the
// collector starts). Anything else is decided on live state.
func (gc *Controller) ownersLiveInCache(ns string, o metav1.Object) bool {
	if o.GetDeletionTimestamp() != nil || len(o.GetOwnerReferences()) == 0 {
		return false
	}
	for _, r := range o.GetOwnerReferences() {
		owner, ok := gc.cachedOwner(ns, r)
		if !ok || owner.meta.GetDeletionTimestamp() != nil {
			return false
		}
	}
	return true
}

// classifyReferences sorts an object's owner references: solid (the owner
// exists), dangling (absent) and waiting (the owner is deleting in the
// foreground, waiting for its dependents).
func (gc *Controller) classifyReferences(ctx context.Context, dep objectRef, refs []metav1.OwnerReference) (solid, dangling, waiting []metav1.OwnerReference, err error) {
	for _, r := range refs {
		owner, err := gc.owner(ctx, dep, r)
		if err != nil {
			return nil, nil, nil, err
		}
		switch {
		case owner == nil:
			dangling = append(dangling, r)
		case owner.GetDeletionTimestamp() != nil && hasFinalizer(owner, metav1.FinalizerDeleteDependents):
			waiting = append(waiting, r)
		default:
			solid = append(solid, r)
		}
	}
	return solid, dangling, waiting, nil
}

// owner finds the owner ref names for dependent dep; nil when it is
// absent. A namespaced owner is looked for in dep's namespace only, and
// must have ref's uid.
func (gc *Controller) owner(ctx context.Context, dep objectRef, ref metav1.OwnerReference) (metav1.Object, error) {
	info, m, known := gc.resolve(ref)
	if !known {
		return nil, fmt.Errorf("%w: %s %s", errUnknownKind, ref.APIVersion, ref.Kind)
	}
	ns := dep.namespace
	if !info.namespaced {
		ns = ""
	}
	if m != nil {
		if o, ok := gc.cachedOwner(dep.namespace, ref); ok {
			return o.meta, nil
		}
		// The owner's uid seen in another namespace (or owning a
		// cluster-scoped object): the reference is invalid.
		if info.namespaced {
			objs, _ := m.informer.GetIndexer().ByIndex(uidIndex, string(ref.UID))
			for _, obj := range objs {
				if obj.(metav1.Object).GetNamespace() != dep.namespace {
					gc.reportInvalidNamespace(dep, ref)
					break
				}
			}
		}
	}
	if dep.namespace == "" && info.namespaced {
		return nil, errNamespacedOwnerOfClusterScoped
	}
	key := ownerKey{uid: ref.UID, group: info.gvr.Group, kind: info.kind, name: ref.Name, namespace: ns}
	if _, absent := gc.absentOwners.Get(key); absent {
		return nil, nil
	}
	// The caches may lag behind a just-created owner: ask the server.
	live, err := gc.meta.Resource(info.gvr).Namespace(ns).Get(ctx, ref.Name, metav1.GetOptions{})
	switch {
	case isNotFound(err):
		gc.absentOwners.Add(key, nil)
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get owner %s %s of %s: %w", ref.Kind, ref.Name, dep, err)
	case live.UID != ref.UID:
		gc.absentOwners.Add(key, nil)
		return nil, nil
	}
	return live, nil
}

// deleteObject deletes ref as it was at latest. The resourceVersion
// precondition keeps it from deleting an object whose owners changed
// meanwhile; a conflict for any other change is retried without it, so
// busy objects are not starved.
func (gc *Controller) deleteObject(ctx context.Context, ref objectRef, latest *metav1.PartialObjectMetadata, policy metav1.DeletionPropagation) error {
	uid, rv := ref.uid, latest.ResourceVersion
	opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}, PropagationPolicy: &policy}
	res := gc.meta.Resource(ref.gvr).Namespace(ref.namespace)
	err := res.Delete(ctx, ref.name, opts)
	if apierrors.IsConflict(err) {
		live, getErr := res.Get(ctx, ref.name, metav1.GetOptions{})
		if isNotFound(getErr) {
			return nil
		}
		if getErr == nil && live.UID == uid && reflect.DeepEqual(live.OwnerReferences, latest.OwnerReferences) {
			opts.Preconditions.ResourceVersion = nil
			err = res.Delete(ctx, ref.name, opts)
		}
	}
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("delete %s: %w", ref, err)
	}
	return nil
}

// processDeletingDependents finishes a foreground deletion once no
// dependent blocks it, and otherwise sees that the blocking ones go.
func (gc *Controller) processDeletingDependents(ctx context.Context, ref objectRef) error {
	blocking := 0
	for _, dep := range gc.dependents(ref.uid) {
		if !blocksOwner(dep.meta, ref.uid) {
			continue
		}
		blocking++
		// One already deleting is on its way; its delete event brings the
		// owner back here.
		if dep.meta.GetDeletionTimestamp() == nil {
			gc.attemptToDelete.Add(dep.ref)
		}
	}
	if blocking > 0 {
		return nil
	}
	gc.log.Debug("garbage collector: no blocking dependents left", "item", ref)
	return gc.removeFinalizer(ctx, ref, metav1.FinalizerDeleteDependents)
}

// blocksOwner says whether o's reference to owner has blockOwnerDeletion.
func blocksOwner(o metav1.Object, owner types.UID) bool {
	for _, r := range o.GetOwnerReferences() {
		if r.UID == owner && blocks(r) {
			return true
		}
	}
	return false
}
