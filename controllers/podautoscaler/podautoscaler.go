// Package podautoscaler is the horizontal pod autoscaler, as
// kube-controller-manager's horizontalpodautoscaling controller: every
// sync period it reads each HorizontalPodAutoscaler's target through
// the target's scale subresource (any kind that has one), its pods'
// figures from the resource metrics API (metrics.k8s.io), computes
// upstream's replica count (tolerance, missing and starting pods,
// stabilization windows, rate policies, min and max) and writes the
// target's scale and the autoscaler's status, with upstream's
// conditions and events.
//
// It writes only the scale subresource of targets, the status of
// autoscalers and events; it never touches pods. Its memory of past
// recommendations and rescales lives in this process, as upstream's.
package podautoscaler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	autoscalinglisters "k8s.io/client-go/listers/autoscaling/v2"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	hparegistry "bonsai.dev/bonsai/apiserver/registry/autoscaling"
	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/worker"
)

// Upstream's defaults of kube-controller-manager's
// --horizontal-pod-autoscaler-* flags.
const (
	DefaultSyncPeriod              = 15 * time.Second
	DefaultDownscaleStabilization  = 5 * time.Minute
	DefaultTolerance               = 0.1
	DefaultCPUInitializationPeriod = 5 * time.Minute
	DefaultInitialReadinessDelay   = 30 * time.Second
)

const componentName = "horizontal-pod-autoscaler"

// Config is what the controller needs; zero durations take upstream's
// defaults.
type Config struct {
	Client     *client.Clientset
	Informers  *client.Informers
	RESTConfig *rest.Config
	Logger     *slog.Logger
	Clock      clock.WithTicker
	// SyncPeriod is how often each autoscaler is looked at.
	SyncPeriod time.Duration
	// DownscaleStabilization is the scale-down window of autoscalers
	// that do not set one.
	DownscaleStabilization time.Duration
	// Tolerance is how far from the target a metric may be with no
	// change; nil is 0.1.
	Tolerance *float64
	// CPUInitializationPeriod and InitialReadinessDelay decide which
	// young pods' CPU figures count.
	CPUInitializationPeriod, InitialReadinessDelay time.Duration
}

// Controller is the horizontal pod autoscaler.
type Controller struct {
	cfg      Config
	hpas     cache.SharedIndexInformer
	pods     cache.SharedIndexInformer
	lister   autoscalinglisters.HorizontalPodAutoscalerLister
	podsList corelisters.PodLister
	targets  *targets
	history  *history
	// selectors are the autoscalers' selectors, for AmbiguousSelector.
	selectors selectorIndex
	recorder  record.EventRecorder
	queue     workqueue.TypedRateLimitingInterface[string]
}

// New builds the controller and registers its handlers.
func New(cfg Config) (*Controller, error) {
	if cfg.Client == nil || cfg.Informers == nil || cfg.RESTConfig == nil {
		return nil, fmt.Errorf("horizontal pod autoscaler: Client, Informers and RESTConfig are required")
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.Clock = cmp.Or[clock.WithTicker](cfg.Clock, clock.RealClock{})
	cfg.SyncPeriod = cmp.Or(cfg.SyncPeriod, DefaultSyncPeriod)
	cfg.DownscaleStabilization = cmp.Or(cfg.DownscaleStabilization, DefaultDownscaleStabilization)
	cfg.CPUInitializationPeriod = cmp.Or(cfg.CPUInitializationPeriod, DefaultCPUInitializationPeriod)
	cfg.InitialReadinessDelay = cmp.Or(cfg.InitialReadinessDelay, DefaultInitialReadinessDelay)
	if cfg.Tolerance == nil {
		t := DefaultTolerance
		cfg.Tolerance = &t
	}
	t, err := newTargets(cfg.RESTConfig)
	if err != nil {
		return nil, fmt.Errorf("horizontal pod autoscaler: %w", err)
	}
	c := &Controller{
		cfg:     cfg,
		hpas:    cfg.Informers.For(&autoscalingv2.HorizontalPodAutoscaler{}),
		pods:    cfg.Informers.For(&corev1.Pod{}),
		targets: t,
		history: newHistory(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "horizontalpodautoscaler", Clock: cfg.Clock}),
	}
	c.lister = autoscalinglisters.NewHorizontalPodAutoscalerLister(c.hpas.GetIndexer())
	c.podsList = corelisters.NewPodLister(c.pods.GetIndexer())
	// As upstream's: every autoscaler is looked at one sync period after
	// it was added or changed, and then every sync period; a change
	// while it waits does not bring it forward.
	enqueue := func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			c.queue.AddAfter(key, c.cfg.SyncPeriod)
		}
	}
	if err := worker.AddHandlers("horizontal pod autoscaler", worker.Handler{Informer: c.hpas, Handler: cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, cur any) { enqueue(cur) },
		DeleteFunc: func(obj any) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				c.history.forget(key)
				c.selectors.forget(key)
			}
		},
	}}); err != nil {
		return nil, err
	}
	return c, nil
}

