// Package disruption is kube-controller-manager's disruption controller:
// it keeps each PodDisruptionBudget's status current (the pods expected,
// healthy and needed, the disruptions allowed, the DisruptionAllowed
// condition) so that the eviction API (apiserver/eviction.go) can decide
// from the status alone, and it forgets pods the eviction API recorded
// as disrupted once they are deleted or were not deleted in time.
//
// It also resets the DisruptionTarget condition of pods the eviction API
// marked but that were not deleted within two minutes.
//
// It owns PodDisruptionBudget status and that pod condition; it never
// evicts.
// It talks to the API only through client-go; one instance per cluster.
package disruption

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/kit"
	"bonsai.dev/bonsai/controllers/worker"
)

// DeletionTimeout is how long a pod the eviction API recorded in
// disruptedPods may take to be deleted before it counts again, as
// upstream's.
const DeletionTimeout = 2 * time.Minute

const componentName = "controllermanager"

// Config is what the controller needs.
type Config struct {
	Client    *client.Clientset
	Informers *client.Informers
	Logger    *slog.Logger
	// Clock judges disruptedPods' age; the real clock when nil.
	Clock clock.PassiveClock
}

// Controller keeps PodDisruptionBudget status.
type Controller struct {
	cfg      Config
	log      *slog.Logger
	clock    clock.PassiveClock
	pdbs     policylisters.PodDisruptionBudgetLister
	pods     corelisters.PodLister
	synced   []cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string]
	recorder record.EventRecorder
}

// New builds the controller and registers its handlers.
func New(cfg Config) (*Controller, error) {
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.Clock = cmp.Or[clock.PassiveClock](cfg.Clock, clock.RealClock{})
	pdbInf := cfg.Informers.For(&policyv1.PodDisruptionBudget{})
	podInf := cfg.Informers.For(&corev1.Pod{})
	c := &Controller{
		cfg:    cfg,
		log:    cfg.Logger,
		clock:  cfg.Clock,
		pdbs:   policylisters.NewPodDisruptionBudgetLister(pdbInf.GetIndexer()),
		pods:   corelisters.NewPodLister(podInf.GetIndexer()),
		synced: []cache.InformerSynced{pdbInf.HasSynced, podInf.HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "disruption"}),
	}
	onPDB := func(obj any) {
		if k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(k)
		}
	}
	if _, err := pdbInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onPDB, UpdateFunc: func(_, o any) { onPDB(o) }, DeleteFunc: onPDB,
	}); err != nil {
		return nil, err
	}
	if _, err := podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			c.onPod(obj)
			c.watchStale(obj)
		},
		UpdateFunc: func(old, obj any) {
			// A pod whose labels changed may have left a budget.
			c.onPod(old)
			c.onPod(obj)
			c.watchStale(obj)
		},
		DeleteFunc: c.onPod,
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// onPod queues the budgets selecting the pod.
func (c *Controller) onPod(obj any) {
	pod, ok := kit.Unwrap[*corev1.Pod](obj)
	if !ok {
		return
	}
	for _, pdb := range c.budgetsFor(pod) {
		c.queue.Add(pdb.Namespace + "/" + pdb.Name)
	}
}

// budgetsFor are the budgets whose selector matches the pod. In
// policy/v1 an empty selector matches every pod of the namespace and a
// missing one none.
func (c *Controller) budgetsFor(pod *corev1.Pod) []*policyv1.PodDisruptionBudget {
	all, err := c.pdbs.PodDisruptionBudgets(pod.Namespace).List(labels.Everything())
	if err != nil {
		return nil
	}
	var out []*policyv1.PodDisruptionBudget
	for _, pdb := range all {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err == nil && sel.Matches(labels.Set(pod.Labels)) {
			out = append(out, pdb)
		}
	}
	return out
}

// Run works until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	c.recorder = client.NewRecorder(ctx, c.cfg.Client.Core.RESTClient(), componentName)
	worker.Run(ctx, c.queue, 1, worker.ByPrefix(c.sync, worker.Prefixed{Prefix: podPrefix, Sync: c.syncStalePod}), c.log, "key", c.synced...)
	return nil
}
