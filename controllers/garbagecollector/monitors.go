package garbagecollector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/cache"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/kit"
)

// Index names of every monitor's cache.
const (
	uidIndex   = "uid"
	ownerIndex = "ownerUID"
)

// resourceInfo is what discovery says of one kind.
type resourceInfo struct {
	gvr        schema.GroupVersionResource
	kind       string
	namespaced bool
}

// monitor is a metadata-only informer of one resource.
type monitor struct {
	resourceInfo
	informer cache.SharedIndexInformer
	stop     context.CancelFunc
}

// resync reads discovery, starts monitors for resources that appeared and
// stops those of resources that went. On a partial discovery failure the
// monitors of the groups that failed are kept.
func (gc *Controller) resync(ctx context.Context) error {
	groups, lists, err := gc.discovery.ServerGroupsAndResources()
	var failed map[schema.GroupVersion]error
	if err != nil {
		var ok bool
		if failed, ok = discovery.GroupDiscoveryFailedErrorGroups(err); !ok || len(lists) == 0 {
			return fmt.Errorf("discovery: %w", err)
		}
		gc.log.Warn("garbage collector: discovery failed for some groups", "groups", failed)
	}
	preferred := map[string]string{}
	for _, g := range groups {
		preferred[g.Name] = g.PreferredVersion.Version
	}
	kinds := map[schema.GroupKind]resourceInfo{}
	watched := map[schema.GroupVersionResource]resourceInfo{}
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			gc.log.Warn("garbage collector: ignoring a bad group version", "groupVersion", list.GroupVersion, "err", err)
			continue
		}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") {
				continue
			}
			info := resourceInfo{gvr: gv.WithResource(r.Name), kind: r.Kind, namespaced: r.Namespaced}
			gk := schema.GroupKind{Group: gv.Group, Kind: r.Kind}
			// The preferred version wins; another version still resolves.
			if _, seen := kinds[gk]; !seen || gv.Version == preferred[gv.Group] {
				kinds[gk] = info
			}
			if gv.Version != preferred[gv.Group] || gc.cfg.IgnoredResources[info.gvr.GroupResource()] {
				continue
			}
			if hasVerbs(r.Verbs, "delete", "list", "watch") {
				watched[info.gvr] = info
			}
		}
	}

	gc.mu.Lock()
	defer gc.mu.Unlock()
	for gk, info := range gc.kinds {
		if _, ok := kinds[gk]; !ok && failed[info.gvr.GroupVersion()] != nil {
			kinds[gk] = info
		}
	}
	gc.kinds = kinds
	for gvr, m := range gc.monitors {
		if _, ok := watched[gvr]; ok || failed[gvr.GroupVersion()] != nil {
			continue
		}
		m.stop()
		delete(gc.monitors, gvr)
		gc.log.Info("garbage collector: stopped watching", "resource", gvr)
	}
	for gvr, info := range watched {
		if _, ok := gc.monitors[gvr]; ok {
			continue
		}
		gc.monitors[gvr] = gc.startMonitor(info)
	}
	return nil
}

func hasVerbs(have metav1.Verbs, want ...string) bool {
	for _, v := range want {
		if !slices.Contains(have, v) {
			return false
		}
	}
	return true
}

// startMonitor runs an informer of info's metadata under runCtx.
// Callers hold gc.mu.
func (gc *Controller) startMonitor(info resourceInfo) *monitor {
	inf := cache.NewSharedIndexInformer(client.MetadataListWatch(gc.cfg.RESTConfig, gc.meta, info.gvr), &metav1.PartialObjectMetadata{}, 0, cache.Indexers{
		uidIndex:   func(obj any) ([]string, error) { return []string{string(obj.(metav1.Object).GetUID())}, nil },
		ownerIndex: ownerUIDs,
	})
	// Before Run, so it cannot fail.
	_ = inf.SetTransform(slim)
	m := &monitor{resourceInfo: info, informer: inf}
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { gc.onChange(m, nil, obj) },
		UpdateFunc: func(old, obj any) { gc.onChange(m, old, obj) },
		DeleteFunc: func(obj any) { gc.onDelete(m, obj) },
	})
	ctx, cancel := context.WithCancel(gc.runCtx)
	m.stop = cancel
	go inf.RunWithContext(ctx)
	return m
}

