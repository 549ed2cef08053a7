// Package daemonset runs one pod of each DaemonSet on every node the
// DaemonSet wants, as kube-controller-manager's daemonset controller does:
// node name, selector, required node affinity and taints against the
// template's tolerations plus the daemon tolerations decide where; pods
// are pinned with a required node affinity on the node's name and bound
// by the scheduler; failed pods are replaced with back-off; templates are
// rolled out with RollingUpdate (maxUnavailable, maxSurge) or OnDelete and
// recorded as ControllerRevisions for kubectl rollout history and undo.
//
// It owns daemon pods, the DaemonSets' ControllerRevisions and their
// status. It must not touch nodes, nor pods it does not control.
package daemonset

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/kit"
	"bonsai.dev/bonsai/controllers/worker"
)

// Upstream's tuning.
const (
	// burstReplicas caps the pods created or deleted in one sync.
	burstReplicas = 250
	// Failed pods are replaced after a back-off per DaemonSet and node.
	failedPodBackoffInitial = time.Second
	failedPodBackoffMax     = 15 * time.Minute
	statusUpdateRetries     = 1
	workers                 = 2
)

var controllerKind = appsv1.SchemeGroupVersion.WithKind("DaemonSet")

// Config is what the controller needs; Clock and Logger may be nil.
type Config struct {
	Client    *client.Clientset
	Informers *client.Informers
	Clock     clock.Clock
	Logger    *slog.Logger
}

// Controller is the DaemonSet controller.
type Controller struct {
	client   *client.Clientset
	clock    clock.Clock
	log      *slog.Logger
	recorder record.EventRecorder

	dsLister   appslisters.DaemonSetLister
	revLister  appslisters.ControllerRevisionLister
	podLister  corelisters.PodLister
	nodeLister corelisters.NodeLister
	synced     []cache.InformerSynced

	queue        workqueue.TypedRateLimitingInterface[string]
	expectations *kit.Expectations
	failedPods   *flowcontrol.Backoff
}

// New builds the controller and registers its informer handlers.
func New(cfg Config) (*Controller, error) {
	if cfg.Client == nil || cfg.Informers == nil {
		return nil, fmt.Errorf("daemonset: Client and Informers are required")
	}
	cfg.Clock = cmp.Or[clock.Clock](cfg.Clock, clock.RealClock{})
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	c := &Controller{
		client:       cfg.Client,
		clock:        cfg.Clock,
		log:          cfg.Logger,
		queue:        workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](), workqueue.TypedRateLimitingQueueConfig[string]{Name: "daemonset"}),
		expectations: kit.NewExpectations(cfg.Clock),
		failedPods:   flowcontrol.NewBackOff(failedPodBackoffInitial, failedPodBackoffMax),
	}
	c.failedPods.Clock = cfg.Clock
	dsInf := cfg.Informers.For(&appsv1.DaemonSet{})
	revInf := cfg.Informers.For(&appsv1.ControllerRevision{})
	podInf := cfg.Informers.For(&corev1.Pod{})
	nodeInf := cfg.Informers.For(&corev1.Node{})
	c.dsLister = appslisters.NewDaemonSetLister(dsInf.GetIndexer())
	c.revLister = appslisters.NewControllerRevisionLister(revInf.GetIndexer())
	c.podLister = corelisters.NewPodLister(podInf.GetIndexer())
	c.nodeLister = corelisters.NewNodeLister(nodeInf.GetIndexer())
	c.synced = []cache.InformerSynced{dsInf.HasSynced, revInf.HasSynced, podInf.HasSynced, nodeInf.HasSynced}

	err := worker.AddHandlers("daemonset",
		worker.Handler{Informer: dsInf, Handler: worker.EnqueueChanges(c.queue)},
		worker.Handler{Informer: revInf, Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    c.enqueueOwner,
			UpdateFunc: func(_, cur any) { c.enqueueOwner(cur) },
			DeleteFunc: c.enqueueOwner,
		}},
		worker.Handler{Informer: podInf, Handler: c.podEvents().Handler()},
		worker.Handler{Informer: nodeInf, Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { c.enqueueAll() },
			UpdateFunc: c.updateNode,
			DeleteFunc: func(any) { c.enqueueAll() },
		}},
	)
	return c, err
}

