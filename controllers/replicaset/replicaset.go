// Package replicaset is the ReplicaSet controller, as
// kube-controller-manager's: it keeps spec.replicas active pods matching
// each ReplicaSet's selector, creating them from its template and
// deleting the least valuable first, adopts orphan pods that match and
// releases owned pods that no longer do, and reports the ReplicaSet's
// status. Expectations keep a burst of creates or deletes from being
// repeated before the informer shows them.
//
// It owns the pods' ownerReferences to ReplicaSets, their creation and
// deletion for that reason, and ReplicaSet status. It must not touch
// pods owned by another controller, nor a ReplicaSet's spec (that is its
// Deployment's or the user's).
package replicaset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/worker"
)

const (
	// DefaultBurstReplicas caps the pods one sync creates or deletes
	// (upstream's burstReplicas); the rest wait for the next sync.
	DefaultBurstReplicas = 500
	// DefaultWorkers is upstream's --concurrent-replicaset-syncs.
	DefaultWorkers = 5
	// OwnerIndex indexes pods (and ReplicaSets) by their controller's
	// UID, and orphans by OrphanIndexKey(namespace), so that a sync reads
	// only the objects it may own instead of its whole namespace.
	OwnerIndex = "replicaset.bonsai.dev/controller-uid"
)

// Config is what the controller is built from; zero fields take defaults.
type Config struct {
	Client    *client.Clientset
	Informers *client.Informers
	Logger    *slog.Logger
	Clock     clock.WithTicker
	Workers   int
	// BurstReplicas caps creates or deletes per sync.
	BurstReplicas int
}

// Controller is the ReplicaSet controller.
type Controller struct {
	cfg      Config
	client   *client.Clientset
	clock    clock.WithTicker
	log      *slog.Logger
	rsInf    cache.SharedIndexInformer
	podInf   cache.SharedIndexInformer
	rsLister appslisters.ReplicaSetLister
	queue    workqueue.TypedRateLimitingInterface[string]
	exp      *expectations
	recorder record.EventRecorder
}

// New builds the controller over cfg's shared informers; Run starts it.
func New(cfg Config) (*Controller, error) {
	if cfg.Client == nil || cfg.Informers == nil {
		return nil, errors.New("replicaset: Client and Informers are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.BurstReplicas <= 0 {
		cfg.BurstReplicas = DefaultBurstReplicas
	}
	c := &Controller{
		cfg:    cfg,
		client: cfg.Client,
		clock:  cfg.Clock,
		log:    cfg.Logger,
		rsInf:  cfg.Informers.For(&appsv1.ReplicaSet{}),
		podInf: cfg.Informers.For(&corev1.Pod{}),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "replicaset", Clock: cfg.Clock}),
		exp: newExpectations(cfg.Clock.Now),
	}
	c.rsLister = appslisters.NewReplicaSetLister(c.rsInf.GetIndexer())
	if err := AddOwnerIndex(c.podInf, OwnerIndex); err != nil {
		return nil, err
	}
	if err := AddOwnerIndex(c.rsInf, OwnerIndex); err != nil {
		return nil, err
	}
	if _, err := c.rsInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, cur any) { c.enqueue(cur) },
		DeleteFunc: c.deleteReplicaSet,
	}); err != nil {
		return nil, err
	}
	if _, err := c.podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.addPod,
		UpdateFunc: c.updatePod,
		DeleteFunc: c.deletePod,
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// AddOwnerIndex adds to inf, unless it has it already (another controller
// of the process asked first), the index of objects by their
// controller's UID, with orphans under OrphanIndexKey of their namespace.
func AddOwnerIndex(inf cache.SharedIndexInformer, name string) error {
	if _, ok := inf.GetIndexer().GetIndexers()[name]; ok {
		return nil
	}
	return inf.AddIndexers(cache.Indexers{name: func(obj any) ([]string, error) {
		m, ok := obj.(metav1.Object)
		if !ok {
			return nil, nil
		}
		if ref := metav1.GetControllerOf(m); ref != nil {
			return []string{string(ref.UID)}, nil
		}
		return []string{OrphanIndexKey(m.GetNamespace())}, nil
	}})
}

// OrphanIndexKey is the owner-index key of the objects of namespace that
// have no controller.
func OrphanIndexKey(namespace string) string { return "orphan/" + namespace }

// Run waits for the caches, then syncs ReplicaSets until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	c.recorder = client.NewRecorder(ctx, c.client.Core.RESTClient(), "replicaset-controller")
	worker.Run(ctx, c.queue, c.cfg.Workers, c.sync, c.log, "replicaset", c.rsInf.HasSynced, c.podInf.HasSynced)
	return nil
}

