package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/dynamic-resource-allocation/structured"

	"bonsai.dev/bonsai/client"
)

// DynamicResourcesName is kube-scheduler's plugin for pods with
// resource claims (dynamic resource allocation).
const DynamicResourcesName = "DynamicResources"

// Its reasons, word for word.
const (
	errClaimInUse        = "resourceclaim in use"
	errCannotAllocateAll = "cannot allocate all claims"
	errClaimNotAvailable = "resourceclaim not available on the node"
)

// draFeatures are the allocator features on by default in the version
// bonsai reports that upstream's stable allocator implements: admin
// access, prioritized lists (firstAvailable), partitionable devices and
// device taints.
var draFeatures = structured.Features{AdminAccess: true, PrioritizedList: true, PartitionableDevices: true, DeviceTaints: true}

// dynamicResourcesPlugin allocates devices for a pod's ResourceClaims
// with upstream's structured allocator: PreFilter gathers the pod's
// claims and what is allocated already, Filter runs the allocator for
// the node (class and claim selectors, count and allocationMode All,
// constraints, admin access), and once a node is chosen its allocation
// is held in flight — no other pod gets those devices — until bind has
// written it into the claims' status and reserved them for the pod, as
// kube-scheduler's PreBind does, before the pod is bound.
type dynamicResourcesPlugin struct {
	claims   resourcelisters.ResourceClaimLister
	classes  classLister
	slices   resourcelisters.ResourceSliceLister
	celCache *cel.Cache
	inflight *inflightClaims
}

// classLister is what the allocator reads device classes through.
type classLister struct {
	l resourcelisters.DeviceClassLister
}

func (c classLister) List() ([]*resourcev1.DeviceClass, error) { return c.l.List(everything) }
func (c classLister) Get(name string) (*resourcev1.DeviceClass, error) {
	return c.l.Get(name)
}

// inflightClaims are the allocations chosen for pods whose claims'
// status does not show them yet (being written, or written and not yet
// seen by the informer): their devices count as allocated.
type inflightClaims struct {
	mu sync.Mutex
	m  map[types.UID]*resourcev1.AllocationResult
}

func (f *inflightClaims) get(uid types.UID) *resourcev1.AllocationResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m[uid]
}

func (f *inflightClaims) set(uid types.UID, a *resourcev1.AllocationResult) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.m[uid] = a
}

func (f *inflightClaims) remove(uid types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, uid)
}

func (f *inflightClaims) each(fn func(*resourcev1.AllocationResult)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.m {
		fn(a)
	}
}

// draState is what PreFilter found of the pod's claims.
type draState struct {
	// claims are all of the pod's claims; toAllocate those without an
	// allocation, in the same order as the results.
	claims     []*resourcev1.ResourceClaim
	toAllocate []*resourcev1.ResourceClaim
	allocator  structured.Allocator
	// results are the allocations that fit, by node.
	results map[string][]resourcev1.AllocationResult
}

func (dynamicResourcesPlugin) Name() string { return DynamicResourcesName }

func (p dynamicResourcesPlugin) PreFilter(state *CycleState, pod *corev1.Pod, _ []*NodeInfo) *Status {
	if len(pod.Spec.ResourceClaims) == 0 {
		return nil
	}
	ds := &draState{}
	for i := range pod.Spec.ResourceClaims {
		pc := &pod.Spec.ResourceClaims[i]
		name, checkOwner, err := resourceclaim.Name(pod, pc)
		if err != nil {
			return unresolvable(err.Error())
		}
		if name == nil {
			continue // intentionally not made
		}
		claim, err := p.claims.ResourceClaims(pod.Namespace).Get(*name)
		if err != nil {
			return unresolvable(err.Error())
		}
		if claim.DeletionTimestamp != nil {
			return unresolvable(fmt.Sprintf("resourceclaim %q is being deleted", claim.Name))
		}
		if checkOwner {
			if err := resourceclaim.IsForPod(pod, claim, false); err != nil {
				return unresolvable(err.Error())
			}
		}
		ds.claims = append(ds.claims, claim)
		if claim.Status.Allocation != nil {
			if !resourceclaim.CanBeReserved(claim) && !resourceclaim.IsReservedForPod(pod, claim, false) {
				return unresolvable(errClaimInUse)
			}
			continue
		}
		if p.inflight.get(claim.UID) != nil {
			return unresolvable(fmt.Sprintf("resource claim %s/%s is in the process of being allocated", claim.Namespace, claim.Name))
		}
		for _, r := range claim.Spec.Devices.Requests {
			classes := []string{}
			if r.Exactly != nil {
				classes = append(classes, r.Exactly.DeviceClassName)
			}
			for _, s := range r.FirstAvailable {
				classes = append(classes, s.DeviceClassName)
			}
			for _, c := range classes {
				if _, err := p.classes.Get(c); err != nil {
					return unresolvable(fmt.Sprintf("request %s: device class %s does not exist", r.Name, c))
				}
			}
		}
		ds.toAllocate = append(ds.toAllocate, claim)
	}
	if len(ds.claims) == 0 {
		return nil
	}
	if len(ds.toAllocate) > 0 {
		slices, err := p.slices.List(everything)
		if err != nil {
			return unresolvable(err.Error())
		}
		alloc, err := structured.NewAllocator(context.Background(), draFeatures,
			structured.AllocatedState{AllocatedDevices: p.allocatedDevices()}, p.classes, slices, p.celCache)
		if err != nil {
			return unresolvable(err.Error())
		}
		ds.allocator = alloc
		ds.results = map[string][]resourcev1.AllocationResult{}
	}
	state.dra = ds
	return nil
}

