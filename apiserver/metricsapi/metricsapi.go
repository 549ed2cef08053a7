// Package metricsapi is metrics-server in bonsai: the resource metrics
// API, metrics.k8s.io/v1beta1 NodeMetrics and PodMetrics, served by the
// API server itself (a local APIService) for kubectl top and the
// HorizontalPodAutoscaler. Every Resolution it scrapes each node's
// kubelet figures (the Summary API, through a Source), keeps the last
// two points of each node and container, and answers with CPU as the
// rate between them over their window and memory as the working set, as
// metrics-server does. Nodes handed to the simulator get figures derived
// from their pods' requests instead, marked with AnnotationSimulated.
//
// It owns the metrics and nothing else: it reads nodes and pods through
// Objects and never writes to the store.
package metricsapi

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"

	"bonsai.dev/bonsai/apiserver/registry"
)

func init() {
	// The API server's codecs read the global scheme.
	if err := metricsv1beta1.AddToScheme(scheme.Scheme); err != nil {
		panic(err)
	}
}

// DefaultResolution is metrics-server's --metric-resolution.
const DefaultResolution = 15 * time.Second

const (
	// AnnotationSimulated "true" marks NodeMetrics and PodMetrics whose
	// figures are derived from requests, not measured.
	AnnotationSimulated = "metrics.bonsai.dev/simulated"
	// nodeSimulated is the Node annotation that hands a node to the
	// simulator (kubelet/simulator.AnnotationSimulated).
	nodeSimulated = "bonsai.dev/simulated"
	// simulatedCPUShare is the share of its CPU request a simulated
	// container is said to use; its memory is its request. Without a
	// request it uses simulatedCPU and simulatedMemory.
	simulatedCPUShare = 0.5
	simulatedCPU      = 1_000_000 // nanocores: 1m
	simulatedMemory   = 4 << 20
)

// Source gives a node's figures, as the kubelet's Summary API has them.
type Source interface {
	Summary(ctx context.Context, node string) (*statsapi.Summary, error)
}

// Objects is what the metrics API reads of the cluster.
type Objects interface {
	Nodes(ctx context.Context) ([]*corev1.Node, error)
	// Pods is the pods in namespace ("": all).
	Pods(ctx context.Context, namespace string) ([]*corev1.Pod, error)
}

// Config configures a Provider.
type Config struct {
	// Source gives the nodes' figures; nil: only simulated nodes have any.
	Source  Source
	Objects Objects
	// Resolution is how often nodes are scraped (DefaultResolution if 0).
	Resolution time.Duration
	Logger     *slog.Logger
}

// Provider scrapes and serves the metrics.
type Provider struct {
	cfg Config
	now func() time.Time

	mu    sync.Mutex
	nodes map[string]*series
	pods  map[types.NamespacedName]*podSeries
}

// point is one cumulative CPU figure and one working set, at a time.
type point struct {
	cpuNs, memory uint64
	at            time.Time
}

// series is the last two points of a node or container.
type series struct{ prev, last point }

type podSeries struct {
	uid        types.UID
	containers map[string]*series
}

// add records p: the last point becomes the previous one, unless p is
// the same sample again or the counter went back (a restarted
// container), when there is no rate until the next point.
func (s *series) add(p point) {
	switch {
	case !p.at.After(s.last.at):
		return
	case p.cpuNs < s.last.cpuNs:
		s.prev = point{}
	default:
		s.prev = s.last
	}
	s.last = p
}

// usage is the CPU rate and the memory of the last window; ok is false
// until there are two points.
func (s *series) usage() (cpuNanoCores, memory uint64, ok bool) {
	if s == nil || s.prev.at.IsZero() {
		return 0, 0, false
	}
	window := s.last.at.Sub(s.prev.at)
	return uint64(float64(s.last.cpuNs-s.prev.cpuNs) / window.Seconds()), s.last.memory, true
}