// Run waits for the caches and works until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	c.recorder = client.NewRecorder(ctx, c.cfg.Client.Core.RESTClient(), componentName)
	worker.Run(ctx, c.queue, 5, c.sync, c.cfg.Logger, "horizontalpodautoscaler", c.hpas.HasSynced, c.pods.HasSynced)
	return nil
}

// sync reconciles one autoscaler and comes back a sync period later,
// whether it worked or not, as upstream's fixed-interval queue does.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	hpa, err := c.lister.HorizontalPodAutoscalers(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.history.forget(key)
		c.selectors.forget(key)
		return nil
	}
	if err != nil {
		return err
	}
	if err := c.reconcile(ctx, key, hpa.DeepCopy()); err != nil && ctx.Err() == nil {
		c.cfg.Logger.Info("autoscaling failed", "horizontalpodautoscaler", key, "err", err)
	}
	return &worker.Requeue{After: c.cfg.SyncPeriod}
}

// reconcile is upstream's reconcileAutoscaler.
func (c *Controller) reconcile(ctx context.Context, key string, hpa *autoscalingv2.HorizontalPodAutoscaler) error {
	now := c.cfg.Clock.Now()
	original := hpa.Status.DeepCopy()
	ref := hpa.Spec.ScaleTargetRef
	reference := fmt.Sprintf("%s/%s/%s", ref.Kind, hpa.Namespace, ref.Name)

	failedGetScale := func(err, wrapped error) error {
		c.recorder.Event(hpa, corev1.EventTypeWarning, "FailedGetScale", err.Error())
		setCondition(hpa, autoscalingv2.AbleToScale, corev1.ConditionFalse, "FailedGetScale", fmt.Sprintf("the HPA controller was unable to get the target's current scale: %v", err), now)
		c.updateStatus(ctx, original, hpa)
		return wrapped
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return failedGetScale(err, fmt.Errorf("invalid API version in scale target reference: %v", err))
	}
	mappings, err := c.targets.mappings(schema.GroupKind{Group: gv.Group, Kind: ref.Kind})
	if err != nil {
		return failedGetScale(err, fmt.Errorf("unable to determine resource for scale target reference: %v", err))
	}
	scale, gvr, err := c.targets.scale(ctx, hpa.Namespace, ref.Name, mappings)
	if err != nil {
		return failedGetScale(err, fmt.Errorf("failed to query scale subresource for %s: %v", reference, err))
	}
	setCondition(hpa, autoscalingv2.AbleToScale, corev1.ConditionTrue, "SucceededGetScale", "the HPA controller was able to get the target's current scale", now)
	current := scale.Spec.Replicas
	c.history.recordInitial(key, current, now)

	minReplicas := int32(1)
	if hpa.Spec.MinReplicas != nil {
		minReplicas = *hpa.Spec.MinReplicas
	}
	var (
		statuses []autoscalingv2.MetricStatus
		desired  int32
		reason   string
		rescale  = true
		retErr   error
	)
	switch {
	case scale.Spec.Replicas == 0 && minReplicas != 0:
		// Scaled to zero by hand: autoscaling is off until it is not.
		rescale = false
		setCondition(hpa, autoscalingv2.ScalingActive, corev1.ConditionFalse, "ScalingDisabled", "scaling is disabled since the replica count of the target is zero", now)
	case current > hpa.Spec.MaxReplicas:
		reason, desired = "Current number of replicas above Spec.MaxReplicas", hpa.Spec.MaxReplicas
	case current < minReplicas:
		reason, desired = "Current number of replicas below Spec.MinReplicas", minReplicas
	default:
		proposal, metric, sts, err := c.replicasForMetrics(ctx, hpa, scale, now)
		statuses = sts
		if err != nil && proposal == -1 {
			c.setStatus(hpa, current, hpa.Status.DesiredReplicas, statuses, false, now)
			c.updateStatus(ctx, original, hpa)
			c.recorder.Event(hpa, corev1.EventTypeWarning, "FailedComputeMetricsReplicas", err.Error())
			return fmt.Errorf("failed to compute desired number of replicas based on listed metrics for %s: %v", reference, err)
		}
		// Some metrics failed, the others still decide.
		retErr = err
		if proposal > desired {
			desired = proposal
		}
		if desired > current {
			reason = metric + " above target"
		}
		if desired < current {
			reason = "All metrics below target"
		}
		l := limits{min: minReplicas, max: hpa.Spec.MaxReplicas, current: current}
		var able, limited condition
		var isLimited bool
		if b := hpa.Spec.Behavior; b == nil {
			desired, able, limited, isLimited = c.history.normalize(key, desired, l, c.cfg.DownscaleStabilization, now)
		} else {
			up, down := c.rules(b)
			desired, able, limited, isLimited = c.history.normalizeWithBehavior(key, desired, l, up, down, now)
		}
		setCondition(hpa, autoscalingv2.AbleToScale, corev1.ConditionTrue, able.reason, able.message, now)
		status := corev1.ConditionFalse
		if isLimited {
			status = corev1.ConditionTrue
		}
		setCondition(hpa, autoscalingv2.ScalingLimited, status, limited.reason, limited.message, now)
		rescale = desired != current
	}

	if rescale {
		scale.Spec.Replicas = desired
		if err := c.targets.updateScale(ctx, gvr, scale); err != nil {
			c.recorder.Eventf(hpa, corev1.EventTypeWarning, "FailedRescale", "New size: %d; reason: %s; error: %v", desired, reason, err.Error())
			setCondition(hpa, autoscalingv2.AbleToScale, corev1.ConditionFalse, "FailedUpdateScale", fmt.Sprintf("the HPA controller was unable to update the target scale: %v", err), now)
			c.setStatus(hpa, current, hpa.Status.DesiredReplicas, statuses, false, now)
			c.updateStatus(ctx, original, hpa)
			return fmt.Errorf("failed to rescale %s: %v", reference, err)
		}
		setCondition(hpa, autoscalingv2.AbleToScale, corev1.ConditionTrue, "SucceededRescale", fmt.Sprintf("the HPA controller was able to update the target scale to %d", desired), now)
		c.recorder.Eventf(hpa, corev1.EventTypeNormal, "SuccessfulRescale", "New size: %d; reason: %s", desired, reason)
		c.history.recordScale(key, hpa.Spec.Behavior, current, desired, now)
		c.cfg.Logger.Info("rescaled", "horizontalpodautoscaler", key, "target", reference, "from", current, "to", desired, "reason", reason)
	} else {
		desired = current
	}
	c.setStatus(hpa, current, desired, statuses, rescale, now)
	c.updateStatus(ctx, original, hpa)
	return retErr
}