func keyOf(obj metav1.Object) string { return obj.GetNamespace() + "/" + obj.GetName() }

func (c *Controller) enqueue(obj any) {
	if rs, ok := obj.(*appsv1.ReplicaSet); ok {
		c.queue.Add(keyOf(rs))
	}
}

func (c *Controller) deleteReplicaSet(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	rs, ok := obj.(*appsv1.ReplicaSet)
	if !ok {
		return
	}
	c.exp.forget(keyOf(rs))
	c.queue.Add(keyOf(rs))
}

// resolveController is the ReplicaSet ref names, if the cache has it
// with the same UID.
func (c *Controller) resolveController(namespace string, ref *metav1.OwnerReference) *appsv1.ReplicaSet {
	if ref.Kind != controllerKind.Kind || ref.APIVersion != controllerKind.GroupVersion().String() {
		return nil
	}
	rs, err := c.rsLister.ReplicaSets(namespace).Get(ref.Name)
	if err != nil || rs.UID != ref.UID {
		return nil
	}
	return rs
}

// replicaSetsSelecting are the ReplicaSets of pod's namespace whose
// selector matches it: those that may adopt it.
func (c *Controller) replicaSetsSelecting(pod *corev1.Pod) []*appsv1.ReplicaSet {
	all, err := c.rsLister.ReplicaSets(pod.Namespace).List(labels.Everything())
	if err != nil || len(pod.Labels) == 0 {
		return nil
	}
	var out []*appsv1.ReplicaSet
	for _, rs := range all {
		sel, err := metav1.LabelSelectorAsSelector(rs.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(pod.Labels)) {
			continue
		}
		out = append(out, rs)
	}
	return out
}

func (c *Controller) addPod(obj any) {
	pod := obj.(*corev1.Pod)
	if pod.DeletionTimestamp != nil {
		// Seen first while already going (a restart of the
		// controller): not the creation an expectation waits for.
		c.deletePod(pod)
		return
	}
	if ref := metav1.GetControllerOf(pod); ref != nil {
		if rs := c.resolveController(pod.Namespace, ref); rs != nil {
			c.exp.creationObserved(keyOf(rs))
			c.queue.Add(keyOf(rs))
		}
		return
	}
	for _, rs := range c.replicaSetsSelecting(pod) {
		c.queue.Add(keyOf(rs))
	}
}

func (c *Controller) updatePod(oldObj, curObj any) {
	old, cur := oldObj.(*corev1.Pod), curObj.(*corev1.Pod)
	if old.ResourceVersion == cur.ResourceVersion {
		return
	}
	labelsChanged := !reflect.DeepEqual(old.Labels, cur.Labels)
	if cur.DeletionTimestamp != nil {
		// A graceful delete began: the ReplicaSet may replace the pod
		// now rather than when it is gone, as upstream does.
		c.deletePod(cur)
		if labelsChanged {
			c.deletePod(old)
		}
		return
	}
	curRef, oldRef := metav1.GetControllerOf(cur), metav1.GetControllerOf(old)
	refChanged := !reflect.DeepEqual(curRef, oldRef)
	if refChanged && oldRef != nil {
		if rs := c.resolveController(old.Namespace, oldRef); rs != nil {
			c.queue.Add(keyOf(rs))
		}
	}
	if curRef != nil {
		rs := c.resolveController(cur.Namespace, curRef)
		if rs == nil {
			return
		}
		c.queue.Add(keyOf(rs))
		// A pod that just became Ready becomes available minReadySeconds
		// later, with no event of its own then.
		if rs.Spec.MinReadySeconds > 0 && !IsPodReady(old) && IsPodReady(cur) {
			c.queue.AddAfter(keyOf(rs), time.Duration(rs.Spec.MinReadySeconds)*time.Second+time.Second)
		}
		return
	}
	if labelsChanged || refChanged {
		for _, rs := range c.replicaSetsSelecting(cur) {
			c.queue.Add(keyOf(rs))
		}
	}
}

func (c *Controller) deletePod(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		return
	}
	if rs := c.resolveController(pod.Namespace, ref); rs != nil {
		c.exp.deletionObserved(keyOf(rs), keyOf(pod))
		c.queue.Add(keyOf(rs))
	}
}

// podsOwnedBy are the cached pods whose controller has uid.
func podsOwnedBy(inf cache.SharedIndexInformer, uid types.UID) []*corev1.Pod {
	objs, _ := inf.GetIndexer().ByIndex(OwnerIndex, string(uid))
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*corev1.Pod))
	}
	return out
}