// New makes a Provider; Run scrapes.
func New(cfg Config) *Provider {
	if cfg.Resolution <= 0 {
		cfg.Resolution = DefaultResolution
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Provider{cfg: cfg, now: time.Now, nodes: map[string]*series{}, pods: map[types.NamespacedName]*podSeries{}}
}

// Run scrapes at once, then every Resolution until ctx ends.
func (p *Provider) Run(ctx context.Context) {
	t := time.NewTicker(p.cfg.Resolution)
	defer t.Stop()
	for {
		p.Scrape(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Scrape reads every node's figures once. A node whose figures cannot
// be read loses what it had, as in metrics-server, until it answers
// again.
func (p *Provider) Scrape(ctx context.Context) {
	nodes, err := p.cfg.Objects.Nodes(ctx)
	if err != nil {
		p.cfg.Logger.Debug("metrics: list nodes", "err", err)
		return
	}
	// All at once, as metrics-server: one slow kubelet does not hold
	// the others' figures back.
	sums := map[string]*statsapi.Summary{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, n := range nodes {
		if simulated(n) || p.cfg.Source == nil {
			continue
		}
		wg.Go(func() {
			sum, err := p.cfg.Source.Summary(ctx, n.Name)
			if err != nil || sum == nil {
				p.cfg.Logger.Debug("metrics: scrape node", "node", n.Name, "err", err)
				return
			}
			mu.Lock()
			sums[n.Name] = sum
			mu.Unlock()
		})
	}
	wg.Wait()
	p.store(sums)
}

// store keeps the scraped summaries: the nodes, pods and containers in
// them, dropping those that are not.
func (p *Provider) store(sums map[string]*statsapi.Summary) {
	p.mu.Lock()
	defer p.mu.Unlock()
	nodes := map[string]*series{}
	pods := map[types.NamespacedName]*podSeries{}
	for name, sum := range sums {
		if pt, ok := pointOf(sum.Node.CPU, sum.Node.Memory); ok {
			s := p.nodes[name]
			if s == nil {
				s = &series{}
			}
			s.add(pt)
			nodes[name] = s
		}
		for _, ps := range sum.Pods {
			key := types.NamespacedName{Namespace: ps.PodRef.Namespace, Name: ps.PodRef.Name}
			old := p.pods[key]
			if old != nil && old.uid != types.UID(ps.PodRef.UID) {
				old = nil // another pod of the same name
			}
			next := &podSeries{uid: types.UID(ps.PodRef.UID), containers: map[string]*series{}}
			for _, c := range ps.Containers {
				pt, ok := pointOf(c.CPU, c.Memory)
				if !ok {
					continue
				}
				var s *series
				if old != nil {
					s = old.containers[c.Name]
				}
				if s == nil {
					s = &series{}
				}
				s.add(pt)
				next.containers[c.Name] = s
			}
			pods[key] = next
		}
	}
	p.nodes, p.pods = nodes, pods
}

// pointOf is a node's or container's cumulative CPU and working set.
func pointOf(cpu *statsapi.CPUStats, mem *statsapi.MemoryStats) (point, bool) {
	if cpu == nil || cpu.UsageCoreNanoSeconds == nil || mem == nil || mem.WorkingSetBytes == nil {
		return point{}, false
	}
	return point{cpuNs: *cpu.UsageCoreNanoSeconds, memory: *mem.WorkingSetBytes, at: cpu.Time.Time}, true
}

func simulated(n *corev1.Node) bool { return n.Annotations[nodeSimulated] == "true" }

func usageList(cpuNanoCores, memory uint64) corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewScaledQuantity(int64(cpuNanoCores), -9),
		corev1.ResourceMemory: *resource.NewQuantity(int64(memory), resource.BinarySI),
	}
}

// NodeMetrics is every node's metrics that has them.
func (p *Provider) NodeMetrics(ctx context.Context) ([]*metricsv1beta1.NodeMetrics, error) {
	nodes, err := p.cfg.Objects.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	var pods []*corev1.Pod
	now := p.now()
	out := make([]*metricsv1beta1.NodeMetrics, 0, len(nodes))
	for _, n := range nodes {
		m := &metricsv1beta1.NodeMetrics{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels, CreationTimestamp: metav1.NewTime(now)}}
		if simulated(n) {
			if pods == nil {
				if pods, err = p.cfg.Objects.Pods(ctx, ""); err != nil {
					return nil, err
				}
			}
			var cpu, mem uint64
			for _, pod := range pods {
				if pod.Spec.NodeName == n.Name && pod.Status.Phase == corev1.PodRunning {
					for _, c := range pod.Spec.Containers {
						cc, cm := simulatedUsage(c)
						cpu, mem = cpu+cc, mem+cm
					}
				}
			}
			p.simulatedWindow(&m.ObjectMeta, &m.Timestamp, &m.Window, now)
			m.Usage = usageList(cpu, mem)
			out = append(out, m)
			continue
		}
		p.mu.Lock()
		s := p.nodes[n.Name]
		cpu, mem, ok := s.usage()
		if ok {
			m.Timestamp, m.Window = metav1.NewTime(s.last.at), metav1.Duration{Duration: s.last.at.Sub(s.prev.at)}
		}
		p.mu.Unlock()
		if ok {
			m.Usage = usageList(cpu, mem)
			out = append(out, m)
		}
	}
	return out, nil
}

// PodMetrics is the metrics of every pod in namespace ("": all) that has
// them: each of its running containers has two points.
func (p *Provider) PodMetrics(ctx context.Context, namespace string) ([]*metricsv1beta1.PodMetrics, error) {
	pods, err := p.cfg.Objects.Pods(ctx, namespace)
	if err != nil {
		return nil, err
	}
	sim := map[string]bool{}
	if nodes, err := p.cfg.Objects.Nodes(ctx); err != nil {
		return nil, err
	} else {
		for _, n := range nodes {
			sim[n.Name] = simulated(n)
		}
	}
	now := p.now()
	out := make([]*metricsv1beta1.PodMetrics, 0, len(pods))
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pod := range pods {
		m := &metricsv1beta1.PodMetrics{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, Labels: pod.Labels, CreationTimestamp: metav1.NewTime(now)}}
		if pod.Spec.NodeName == "" {
			continue
		}
		if sim[pod.Spec.NodeName] {
			if pod.Status.Phase != corev1.PodRunning {
				continue
			}
			for _, c := range pod.Spec.Containers {
				cpu, mem := simulatedUsage(c)
				m.Containers = append(m.Containers, metricsv1beta1.ContainerMetrics{Name: c.Name, Usage: usageList(cpu, mem)})
			}
			p.simulatedWindow(&m.ObjectMeta, &m.Timestamp, &m.Window, now)
			out = append(out, m)
			continue
		}
		ps := p.pods[types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}]
		if ps == nil || ps.uid != pod.UID || len(ps.containers) == 0 {
			continue
		}
		complete := true
		for _, c := range pod.Spec.Containers {
			s, found := ps.containers[c.Name]
			if !found {
				continue // not running
			}
			cpu, mem, ok := s.usage()
			if !ok {
				complete = false
				break
			}
			if m.Timestamp.IsZero() || s.last.at.Before(m.Timestamp.Time) {
				m.Timestamp, m.Window = metav1.NewTime(s.last.at), metav1.Duration{Duration: s.last.at.Sub(s.prev.at)}
			}
			m.Containers = append(m.Containers, metricsv1beta1.ContainerMetrics{Name: c.Name, Usage: usageList(cpu, mem)})
		}
		if complete && len(m.Containers) > 0 {
			out = append(out, m)
		}
	}
	return out, nil
}