// rules are the autoscaler's behavior rules with what the API leaves
// unset filled in: upstream's defaults, and the scale-down window of
// --horizontal-pod-autoscaler-downscale-stabilization.
func (c *Controller) rules(b *autoscalingv2.HorizontalPodAutoscalerBehavior) (up, down *autoscalingv2.HPAScalingRules) {
	up, down = b.ScaleUp, b.ScaleDown
	if up == nil {
		up = hparegistry.ScaleUpRules()
	}
	if down == nil {
		down = hparegistry.ScaleDownRules()
	}
	if up.SelectPolicy == nil || up.StabilizationWindowSeconds == nil {
		def := hparegistry.ScaleUpRules()
		up = up.DeepCopy()
		up.SelectPolicy = cmp.Or(up.SelectPolicy, def.SelectPolicy)
		up.StabilizationWindowSeconds = cmp.Or(up.StabilizationWindowSeconds, def.StabilizationWindowSeconds)
	}
	if down.SelectPolicy == nil || down.StabilizationWindowSeconds == nil {
		down = down.DeepCopy()
		down.SelectPolicy = cmp.Or(down.SelectPolicy, hparegistry.ScaleDownRules().SelectPolicy)
		if down.StabilizationWindowSeconds == nil {
			w := int32(c.cfg.DownscaleStabilization / time.Second)
			down.StabilizationWindowSeconds = &w
		}
	}
	return up, down
}