// slim keeps of an object only what the collector reads, so its caches
// stay small: no labels, annotations (last-applied configurations) or
// managed fields. kube-controller-manager drops managed fields likewise.
func slim(obj any) (any, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		DeletionTimestamp: m.DeletionTimestamp, OwnerReferences: m.OwnerReferences, Finalizers: m.Finalizers,
	}}, nil
}

func ownerUIDs(obj any) ([]string, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, errors.New("not an object")
	}
	refs := m.GetOwnerReferences()
	out := make([]string, 0, len(refs))
	for _, r := range refs {
		out = append(out, string(r.UID))
	}
	return out, nil
}

// waitForSync waits for every monitor's first list; false when ctx ended.
func (gc *Controller) waitForSync(ctx context.Context) bool {
	gc.mu.RLock()
	synced := make([]cache.InformerSynced, 0, len(gc.monitors))
	for _, m := range gc.monitors {
		synced = append(synced, m.informer.HasSynced)
	}
	gc.mu.RUnlock()
	return cache.WaitForCacheSync(ctx.Done(), synced...)
}

func (gc *Controller) monitorCount() int {
	gc.mu.RLock()
	defer gc.mu.RUnlock()
	return len(gc.monitors)
}

func refOf(m *monitor, o metav1.Object) objectRef {
	return objectRef{gvr: m.gvr, kind: m.kind, namespace: o.GetNamespace(), name: o.GetName(), uid: o.GetUID()}
}

// onChange is an add (old nil) or update of obj.
func (gc *Controller) onChange(m *monitor, old, obj any) {
	o, ok := obj.(metav1.Object)
	if !ok {
		return
	}
	ref := refOf(m, o)
	var oldMeta metav1.Object
	if old != nil {
		oldMeta, _ = old.(metav1.Object)
	}
	// New or changed owners: check them. References removed or made
	// non-blocking may unblock an owner deleting in the foreground.
	if oldMeta == nil {
		if len(o.GetOwnerReferences()) > 0 {
			gc.attemptToDelete.Add(ref)
		}
	} else if !equalOwners(oldMeta.GetOwnerReferences(), o.GetOwnerReferences()) {
		if len(o.GetOwnerReferences()) > 0 {
			gc.attemptToDelete.Add(ref)
		}
		gc.enqueueUnblockedOwners(o, oldMeta.GetOwnerReferences(), o.GetOwnerReferences())
	}
	// Transitions into deletion with one of the collector's finalizers.
	if o.GetDeletionTimestamp() == nil {
		return
	}
	if hasFinalizer(o, metav1.FinalizerOrphanDependents) && (oldMeta == nil || oldMeta.GetDeletionTimestamp() == nil || !hasFinalizer(oldMeta, metav1.FinalizerOrphanDependents)) {
		gc.attemptToOrphan.Add(ref)
		return
	}
	if hasFinalizer(o, metav1.FinalizerDeleteDependents) && (oldMeta == nil || oldMeta.GetDeletionTimestamp() == nil || !hasFinalizer(oldMeta, metav1.FinalizerDeleteDependents)) {
		for _, dep := range gc.dependents(o.GetUID()) {
			gc.attemptToDelete.Add(dep.ref)
		}
		gc.attemptToDelete.Add(ref)
	}
}

// onDelete: the object's dependents may now be garbage, and an owner
// waiting in the foreground may now be free to go.
func (gc *Controller) onDelete(m *monitor, obj any) {
	o, ok := kit.Unwrap[metav1.Object](obj)
	if !ok {
		return
	}
	deps := gc.dependents(o.GetUID())
	if len(deps) > 0 {
		ns := ""
		if m.namespaced {
			ns = o.GetNamespace()
		}
		gc.absentOwners.Add(ownerKey{uid: o.GetUID(), group: m.gvr.Group, kind: m.kind, name: o.GetName(), namespace: ns}, nil)
	}
	for _, dep := range deps {
		gc.attemptToDelete.Add(dep.ref)
	}
	for _, owner := range o.GetOwnerReferences() {
		gc.enqueueIfDeletingDependents(o, owner)
	}
}

