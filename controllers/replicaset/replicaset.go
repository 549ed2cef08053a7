// Package replicaset is the ReplicaSet controller, as
// kube-controller-manager's: it keeps spec.replicas active pods matching
// each ReplicaSet's selector, creating them from its template and
// deleting the least valuable first, adopts orphan pods that match and
// releases owned pods that no longer do, and reports the ReplicaSet's
// status. Expectations keep a burst of creates or deletes from being
// repeated before the informer shows them. The same controller keeps
// ReplicationControllers' pods, given Owners that convert them
// (controllers/replication), as upstream's does.
//
// It owns the pods' ownerReferences to its owners, their creation and
// deletion for that reason, and its owners' status. It must not touch
// pods owned by another controller, nor a ReplicaSet's spec (that is its
// Deployment's or the user's).
package replicaset

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"reflect"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/kit"
	"bonsai.dev/bonsai/controllers/worker"
)

const (
	// DefaultBurstReplicas caps the pods one sync creates or deletes
	// (upstream's burstReplicas); the rest wait for the next sync.
	DefaultBurstReplicas = 500
	// DefaultWorkers is upstream's --concurrent-replicaset-syncs.
	DefaultWorkers = 5
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
	// Owners are the objects kept; nil: ReplicaSets.
	Owners *Owners
}

// Controller is the ReplicaSet controller.
type Controller struct {
	cfg      Config
	client   *client.Clientset
	clock    clock.WithTicker
	log      *slog.Logger
	owners   *Owners
	rsInf    cache.SharedIndexInformer
	podInf   cache.SharedIndexInformer
	queue    workqueue.TypedRateLimitingInterface[string]
	exp      *kit.Expectations
	pods     *kit.PodEvents[*appsv1.ReplicaSet]
	recorder record.EventRecorder
}

// New builds the controller over cfg's shared informers; Run starts it.
func New(cfg Config) (*Controller, error) {
	if cfg.Client == nil || cfg.Informers == nil {
		return nil, errors.New("replicaset: Client and Informers are required")
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.Clock = cmp.Or[clock.WithTicker](cfg.Clock, clock.RealClock{})
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.BurstReplicas <= 0 {
		cfg.BurstReplicas = DefaultBurstReplicas
	}
	if cfg.Owners == nil {
		cfg.Owners = replicaSets(cfg.Client, cfg.Informers)
	}
	c := &Controller{
		cfg:    cfg,
		client: cfg.Client,
		clock:  cfg.Clock,
		log:    cfg.Logger,
		owners: cfg.Owners,
		rsInf:  cfg.Owners.Informer,
		podInf: cfg.Informers.For(&corev1.Pod{}),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: cfg.Owners.Component, Clock: cfg.Clock}),
		exp: kit.NewExpectations(cfg.Clock),
	}
	// A sync reads only the pods it may claim, a Deployment only its
	// ReplicaSets and the orphans.
	for _, inf := range []cache.SharedIndexInformer{c.podInf, c.rsInf} {
		if err := kit.AddControllerIndex(inf); err != nil {
			return nil, err
		}
	}
	if _, err := c.rsInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, cur any) { c.enqueue(cur) },
		DeleteFunc: c.deleteReplicaSet,
	}); err != nil {
		return nil, err
	}
	c.pods = &kit.PodEvents[*appsv1.ReplicaSet]{
		Owner: c.owner, Selecting: c.replicaSetsSelecting,
		Enqueue:         func(rs *appsv1.ReplicaSet) { c.queue.Add(keyOf(rs)) },
		EnqueueAfter:    func(rs *appsv1.ReplicaSet, d time.Duration) { c.queue.AddAfter(keyOf(rs), d) },
		MinReadySeconds: func(rs *appsv1.ReplicaSet) int32 { return rs.Spec.MinReadySeconds },
		Created:         func(rs *appsv1.ReplicaSet) { c.exp.Lower(keyOf(rs), 1, 0) },
		Deleted:         func(rs *appsv1.ReplicaSet, pod metav1.Object) { c.exp.Observed(keyOf(rs), keyOf(pod)) },
		GoingIsGone:     true,
	}
	if _, err := c.podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.pods.Add,
		UpdateFunc: c.updatePod,
		DeleteFunc: c.pods.Delete,
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// Run waits for the caches, then syncs ReplicaSets until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	c.recorder = client.NewRecorder(ctx, c.client.Core.RESTClient(), c.owners.Component)
	worker.Run(ctx, c.queue, c.cfg.Workers, c.sync, c.log, "owner", c.rsInf.HasSynced, c.podInf.HasSynced)
	return nil
}