// tolerancesOf are the controller's tolerance, or a behavior's own.
func (c *Controller) tolerancesOf(hpa *autoscalingv2.HorizontalPodAutoscaler) tolerances {
	t := tolerances{*c.cfg.Tolerance, *c.cfg.Tolerance}
	if b := hpa.Spec.Behavior; b != nil {
		if b.ScaleDown != nil && b.ScaleDown.Tolerance != nil {
			t.scaleDown = b.ScaleDown.Tolerance.AsApproximateFloat64()
		}
		if b.ScaleUp != nil && b.ScaleUp.Tolerance != nil {
			t.scaleUp = b.ScaleUp.Tolerance.AsApproximateFloat64()
		}
	}
	return t
}

// replicasForMetrics is the highest count any metric asks for, the
// metric's name, and every metric's status. -1 and an error when no
// metric could be read, or some could not and the others would scale
// down; a count and an error when some failed but the others scale up.
func (c *Controller) replicasForMetrics(ctx context.Context, hpa *autoscalingv2.HorizontalPodAutoscaler, scale *autoscalingv1.Scale, now time.Time) (int32, string, []autoscalingv2.MetricStatus, error) {
	selector, err := c.selector(hpa, scale.Status.Selector, now)
	if err != nil {
		return -1, "", nil, err
	}
	pods, err := c.podsList.Pods(hpa.Namespace).List(selector)
	if err != nil {
		return -1, "", nil, err
	}
	specs := hpa.Spec.Metrics
	statuses := make([]autoscalingv2.MetricStatus, len(specs))
	rc := replicaCalc{tolerances: c.tolerancesOf(hpa), readiness: readiness{c.cfg.CPUInitializationPeriod, c.cfg.InitialReadinessDelay}, now: now}
	var (
		replicas     int32
		metric       string
		invalid      int
		firstErr     error
		firstInvalid condition
	)
	for i, spec := range specs {
		proposal, name, cond, err := c.replicasForMetric(ctx, rc, hpa, spec, scale.Spec.Replicas, scale.Status.Replicas, selector, pods, &statuses[i])
		if err != nil {
			if invalid == 0 {
				firstErr, firstInvalid = err, cond
			}
			invalid++
			continue
		}
		if replicas == 0 || proposal > replicas {
			replicas, metric = proposal, name
		}
	}
	if invalid >= len(specs) || (invalid > 0 && replicas < scale.Spec.Replicas) {
		setCondition(hpa, autoscalingv2.ScalingActive, corev1.ConditionFalse, firstInvalid.reason, firstInvalid.message, now)
		return -1, "", statuses, fmt.Errorf("invalid metrics (%v invalid out of %v), first error is: %v", invalid, len(specs), firstErr)
	}
	setCondition(hpa, autoscalingv2.ScalingActive, corev1.ConditionTrue, "ValidMetricFound", fmt.Sprintf("the HPA was able to successfully calculate a replica count from %s", metric), now)
	return replicas, metric, statuses, firstErr
}

// selector parses the scale's selector, with upstream's event and
// condition when there is none or it is bad.
func (c *Controller) selector(hpa *autoscalingv2.HorizontalPodAutoscaler, s string, now time.Time) (labels.Selector, error) {
	if s == "" {
		msg := "selector is required"
		c.recorder.Event(hpa, corev1.EventTypeWarning, "SelectorRequired", msg)
		setCondition(hpa, autoscalingv2.ScalingActive, corev1.ConditionFalse, "InvalidSelector", "the HPA target's scale is missing a selector", now)
		return nil, errors.New(msg)
	}
	sel, err := labels.Parse(s)
	if err != nil {
		msg := fmt.Sprintf("couldn't convert selector into a corresponding internal selector object: %v", err)
		c.recorder.Event(hpa, corev1.EventTypeWarning, "InvalidSelector", msg)
		setCondition(hpa, autoscalingv2.ScalingActive, corev1.ConditionFalse, "InvalidSelector", msg, now)
		return nil, errors.New(msg)
	}
	key := hpa.Namespace + "/" + hpa.Name
	if others := c.selectors.put(key, hpa.Namespace, sel, c.podsOf(hpa.Namespace, sel)); len(others) > 1 {
		msg := fmt.Sprintf("pods by selector %v are controlled by multiple HPAs: %v", sel, others)
		c.recorder.Event(hpa, corev1.EventTypeWarning, "AmbiguousSelector", msg)
		setCondition(hpa, autoscalingv2.ScalingActive, corev1.ConditionFalse, "AmbiguousSelector", msg, now)
		return nil, errors.New(msg)
	}
	return sel, nil
}