// enqueueUnblockedOwners enqueues owners deleting in the foreground that
// a reference removed, or changed to non-blocking, may have unblocked.
func (gc *Controller) enqueueUnblockedOwners(o metav1.Object, old, cur []metav1.OwnerReference) {
	now := map[types.UID]metav1.OwnerReference{}
	for _, r := range cur {
		now[r.UID] = r
	}
	for _, r := range old {
		n, kept := now[r.UID]
		if !blocks(r) || (kept && blocks(n)) {
			continue
		}
		gc.enqueueIfDeletingDependents(o, r)
	}
}

func blocks(r metav1.OwnerReference) bool {
	return r.BlockOwnerDeletion != nil && *r.BlockOwnerDeletion
}

// enqueueIfDeletingDependents enqueues the owner dependent o names in
// ref, if the cache has it deleting in the foreground.
func (gc *Controller) enqueueIfDeletingDependents(o metav1.Object, ref metav1.OwnerReference) {
	owner, ok := gc.cachedOwner(o.GetNamespace(), ref)
	if ok && owner.meta.GetDeletionTimestamp() != nil && hasFinalizer(owner.meta, metav1.FinalizerDeleteDependents) {
		gc.attemptToDelete.Add(owner.ref)
	}
}

// cached is an object from a monitor's cache.
type cached struct {
	ref  objectRef
	meta metav1.Object
}

// dependents lists the cached objects that name uid as an owner.
func (gc *Controller) dependents(uid types.UID) []cached {
	gc.mu.RLock()
	defer gc.mu.RUnlock()
	var out []cached
	for _, m := range gc.monitors {
		objs, _ := m.informer.GetIndexer().ByIndex(ownerIndex, string(uid))
		for _, obj := range objs {
			o := obj.(metav1.Object)
			out = append(out, cached{ref: refOf(m, o), meta: o})
		}
	}
	return out
}

// cachedOwner finds the owner ref names for a dependent in namespace ns
// in the caches: the object of ref's kind, name and uid, in ns if its
// kind is namespaced.
func (gc *Controller) cachedOwner(ns string, ref metav1.OwnerReference) (cached, bool) {
	info, m, ok := gc.resolve(ref)
	if !ok || m == nil {
		return cached{}, false
	}
	if !info.namespaced {
		ns = ""
	}
	key := ref.Name
	if ns != "" {
		key = ns + "/" + ref.Name
	}
	obj, exists, _ := m.informer.GetIndexer().GetByKey(key)
	if !exists {
		return cached{}, false
	}
	o := obj.(metav1.Object)
	if o.GetUID() != ref.UID {
		return cached{}, false
	}
	return cached{ref: refOf(m, o), meta: o}, true
}

// resolve maps an ownerReference's kind to its resource and, when it is
// watched and synced, its monitor.
func (gc *Controller) resolve(ref metav1.OwnerReference) (resourceInfo, *monitor, bool) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return resourceInfo{}, nil, false
	}
	gc.mu.RLock()
	defer gc.mu.RUnlock()
	info, ok := gc.kinds[schema.GroupKind{Group: gv.Group, Kind: ref.Kind}]
	if !ok {
		return resourceInfo{}, nil, false
	}
	m := gc.monitors[info.gvr]
	if m != nil && !m.informer.HasSynced() {
		m = nil
	}
	return info, m, true
}

func hasFinalizer(o metav1.Object, f string) bool { return slices.Contains(o.GetFinalizers(), f) }

func equalOwners(a, b []metav1.OwnerReference) bool {
	return slices.EqualFunc(a, b, func(x, y metav1.OwnerReference) bool {
		return x.UID == y.UID && x.APIVersion == y.APIVersion && x.Kind == y.Kind && x.Name == y.Name && blocks(x) == blocks(y)
	})
}