// Run works until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	c.recorder = client.NewRecorder(ctx, c.client.Core.RESTClient(), "daemonset-controller")
	worker.Run(ctx, c.queue, workers, c.sync, c.log, "daemonset", c.synced...)
	return nil
}

func (c *Controller) enqueue(obj any) {
	worker.Enqueue(c.queue, obj)
}

func (c *Controller) enqueueAfter(ds *appsv1.DaemonSet, d time.Duration) {
	c.queue.AddAfter(ds.Namespace+"/"+ds.Name, d)
}

func (c *Controller) enqueueAll() {
	list, _ := c.dsLister.List(labels.Everything())
	for _, ds := range list {
		c.enqueue(ds)
	}
}

// owner is the DaemonSet that controls obj, if it still exists with the
// uid the reference names.
func (c *Controller) owner(obj metav1.Object) *appsv1.DaemonSet {
	return kit.ResolveControllerRef(metav1.GetControllerOfNoCopy(obj), controllerKind, c.dsLister.DaemonSets(obj.GetNamespace()).Get)
}

func (c *Controller) enqueueOwner(obj any) {
	if m, ok := metaOf(obj); ok {
		if ds := c.owner(m); ds != nil {
			c.enqueue(ds)
		}
	}
}

// metaOf reads an informer object, tombstones included.
func metaOf(obj any) (metav1.Object, bool) {
	m, ok := kit.Unwrap[metav1.Object](obj)
	return m, ok
}

// selecting is the DaemonSets whose selector matches an orphan pod: one
// of them may adopt it.
func (c *Controller) selecting(pod metav1.Object) []*appsv1.DaemonSet {
	list, _ := c.dsLister.DaemonSets(pod.GetNamespace()).List(labels.Everything())
	return kit.Selecting(list, func(ds *appsv1.DaemonSet) *metav1.LabelSelector { return ds.Spec.Selector }, pod.GetLabels())
}

// podEvents wake the DaemonSets their pods concern; a pod seen going
// counts as gone, as upstream's.
func (c *Controller) podEvents() *kit.PodEvents[*appsv1.DaemonSet] {
	return &kit.PodEvents[*appsv1.DaemonSet]{
		Owner: c.owner, Selecting: c.selecting,
		Enqueue:         func(ds *appsv1.DaemonSet) { c.enqueue(ds) },
		EnqueueAfter:    c.enqueueAfter,
		MinReadySeconds: func(ds *appsv1.DaemonSet) int32 { return ds.Spec.MinReadySeconds },
		Created:         func(ds *appsv1.DaemonSet) { c.expectations.Lower(keyOf(ds), 1, 0) },
		Deleted:         func(ds *appsv1.DaemonSet, _ metav1.Object) { c.expectations.Lower(keyOf(ds), 0, 1) },
		GoingIsGone:     true,
	}
}

// updateNode wakes the DaemonSets for which the node's change changes
// where they run; status heartbeats change nothing.
func (c *Controller) updateNode(old, cur any) {
	o, n := old.(*corev1.Node), cur.(*corev1.Node)
	if labels.Equals(o.Labels, n.Labels) && apiequality.Semantic.DeepEqual(o.Spec.Taints, n.Spec.Taints) && o.Spec.Unschedulable == n.Spec.Unschedulable {
		return
	}
	list, _ := c.dsLister.List(labels.Everything())
	for _, ds := range list {
		run0, keep0 := shouldRun(o, ds)
		run1, keep1 := shouldRun(n, ds)
		if run0 != run1 || keep0 != keep1 {
			c.enqueue(ds)
		}
	}
}

func keyOf(ds *appsv1.DaemonSet) string { return ds.Namespace + "/" + ds.Name }