// simulatedUsage is what a simulated container is said to use.
func simulatedUsage(c corev1.Container) (cpuNanoCores, memory uint64) {
	cpuNanoCores, memory = simulatedCPU, simulatedMemory
	if q, ok := c.Resources.Requests[corev1.ResourceCPU]; ok && !q.IsZero() {
		cpuNanoCores = uint64(float64(q.ScaledValue(resource.Nano)) * simulatedCPUShare)
	}
	if q, ok := c.Resources.Requests[corev1.ResourceMemory]; ok && !q.IsZero() {
		memory = uint64(q.Value())
	}
	return cpuNanoCores, memory
}

// simulatedWindow marks simulated figures and gives them the last
// Resolution as their window.
func (p *Provider) simulatedWindow(om *metav1.ObjectMeta, ts *metav1.Time, window *metav1.Duration, now time.Time) {
	om.Annotations = map[string]string{AnnotationSimulated: "true"}
	end := now.Truncate(p.cfg.Resolution)
	*ts, *window = metav1.NewTime(end), metav1.Duration{Duration: p.cfg.Resolution}
}

// Kinds are the metrics API's rows of the API server's table.
func (p *Provider) Kinds() []registry.Kind {
	return []registry.Kind{
		{GVR: nodesGVR, Kind: "NodeMetrics", Reader: nodeReader{p}},
		{GVR: podsGVR, Kind: "PodMetrics", Namespaced: true, Reader: podReader{p}},
	}
}

var (
	nodesGVR = registry.GVR(metricsv1beta1.SchemeGroupVersion.Group, "v1beta1", "nodes")
	podsGVR  = registry.GVR(metricsv1beta1.SchemeGroupVersion.Group, "v1beta1", "pods")
)

type nodeReader struct{ p *Provider }

func (r nodeReader) List(ctx context.Context, _ string) ([]runtime.Object, error) {
	return objects(r.p.NodeMetrics(ctx))
}

func objects[T runtime.Object](ms []T, err error) ([]runtime.Object, error) {
	out := make([]runtime.Object, len(ms))
	for i, m := range ms {
		out[i] = m
	}
	return out, err
}

func (r nodeReader) Get(ctx context.Context, _, name string) (runtime.Object, error) {
	ms, err := r.p.NodeMetrics(ctx)
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		if m.Name == name {
			return m, nil
		}
	}
	return nil, apierrors.NewNotFound(metricsv1beta1.Resource("nodemetrics"), name)
}

type podReader struct{ p *Provider }

func (r podReader) List(ctx context.Context, namespace string) ([]runtime.Object, error) {
	return objects(r.p.PodMetrics(ctx, namespace))
}

func (r podReader) Get(ctx context.Context, namespace, name string) (runtime.Object, error) {
	ms, err := r.p.PodMetrics(ctx, namespace)
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		if m.Name == name {
			return m, nil
		}
	}
	// metrics-server names the pod with its namespace.
	return nil, apierrors.NewNotFound(metricsv1beta1.Resource("podmetrics"), fmt.Sprintf("%s/%s", namespace, name))
}