func keyOf(obj metav1.Object) string { return obj.GetNamespace() + "/" + obj.GetName() }

func (c *Controller) enqueue(obj any) {
	if rs, ok := obj.(metav1.Object); ok {
		c.queue.Add(keyOf(rs))
	}
}

func (c *Controller) deleteReplicaSet(obj any) {
	rs, ok := kit.Unwrap[metav1.Object](obj)
	if !ok {
		return
	}
	c.exp.Forget(keyOf(rs))
	c.queue.Add(keyOf(rs))
}

// owner is the ReplicaSet that controls obj, if the cache has it with
// the uid the reference names.
func (c *Controller) owner(obj metav1.Object) *appsv1.ReplicaSet {
	get := func(name string) (*appsv1.ReplicaSet, error) { return c.cached(obj.GetNamespace(), name) }
	return kit.ResolveControllerRef(metav1.GetControllerOfNoCopy(obj), c.owners.Kind, get)
}

// replicaSetsSelecting are the ReplicaSets of pod's namespace whose
// selector matches it: those that may adopt it.
func (c *Controller) replicaSetsSelecting(pod metav1.Object) []*appsv1.ReplicaSet {
	if len(pod.GetLabels()) == 0 {
		return nil
	}
	return kit.Selecting(c.cachedIn(pod.GetNamespace()), func(rs *appsv1.ReplicaSet) *metav1.LabelSelector { return rs.Spec.Selector }, pod.GetLabels())
}

// updatePod is the kit's, but for a pod that began a graceful delete:
// the ReplicaSet may replace it now rather than when it is gone, as
// upstream's.
func (c *Controller) updatePod(oldObj, curObj any) {
	old, cur := oldObj.(*corev1.Pod), curObj.(*corev1.Pod)
	if old.ResourceVersion == cur.ResourceVersion {
		return
	}
	if cur.DeletionTimestamp != nil {
		c.pods.Delete(cur)
		if !reflect.DeepEqual(old.Labels, cur.Labels) {
			c.pods.Delete(old)
		}
		return
	}
	c.pods.Update(old, cur)
}

// sync brings one ReplicaSet's pods and status to what its spec says.
func (c *Controller) sync(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	rs, err := c.cached(namespace, name)
	if apierrors.IsNotFound(err) {
		c.exp.Forget(key)
		return nil
	}
	if err != nil {
		return err
	}
	needsManage := c.exp.Satisfied(key)
	sel, err := metav1.LabelSelectorAsSelector(rs.Spec.Selector)
	if err != nil {
		// Validation refuses such a selector; nothing a retry fixes.
		c.log.Error("invalid selector", "owner", key, "err", err)
		return nil
	}
	candidates := kit.ControlledBy[*corev1.Pod](c.podInf, string(rs.UID))
	var terminating []*corev1.Pod
	for _, p := range candidates {
		if isPodTerminating(p) && sel.Matches(labels.Set(p.Labels)) {
			terminating = append(terminating, p)
		}
	}
	candidates = append(candidates, kit.Orphans[*corev1.Pod](c.podInf, namespace)...)
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
	if !c.owners.TerminatingReplicas {
		status.TerminatingReplicas = nil
	}
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
	m := &kit.RefManager[*corev1.Pod]{
		Owner: rs, Kind: c.owners.Kind, Selector: sel,
		Patch: kit.PatchWith(c.client.Core.Pods),
		CanAdopt: kit.RecheckOwner(rs, func(ctx context.Context, name string, _ metav1.GetOptions) (*appsv1.ReplicaSet, error) {
			return c.owners.Get(ctx, rs.Namespace, name)
		}),
	}
	return m.Claim(ctx, pods, nil)
}
