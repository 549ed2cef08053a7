// Package deployment is the Deployment controller, as
// kube-controller-manager's: it rolls a Deployment's pod template out
// through ReplicaSets, one per template (named by the pod-template-hash
// label), with the RollingUpdate (maxSurge, maxUnavailable) or Recreate
// strategy; scales them proportionally when the Deployment is resized
// mid-rollout; keeps revisionHistoryLimit old ReplicaSets; honours
// spec.paused; and reports status, the Progressing and Available
// conditions and the revision annotations that kubectl rollout reads. A
// rollback (kubectl rollout undo) is a template change back to an old
// ReplicaSet's template: that ReplicaSet becomes the new one again.
//
// It owns the ReplicaSets it controls (their spec.replicas, annotations
// and ownerReferences) and Deployment status and revision annotation.
// Pods are the ReplicaSet controller's: it never creates or deletes one.
package deployment

import (
	"cmp"
	"context"
	"errors"
	"log/slog"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/kit"
	"bonsai.dev/bonsai/controllers/worker"
)

// DefaultWorkers is upstream's --concurrent-deployment-syncs.
const DefaultWorkers = 5

var controllerKind = appsv1.SchemeGroupVersion.WithKind("Deployment")

// Config is what the controller is built from; zero fields take defaults.
type Config struct {
	Client    *client.Clientset
	Informers *client.Informers
	Logger    *slog.Logger
	Clock     clock.WithTicker
	Workers   int
}

// Controller is the Deployment controller.
type Controller struct {
	cfg      Config
	client   *client.Clientset
	clock    clock.WithTicker
	log      *slog.Logger
	dInf     cache.SharedIndexInformer
	rsInf    cache.SharedIndexInformer
	podInf   cache.SharedIndexInformer
	dLister  appslisters.DeploymentLister
	rsLister appslisters.ReplicaSetLister
	queue    workqueue.TypedRateLimitingInterface[string]
	recorder record.EventRecorder
}

// New builds the controller over cfg's shared informers; Run starts it.
func New(cfg Config) (*Controller, error) {
	if cfg.Client == nil || cfg.Informers == nil {
		return nil, errors.New("deployment: Client and Informers are required")
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.Clock = cmp.Or[clock.WithTicker](cfg.Clock, clock.RealClock{})
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	c := &Controller{
		cfg:    cfg,
		client: cfg.Client,
		clock:  cfg.Clock,
		log:    cfg.Logger,
		dInf:   cfg.Informers.For(&appsv1.Deployment{}),
		rsInf:  cfg.Informers.For(&appsv1.ReplicaSet{}),
		podInf: cfg.Informers.For(&corev1.Pod{}),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "deployment", Clock: cfg.Clock}),
	}
	c.dLister = appslisters.NewDeploymentLister(c.dInf.GetIndexer())
	c.rsLister = appslisters.NewReplicaSetLister(c.rsInf.GetIndexer())
	for _, inf := range []cache.SharedIndexInformer{c.rsInf, c.podInf} {
		if err := kit.AddControllerIndex(inf); err != nil {
			return nil, err
		}
	}
	err := worker.AddHandlers("deployment",
		worker.Handler{Informer: c.dInf, Handler: worker.EnqueueChanges(c.queue)},
		worker.Handler{Informer: c.rsInf, Handler: cache.ResourceEventHandlerFuncs{AddFunc: c.addReplicaSet, UpdateFunc: c.updateReplicaSet, DeleteFunc: c.deleteReplicaSet}},
		worker.Handler{Informer: c.podInf, Handler: cache.ResourceEventHandlerFuncs{DeleteFunc: c.deletePod}},
	)
	return c, err
}

// Run waits for the caches, then syncs Deployments until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	c.recorder = client.NewRecorder(ctx, c.client.Core.RESTClient(), "deployment-controller")
	worker.Run(ctx, c.queue, c.cfg.Workers, c.sync, c.log, "deployment", c.dInf.HasSynced, c.rsInf.HasSynced, c.podInf.HasSynced)
	return nil
}

func keyOf(obj metav1.Object) string { return obj.GetNamespace() + "/" + obj.GetName() }

func (c *Controller) enqueue(obj any) {
	if d, ok := kit.Unwrap[*appsv1.Deployment](obj); ok {
		c.queue.Add(keyOf(d))
	}
}