// allocatedDevices are the devices of every allocation, stored or in
// flight; a device given for admin access stays free for others, as
// upstream counts it.
func (p dynamicResourcesPlugin) allocatedDevices() sets.Set[structured.DeviceID] {
	out := sets.New[structured.DeviceID]()
	add := func(a *resourcev1.AllocationResult) {
		for _, r := range a.Devices.Results {
			if r.AdminAccess != nil && *r.AdminAccess {
				continue
			}
			out.Insert(structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
		}
	}
	claims, _ := p.claims.List(everything)
	for _, c := range claims {
		if c.Status.Allocation != nil {
			add(c.Status.Allocation)
		}
	}
	p.inflight.each(add)
	return out
}

// SkipFilter: a pod without claims fits every node.
func (dynamicResourcesPlugin) SkipFilter(state *CycleState, _ *corev1.Pod) bool {
	return state.dra == nil
}

func (p dynamicResourcesPlugin) Filter(state *CycleState, _ *corev1.Pod, ni *NodeInfo) *Status {
	ds := state.dra
	if ds == nil {
		return nil
	}
	node := ni.Node
	for _, c := range ds.claims {
		a := c.Status.Allocation
		if a == nil || a.NodeSelector == nil {
			continue
		}
		sel, err := nodeaffinity.NewNodeSelector(a.NodeSelector)
		if err != nil || !sel.Match(node) {
			return unresolvable(errClaimNotAvailable)
		}
	}
	if ds.allocator == nil {
		return nil
	}
	results, err := ds.allocator.Allocate(context.Background(), node, ds.toAllocate)
	switch {
	case errors.Is(err, structured.ErrFailedAllocationOnNode):
		return unresolvable(err.Error())
	case err != nil:
		return unresolvable(err.Error())
	case len(results) != len(ds.toAllocate):
		return unresolvable(errCannotAllocateAll)
	}
	ds.results[node.Name] = results
	return nil
}

// draBindings is what bind writes for the pod's claims on the chosen
// node: the new allocations and the reservations.
type draBindings struct {
	pod        *corev1.Pod
	claims     []*resourcev1.ResourceClaim
	toAllocate []*resourcev1.ResourceClaim
	results    []resourcev1.AllocationResult
	inflight   *inflightClaims
}

// bindingsFor takes the allocation chosen for node out of the cycle
// and holds it in flight, so the next cycle sees its devices taken.
func (p dynamicResourcesPlugin) bindingsFor(state *CycleState, pod *corev1.Pod, node string) *draBindings {
	ds := state.dra
	if ds == nil {
		return nil
	}
	b := &draBindings{pod: pod, claims: ds.claims, toAllocate: ds.toAllocate, results: ds.results[node], inflight: p.inflight}
	for i, c := range b.toAllocate {
		p.inflight.set(c.UID, &b.results[i])
	}
	return b
}

// release gives back the in-flight allocations of a bind that failed.
func (b *draBindings) release() {
	for _, c := range b.toAllocate {
		b.inflight.remove(c.UID)
	}
}

// prebind protects each claim to allocate with upstream's finalizer,
// then writes its allocation and the pod's reservation into its status;
// an allocated claim only gains the reservation. A write that loses a
// race fails the cycle: what was written for the pod is undone, as
// kube-scheduler's Unreserve does, and the pod is tried again.
func (b *draBindings) prebind(ctx context.Context, rc rest.Interface) error {
	ref := resourcev1.ResourceClaimConsumerReference{Resource: "pods", Name: b.pod.Name, UID: b.pod.UID}
	allocated := map[types.UID]*resourcev1.AllocationResult{}
	for i, c := range b.toAllocate {
		allocated[c.UID] = &b.results[i]
	}
	var written []*resourcev1.ResourceClaim
	fail := func(err error) error {
		b.undo(ctx, rc, written, allocated)
		return err
	}
	for _, c := range b.claims {
		claim := c.DeepCopy()
		if a := allocated[c.UID]; a != nil {
			if !slices.Contains(claim.Finalizers, resourcev1.Finalizer) {
				claim.Finalizers = append(claim.Finalizers, resourcev1.Finalizer)
				var err error
				if claim, err = updateClaim(ctx, rc, claim, ""); err != nil {
					return fail(fmt.Errorf("adding finalizer to claim %s/%s: %w", c.Namespace, c.Name, err))
				}
			}
			claim.Status.Allocation = a
		} else if resourceclaim.IsReservedForPod(b.pod, claim, false) {
			continue
		}
		claim.Status.ReservedFor = append(claim.Status.ReservedFor, ref)
		out, err := updateClaim(ctx, rc, claim, "status")
		if err != nil {
			return fail(fmt.Errorf("update claim %s/%s status: %w", c.Namespace, c.Name, err))
		}
		written = append(written, out)
	}
	return nil
}

// undo takes the pod's reservation off the claims written for it, and
// the allocation and finalizer off those it allocated. Best effort: the
// resource-claim controller drops what is left once the pod is gone.
func (b *draBindings) undo(ctx context.Context, rc rest.Interface, written []*resourcev1.ResourceClaim, allocated map[types.UID]*resourcev1.AllocationResult) {
	for _, c := range written {
		c = c.DeepCopy()
		c.Status.ReservedFor = slices.DeleteFunc(c.Status.ReservedFor, func(r resourcev1.ResourceClaimConsumerReference) bool { return r.UID == b.pod.UID })
		mine := allocated[c.UID] != nil
		if mine && len(c.Status.ReservedFor) == 0 {
			c.Status.Allocation = nil
		}
		out, err := updateClaim(ctx, rc, c, "status")
		if err != nil || !mine || out.Status.Allocation != nil {
			continue
		}
		if i := slices.Index(out.Finalizers, resourcev1.Finalizer); i >= 0 {
			out.Finalizers = slices.Delete(out.Finalizers, i, i+1)
			_, _ = updateClaim(ctx, rc, out, "")
		}
	}
}

func updateClaim(ctx context.Context, rc rest.Interface, claim *resourcev1.ResourceClaim, sub string) (*resourcev1.ResourceClaim, error) {
	out := &resourcev1.ResourceClaim{}
	req := rc.Put().Namespace(claim.Namespace).Resource("resourceclaims").Name(claim.Name).Body(claim)
	if sub != "" {
		req = req.SubResource(sub)
	}
	err := req.Do(ctx).Into(out)
	return out, err
}

// watchResources starts the informers DynamicResources reads from; a
// new or changed slice, class or claim may make a waiting pod fit.
func (s *Scheduler) watchResources() error {
	rc, err := client.REST(s.cfg.RESTConfig, "/apis", resourcev1.SchemeGroupVersion)
	if err != nil {
		return err
	}
	s.resourceClient = rc
	inflight := &inflightClaims{m: map[types.UID]*resourcev1.AllocationResult{}}
	wake := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.queue.moveAll() },
		UpdateFunc: func(any, any) { s.queue.moveAll() },
		DeleteFunc: func(any) { s.queue.moveAll() },
	}
	// An allocation the informer shows is no longer in flight.
	claimSeen := func(obj any, deleted bool) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj, deleted = t.Obj, true
		}
		if c, ok := obj.(*resourcev1.ResourceClaim); ok && (deleted || c.Status.Allocation != nil) {
			inflight.remove(c.UID)
		}
		s.queue.moveAll()
	}
	infs := make([]cache.SharedIndexInformer, 3)
	for i, w := range []struct {
		resource string
		obj      runtime.Object
		h        cache.ResourceEventHandler
	}{
		{"resourceclaims", &resourcev1.ResourceClaim{}, cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { claimSeen(o, false) },
			UpdateFunc: func(_, o any) { claimSeen(o, false) },
			DeleteFunc: func(o any) { claimSeen(o, true) },
		}},
		{"deviceclasses", &resourcev1.DeviceClass{}, wake},
		{"resourceslices", &resourcev1.ResourceSlice{}, wake},
	} {
		inf := s.informer(rc, w.resource, w.obj)
		reg, err := inf.AddEventHandler(w.h)
		if err != nil {
			return err
		}
		s.synced = append(s.synced, reg.HasSynced)
		infs[i] = inf
	}
	s.dra = dynamicResourcesPlugin{
		claims:   resourcelisters.NewResourceClaimLister(infs[0].GetIndexer()),
		classes:  classLister{resourcelisters.NewDeviceClassLister(infs[1].GetIndexer())},
		slices:   resourcelisters.NewResourceSliceLister(infs[2].GetIndexer()),
		celCache: cel.NewCache(100, cel.Features{EnableConsumableCapacity: true}),
		inflight: inflight,
	}
	return nil
}
