// Package statefulset runs the pods of StatefulSets as
// kube-controller-manager's statefulset controller does: stable names
// <set>-<ordinal> from spec.ordinals.start, hostname and subdomain, PVCs
// from volumeClaimTemplates created before their pod and kept or handed to
// the garbage collector per persistentVolumeClaimRetentionPolicy,
// OrderedReady (one pod at a time, in order up, in reverse down) or
// Parallel management, RollingUpdate (partition, maxUnavailable) from the
// highest ordinal down or OnDelete, ControllerRevisions for kubectl
// rollout history and undo, and status.
//
// It owns the sets' pods, their PVCs' creation and ownerReferences, the
// sets' ControllerRevisions and status. It never deletes a PVC itself,
// and must not touch pods it does not control.
package statefulset

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/kit"
	"bonsai.dev/bonsai/controllers/worker"
)

// workers is upstream's --concurrent-statefulset-syncs.
const workers = 5

var controllerKind = appsv1.SchemeGroupVersion.WithKind("StatefulSet")

// Config is what the controller needs; Clock and Logger may be nil.
type Config struct {
	Client    *client.Clientset
	Informers *client.Informers
	Clock     clock.PassiveClock
	Logger    *slog.Logger
}

// Controller is the StatefulSet controller.
type Controller struct {
	client   *client.Clientset
	clock    clock.PassiveClock
	log      *slog.Logger
	recorder record.EventRecorder

	setLister appslisters.StatefulSetLister
	revLister appslisters.ControllerRevisionLister
	podLister corelisters.PodLister
	pvcLister corelisters.PersistentVolumeClaimLister
	synced    []cache.InformerSynced

	queue workqueue.TypedRateLimitingInterface[string]
}

// New builds the controller and registers its informer handlers.
func New(cfg Config) (*Controller, error) {
	if cfg.Client == nil || cfg.Informers == nil {
		return nil, fmt.Errorf("statefulset: Client and Informers are required")
	}
	cfg.Clock = cmp.Or[clock.PassiveClock](cfg.Clock, clock.RealClock{})
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	c := &Controller{
		client: cfg.Client,
		clock:  cfg.Clock,
		log:    cfg.Logger,
		queue:  workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](), workqueue.TypedRateLimitingQueueConfig[string]{Name: "statefulset"}),
	}
	setInf := cfg.Informers.For(&appsv1.StatefulSet{})
	revInf := cfg.Informers.For(&appsv1.ControllerRevision{})
	podInf := cfg.Informers.For(&corev1.Pod{})
	pvcInf := cfg.Informers.For(&corev1.PersistentVolumeClaim{})
	c.setLister = appslisters.NewStatefulSetLister(setInf.GetIndexer())
	c.revLister = appslisters.NewControllerRevisionLister(revInf.GetIndexer())
	c.podLister = corelisters.NewPodLister(podInf.GetIndexer())
	c.pvcLister = corelisters.NewPersistentVolumeClaimLister(pvcInf.GetIndexer())
	c.synced = []cache.InformerSynced{setInf.HasSynced, revInf.HasSynced, podInf.HasSynced, pvcInf.HasSynced}

	err := worker.AddHandlers("statefulset",
		worker.Handler{Informer: setInf, Handler: worker.EnqueueChanges(c.queue)},
		worker.Handler{Informer: podInf, Handler: (&kit.PodEvents[*appsv1.StatefulSet]{
			Owner: c.owner, Selecting: c.selecting,
			Enqueue:         func(set *appsv1.StatefulSet) { c.enqueue(set) },
			EnqueueAfter:    c.enqueueAfter,
			MinReadySeconds: func(set *appsv1.StatefulSet) int32 { return set.Spec.MinReadySeconds },
		}).Handler()},
		// A claim released by the garbage collector unblocks a pod
		// waiting on a stale one.
		worker.Handler{Informer: pvcInf, Handler: cache.ResourceEventHandlerFuncs{DeleteFunc: c.onClaimDelete}},
	)
	return c, err
}

// Run works until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	c.recorder = client.NewRecorder(ctx, c.client.Core.RESTClient(), "statefulset-controller")
	worker.Run(ctx, c.queue, workers, c.sync, c.log, "statefulset", c.synced...)
	return nil
}

func (c *Controller) enqueue(obj any) {
	worker.Enqueue(c.queue, obj)
}

func (c *Controller) enqueueAfter(set *appsv1.StatefulSet, d time.Duration) {
	c.queue.AddAfter(set.Namespace+"/"+set.Name, d)
}

// owner is the set that controls obj, if it still exists with the uid
// the reference names.
func (c *Controller) owner(obj metav1.Object) *appsv1.StatefulSet {
	return kit.ResolveControllerRef(metav1.GetControllerOfNoCopy(obj), controllerKind, c.setLister.StatefulSets(obj.GetNamespace()).Get)
}

// selecting is the sets whose selector matches an orphan pod.
func (c *Controller) selecting(pod metav1.Object) []*appsv1.StatefulSet {
	list, _ := c.setLister.StatefulSets(pod.GetNamespace()).List(labels.Everything())
	return kit.Selecting(list, func(set *appsv1.StatefulSet) *metav1.LabelSelector { return set.Spec.Selector }, pod.GetLabels())
}

func (c *Controller) onClaimDelete(obj any) {
	pvc, ok := kit.Unwrap[*corev1.PersistentVolumeClaim](obj)
	if !ok {
		return
	}
	list, _ := c.setLister.StatefulSets(pvc.Namespace).List(labels.Everything())
	for _, set := range list {
		sel, err := metav1.LabelSelectorAsSelector(set.Spec.Selector)
		if err == nil && sel.Matches(labels.Set(pvc.Labels)) {
			c.enqueue(set)
		}
	}
}

// refManager claims objects of kind T for set: its pods and its
// revisions.
func refManager[T metav1.Object](c *Controller, set *appsv1.StatefulSet, sel labels.Selector, patch func(context.Context, T, []byte) (T, error)) *kit.RefManager[T] {
	return &kit.RefManager[T]{
		Owner: set, Kind: controllerKind, Selector: sel,
		Patch:    patch,
		CanAdopt: kit.RecheckOwner(set, c.client.Apps.StatefulSets(set.Namespace).Get),
	}
}