// sync brings one ReplicaSet's pods and status to what its spec says.
func (c *Controller) sync(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	rs, err := c.rsLister.ReplicaSets(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		c.exp.forget(key)
		return nil
	}
	if err != nil {
		return err
	}
	needsManage := c.exp.satisfied(key)
	sel, err := metav1.LabelSelectorAsSelector(rs.Spec.Selector)
	if err != nil {
		// Validation refuses such a selector; nothing a retry fixes.
		c.log.Error("invalid selector", "replicaset", key, "err", err)
		return nil
	}
	candidates := podsOwnedBy(c.podInf, rs.UID)
	var terminating []*corev1.Pod
	for _, p := range candidates {
		if isPodTerminating(p) && sel.Matches(labels.Set(p.Labels)) {
			terminating = append(terminating, p)
		}
	}
	orphans, _ := c.podInf.GetIndexer().ByIndex(OwnerIndex, OrphanIndexKey(namespace))
	for _, o := range orphans {
		candidates = append(candidates, o.(*corev1.Pod))
	}
	active := candidates[:0:0]
	for _, p := range candidates {
		if isPodActive(p) {
			active = append(active, p)
		}
	}
	pods, err := c.claimPods(ctx, rs, sel, active)
	if err != nil {
		return err
	}
	var manageErr error
	if needsManage && rs.DeletionTimestamp == nil {
		manageErr = c.manageReplicas(ctx, rs, pods)
	}
	status := c.calculateStatus(rs, pods, terminating, manageErr)
	updated, err := c.updateStatus(ctx, rs.DeepCopy(), status)
	if err != nil {
		return err
	}
	// Pods Ready but not yet available become so with no event: look
	// again when they should be.
	if manageErr == nil && updated.Spec.MinReadySeconds > 0 &&
		updated.Status.ReadyReplicas == *updated.Spec.Replicas && updated.Status.AvailableReplicas != *updated.Spec.Replicas {
		c.queue.AddAfter(key, time.Duration(updated.Spec.MinReadySeconds)*time.Second)
	}
	return manageErr
}

// claimPods returns the pods rs owns after adopting the orphans its
// selector matches and releasing the owned pods it no longer does.
func (c *Controller) claimPods(ctx context.Context, rs *appsv1.ReplicaSet, sel labels.Selector, pods []*corev1.Pod) ([]*corev1.Pod, error) {
	var (
		claimed  []*corev1.Pod
		errs     []error
		adoptErr error
		checked  bool
	)
	for _, p := range pods {
		matches := sel.Matches(labels.Set(p.Labels))
		if ref := metav1.GetControllerOf(p); ref != nil {
			switch {
			case ref.UID != rs.UID:
			case matches:
				claimed = append(claimed, p)
			case rs.DeletionTimestamp == nil:
				if err := c.release(ctx, rs, p); err != nil {
					errs = append(errs, err)
				}
			}
			continue
		}
		if rs.DeletionTimestamp != nil || !matches || p.DeletionTimestamp != nil {
			continue
		}
		// Adopt only for a ReplicaSet that still exists as cached: the
		// cache may lag a delete, and an adopted pod would then go with
		// the deleted owner.
		if !checked {
			adoptErr, checked = c.canAdopt(ctx, rs), true
		}
		if adoptErr != nil {
			errs = append(errs, adoptErr)
			break
		}
		patch := AdoptPatch(rs, controllerKind.Kind, controllerKind.GroupVersion().String(), p.UID)
		if _, err := c.client.Core.Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
			if !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("adopting pod %s: %w", keyOf(p), err))
			}
			continue
		}
		claimed = append(claimed, p)
	}
	return claimed, utilerrors.NewAggregate(errs)
}

func (c *Controller) canAdopt(ctx context.Context, rs *appsv1.ReplicaSet) error {
	fresh, err := c.client.Apps.ReplicaSets(rs.Namespace).Get(ctx, rs.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if fresh.UID != rs.UID {
		return fmt.Errorf("original ReplicaSet %s is gone: got uid %s, wanted %s", keyOf(rs), fresh.UID, rs.UID)
	}
	if fresh.DeletionTimestamp != nil {
		return fmt.Errorf("ReplicaSet %s has just been deleted at %s", keyOf(rs), fresh.DeletionTimestamp)
	}
	return nil
}

// release removes rs's ownerReference from p. A pod gone, or replaced by
// one of the same name (the patch's uid then fails validation), needs
// nothing.
func (c *Controller) release(ctx context.Context, rs *appsv1.ReplicaSet, p *corev1.Pod) error {
	_, err := c.client.Core.Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, ReleasePatch(rs.UID, p.UID), metav1.PatchOptions{})
	if err == nil || apierrors.IsNotFound(err) || apierrors.IsInvalid(err) {
		return nil
	}
	return fmt.Errorf("releasing pod %s: %w", keyOf(p), err)
}