// owner is the Deployment that controls obj, if cached with the uid the
// reference names.
func (c *Controller) owner(obj metav1.Object) *appsv1.Deployment {
	return kit.ResolveControllerRef(metav1.GetControllerOfNoCopy(obj), controllerKind, c.dLister.Deployments(obj.GetNamespace()).Get)
}

// deploymentsSelecting are the Deployments that may adopt rs.
func (c *Controller) deploymentsSelecting(rs metav1.Object) []*appsv1.Deployment {
	if len(rs.GetLabels()) == 0 {
		return nil
	}
	all, err := c.dLister.Deployments(rs.GetNamespace()).List(labels.Everything())
	if err != nil {
		return nil
	}
	return kit.Selecting(all, func(d *appsv1.Deployment) *metav1.LabelSelector { return d.Spec.Selector }, rs.GetLabels())
}

func (c *Controller) addReplicaSet(obj any) {
	rs := obj.(*appsv1.ReplicaSet)
	if rs.DeletionTimestamp != nil {
		c.deleteReplicaSet(rs)
		return
	}
	if metav1.GetControllerOfNoCopy(rs) != nil {
		if d := c.owner(rs); d != nil {
			c.queue.Add(keyOf(d))
		}
		return
	}
	for _, d := range c.deploymentsSelecting(rs) {
		c.queue.Add(keyOf(d))
	}
}

func (c *Controller) updateReplicaSet(old, cur any) {
	kit.WakeOwners(old.(*appsv1.ReplicaSet), cur.(*appsv1.ReplicaSet), c.owner, c.deploymentsSelecting, func(d *appsv1.Deployment) { c.queue.Add(keyOf(d)) })
}

func (c *Controller) deleteReplicaSet(obj any) {
	rs, ok := kit.Unwrap[*appsv1.ReplicaSet](obj)
	if !ok {
		return
	}
	if d := c.owner(rs); d != nil {
		c.queue.Add(keyOf(d))
	}
}

// deletePod wakes a Recreate Deployment: it waits for its old pods to be
// gone before it creates new ones, and a pod's deletion changes no
// ReplicaSet.
func (c *Controller) deletePod(obj any) {
	pod, ok := kit.Unwrap[*corev1.Pod](obj)
	if !ok {
		return
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.Kind != "ReplicaSet" {
		return
	}
	rs, err := c.rsLister.ReplicaSets(pod.Namespace).Get(ref.Name)
	if err != nil || rs.UID != ref.UID {
		return
	}
	if d := c.owner(rs); d != nil && d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
		c.queue.Add(keyOf(d))
	}
}

// sync moves one Deployment a step toward its spec.
func (c *Controller) sync(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	cached, err := c.dLister.Deployments(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	d := cached.DeepCopy()
	if d.Spec.Selector == nil || (len(d.Spec.Selector.MatchLabels) == 0 && len(d.Spec.Selector.MatchExpressions) == 0) {
		c.recorder.Eventf(d, corev1.EventTypeWarning, reasonSelectingAll, "This deployment is selecting all pods. A non-empty selector is required.")
		if d.Status.ObservedGeneration < d.Generation {
			d.Status.ObservedGeneration = d.Generation
			_, err := c.client.Apps.Deployments(d.Namespace).UpdateStatus(ctx, d, metav1.UpdateOptions{})
			return err
		}
		return nil
	}
	rsList, err := c.claimReplicaSets(ctx, d)
	if err != nil {
		return err
	}
	if d.DeletionTimestamp != nil {
		return c.syncStatusOnly(ctx, d, rsList)
	}
	if err := c.checkPausedConditions(ctx, d); err != nil {
		return err
	}
	if d.Spec.Paused {
		return c.syncScaleOnly(ctx, d, rsList)
	}
	scaling, err := c.isScalingEvent(ctx, d, rsList)
	if err != nil {
		return err
	}
	if scaling {
		return c.syncScaleOnly(ctx, d, rsList)
	}
	switch d.Spec.Strategy.Type {
	case appsv1.RecreateDeploymentStrategyType:
		return c.rolloutRecreate(ctx, d, rsList)
	case appsv1.RollingUpdateDeploymentStrategyType:
		return c.rolloutRolling(ctx, d, rsList)
	}
	return nil
}