func (c *Controller) podsOf(ns string, sel labels.Selector) []*corev1.Pod {
	pods, _ := c.podsList.Pods(ns).List(sel)
	return pods
}

// selectorIndex remembers each autoscaler's last selector, to find pods
// that two autoscalers would scale, which upstream refuses to do.
type selectorIndex struct {
	mu  sync.Mutex
	sel map[string]nsSelector
}

type nsSelector struct {
	ns  string
	sel labels.Selector
}

// put records key's selector and returns the autoscalers (key among
// them) whose selectors take any of pods, sorted.
func (x *selectorIndex) put(key, ns string, sel labels.Selector, pods []*corev1.Pod) []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.sel == nil {
		x.sel = map[string]nsSelector{}
	}
	x.sel[key] = nsSelector{ns, sel}
	var out []string
	for k, s := range x.sel {
		if s.ns != ns {
			continue
		}
		for _, p := range pods {
			if s.sel.Matches(labels.Set(p.Labels)) {
				out = append(out, k)
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

func (x *selectorIndex) forget(key string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.sel, key)
}

// unable is upstream's condition (and Warning event) for a metric that
// gave no count.
func (c *Controller) unable(hpa *autoscalingv2.HorizontalPodAutoscaler, reason string, err error) condition {
	c.recorder.Event(hpa, corev1.EventTypeWarning, reason, err.Error())
	return condition{reason, fmt.Sprintf("the HPA was unable to compute the replica count: %v", err)}
}

// replicasForMetric is one metric's count, name and status.
func (c *Controller) replicasForMetric(ctx context.Context, rc replicaCalc, hpa *autoscalingv2.HorizontalPodAutoscaler, spec autoscalingv2.MetricSpec, current, statusReplicas int32, sel labels.Selector, pods []*corev1.Pod, status *autoscalingv2.MetricStatus) (int32, string, condition, error) {
	switch spec.Type {
	case autoscalingv2.ResourceMetricSourceType:
		if spec.Resource == nil {
			break
		}
		n, name, cur, err := c.resourceReplicas(ctx, rc, hpa, spec.Resource.Name, "", spec.Resource.Target, current, sel, pods)
		if err != nil {
			return 0, "", c.unable(hpa, "FailedGetResourceMetric", err), err
		}
		*status = autoscalingv2.MetricStatus{Type: spec.Type, Resource: &autoscalingv2.ResourceMetricStatus{Name: spec.Resource.Name, Current: *cur}}
		return n, name, condition{}, nil
	case autoscalingv2.ContainerResourceMetricSourceType:
		if spec.ContainerResource == nil {
			break
		}
		s := spec.ContainerResource
		n, name, cur, err := c.resourceReplicas(ctx, rc, hpa, s.Name, s.Container, s.Target, current, sel, pods)
		if err != nil {
			return 0, "", c.unable(hpa, "FailedGetContainerResourceMetric", err), err
		}
		*status = autoscalingv2.MetricStatus{Type: spec.Type, ContainerResource: &autoscalingv2.ContainerResourceMetricStatus{Name: s.Name, Container: s.Container, Current: *cur}}
		return n, name, condition{}, nil
	case autoscalingv2.PodsMetricSourceType, autoscalingv2.ObjectMetricSourceType, autoscalingv2.ExternalMetricSourceType:
		if (spec.Type == autoscalingv2.PodsMetricSourceType && spec.Pods == nil) ||
			(spec.Type == autoscalingv2.ObjectMetricSourceType && spec.Object == nil) ||
			(spec.Type == autoscalingv2.ExternalMetricSourceType && spec.External == nil) {
			break
		}
		return c.customReplicas(ctx, rc, hpa, spec, current, statusReplicas, sel, pods, status)
	}
	// Validation lets no other type in.
	err := fmt.Errorf("unknown metric source type %q", string(spec.Type))
	return 0, "", c.unable(hpa, "InvalidMetricSourceType", err), err
}

// resourceReplicas is the count for a resource metric of the pods (or
// one of their containers): utilization of their requests, or mean
// usage.
func (c *Controller) resourceReplicas(ctx context.Context, rc replicaCalc, hpa *autoscalingv2.HorizontalPodAutoscaler, res corev1.ResourceName, container string, target autoscalingv2.MetricTarget, current int32, sel labels.Selector, pods []*corev1.Pod) (int32, string, *autoscalingv2.MetricValueStatus, error) {
	kind := "resource"
	if container != "" {
		kind = "container resource"
	}
	if target.AverageUtilization == nil {
		if target.AverageValue == nil {
			return 0, "", nil, fmt.Errorf("invalid %s metric source: neither an average utilization target nor an average value (usage) target was set", kind)
		}
		metrics, err := c.targets.podMetrics(ctx, hpa.Namespace, sel, res, container)
		if err != nil {
			return 0, "", nil, fmt.Errorf("failed to get %s usage: unable to get metrics for resource %s: %v", res, res, err)
		}
		n, usage, err := rc.averageReplicas(current, target.AverageValue.MilliValue(), res, pods, metrics)
		if err != nil {
			return 0, "", nil, fmt.Errorf("failed to get %s usage: %v", res, err)
		}
		return n, fmt.Sprintf("%s %s", res, kind), &autoscalingv2.MetricValueStatus{AverageValue: resource.NewMilliQuantity(usage, resource.DecimalSI)}, nil
	}
	metrics, err := c.targets.podMetrics(ctx, hpa.Namespace, sel, res, container)
	if err != nil {
		return 0, "", nil, fmt.Errorf("failed to get %s utilization: unable to get metrics for resource %s: %v", res, res, err)
	}
	n, util, raw, err := rc.utilizationReplicas(current, *target.AverageUtilization, res, container, pods, metrics)
	if err != nil {
		return 0, "", nil, fmt.Errorf("failed to get %s utilization: %v", res, err)
	}
	return n, fmt.Sprintf("%s %s utilization (percentage of request)", res, kind),
		&autoscalingv2.MetricValueStatus{AverageUtilization: &util, AverageValue: resource.NewMilliQuantity(raw, resource.DecimalSI)}, nil
}

// setStatus is upstream's setStatus: counts, metrics, and the time of a
// rescale.
func (c *Controller) setStatus(hpa *autoscalingv2.HorizontalPodAutoscaler, current, desired int32, metrics []autoscalingv2.MetricStatus, rescaled bool, now time.Time) {
	hpa.Status.CurrentReplicas = current
	hpa.Status.DesiredReplicas = desired
	hpa.Status.CurrentMetrics = metrics
	gen := hpa.Generation
	hpa.Status.ObservedGeneration = &gen
	if rescaled {
		t := metav1.NewTime(now)
		hpa.Status.LastScaleTime = &t
	}
}

// updateStatus writes the status if it changed; a failure is an event,
// as upstream's.
func (c *Controller) updateStatus(ctx context.Context, old *autoscalingv2.HorizontalPodAutoscalerStatus, hpa *autoscalingv2.HorizontalPodAutoscaler) {
	if apiequality.Semantic.DeepEqual(old, &hpa.Status) {
		return
	}
	if _, err := c.cfg.Client.Autoscaling.HorizontalPodAutoscalers(hpa.Namespace).UpdateStatus(ctx, hpa, metav1.UpdateOptions{}); err != nil {
		c.recorder.Event(hpa, corev1.EventTypeWarning, "FailedUpdateStatus", err.Error())
		c.cfg.Logger.Info("failed to update status", "horizontalpodautoscaler", hpa.Namespace+"/"+hpa.Name, "err", err)
	}
}

// setCondition sets a condition, moving its transition time only when
// its status changes.
func setCondition(hpa *autoscalingv2.HorizontalPodAutoscaler, t autoscalingv2.HorizontalPodAutoscalerConditionType, status corev1.ConditionStatus, reason, message string, now time.Time) {
	for i := range hpa.Status.Conditions {
		c := &hpa.Status.Conditions[i]
		if c.Type != t {
			continue
		}
		if c.Status != status {
			c.LastTransitionTime = metav1.NewTime(now)
		}
		c.Status, c.Reason, c.Message = status, reason, message
		return
	}
	hpa.Status.Conditions = append(hpa.Status.Conditions, autoscalingv2.HorizontalPodAutoscalerCondition{
		Type: t, Status: status, Reason: reason, Message: message, LastTransitionTime: metav1.NewTime(now),
	})
}
