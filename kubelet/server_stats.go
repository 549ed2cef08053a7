package kubelet

import (
	"encoding/json"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// serveSummary serves /stats/summary: the last sample, as the kubelet's
// Summary API (?only_cpu_and_memory=true drops the rest, as upstream).
func (s *Server) serveSummary(w http.ResponseWriter, r *http.Request) {
	sum := s.cfg.Stats.Summary()
	if sum == nil {
		http.Error(w, "Internal Error: no stats sampled yet", http.StatusServiceUnavailable)
		return
	}
	if r.URL.Query().Get("only_cpu_and_memory") == "true" {
		sum = cpuAndMemoryOnly(sum)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(sum)
}

func cpuAndMemoryOnly(in *statsapi.Summary) *statsapi.Summary {
	out := &statsapi.Summary{Node: statsapi.NodeStats{NodeName: in.Node.NodeName, StartTime: in.Node.StartTime,
		CPU: in.Node.CPU, Memory: in.Node.Memory}, Pods: make([]statsapi.PodStats, 0, len(in.Pods))}
	for _, c := range in.Node.SystemContainers {
		out.Node.SystemContainers = append(out.Node.SystemContainers, statsapi.ContainerStats{Name: c.Name, StartTime: c.StartTime, CPU: c.CPU, Memory: c.Memory})
	}
	for _, p := range in.Pods {
		op := statsapi.PodStats{PodRef: p.PodRef, StartTime: p.StartTime, CPU: p.CPU, Memory: p.Memory, Containers: make([]statsapi.ContainerStats, 0, len(p.Containers))}
		for _, c := range p.Containers {
			op.Containers = append(op.Containers, statsapi.ContainerStats{Name: c.Name, StartTime: c.StartTime, CPU: c.CPU, Memory: c.Memory})
		}
		out.Pods = append(out.Pods, op)
	}
	return out
}

// resourceMetrics is /metrics/resource: the kubelet's resource metrics
// (what metrics-server scrapes) from the last sample, each with the
// sample's time.
type resourceMetrics struct{ stats *StatsSampler }

var (
	containerLabels = []string{"container", "pod", "namespace"}
	podLabels       = []string{"pod", "namespace"}

	descNodeCPU         = prometheus.NewDesc("node_cpu_usage_seconds_total", "Cumulative cpu time consumed by the node in core-seconds", nil, nil)
	descNodeMemory      = prometheus.NewDesc("node_memory_working_set_bytes", "Current working set of the node in bytes", nil, nil)
	descNodeRSS         = prometheus.NewDesc("node_memory_rss_bytes", "Current rss of the node in bytes", nil, nil)
	descContainerCPU    = prometheus.NewDesc("container_cpu_usage_seconds_total", "Cumulative cpu time consumed by the container in core-seconds", containerLabels, nil)
	descContainerMemory = prometheus.NewDesc("container_memory_working_set_bytes", "Current working set of the container in bytes", containerLabels, nil)
	descContainerRSS    = prometheus.NewDesc("container_memory_rss_bytes", "Current rss of the container in bytes", containerLabels, nil)
	descContainerStart  = prometheus.NewDesc("container_start_time_seconds", "Start time of the container since unix epoch in seconds", containerLabels, nil)
	descPodCPU          = prometheus.NewDesc("pod_cpu_usage_seconds_total", "Cumulative cpu time consumed by the pod in core-seconds", podLabels, nil)
	descPodMemory       = prometheus.NewDesc("pod_memory_working_set_bytes", "Current working set of the pod in bytes", podLabels, nil)
	descScrapeError     = prometheus.NewDesc("scrape_error", "1 if there was an error while getting container metrics, 0 otherwise", nil, nil)
)

func (resourceMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descNodeCPU, descNodeMemory, descNodeRSS, descContainerCPU, descContainerMemory, descContainerRSS, descContainerStart, descPodCPU, descPodMemory, descScrapeError} {
		ch <- d
	}
}

func (m resourceMetrics) Collect(ch chan<- prometheus.Metric) {
	sum := m.stats.Summary()
	if sum == nil {
		ch <- prometheus.MustNewConstMetric(descScrapeError, prometheus.GaugeValue, 1)
		return
	}
	ch <- prometheus.MustNewConstMetric(descScrapeError, prometheus.GaugeValue, 0)
	cpu := func(d *prometheus.Desc, c *statsapi.CPUStats, labels ...string) {
		if c != nil && c.UsageCoreNanoSeconds != nil {
			ch <- prometheus.NewMetricWithTimestamp(c.Time.Time, prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(*c.UsageCoreNanoSeconds)/1e9, labels...))
		}
	}
	mem := func(d *prometheus.Desc, mm *statsapi.MemoryStats, rss bool, labels ...string) {
		if mm == nil {
			return
		}
		v := mm.WorkingSetBytes
		if rss {
			v = mm.RSSBytes
		}
		if v != nil {
			ch <- prometheus.NewMetricWithTimestamp(mm.Time.Time, prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(*v), labels...))
		}
	}
	cpu(descNodeCPU, sum.Node.CPU)
	mem(descNodeMemory, sum.Node.Memory, false)
	mem(descNodeRSS, sum.Node.Memory, true)
	for _, p := range sum.Pods {
		cpu(descPodCPU, p.CPU, p.PodRef.Name, p.PodRef.Namespace)
		mem(descPodMemory, p.Memory, false, p.PodRef.Name, p.PodRef.Namespace)
		for _, c := range p.Containers {
			l := []string{c.Name, p.PodRef.Name, p.PodRef.Namespace}
			cpu(descContainerCPU, c.CPU, l...)
			mem(descContainerMemory, c.Memory, false, l...)
			mem(descContainerRSS, c.Memory, true, l...)
			if c.CPU != nil {
				ch <- prometheus.NewMetricWithTimestamp(c.CPU.Time.Time, prometheus.MustNewConstMetric(descContainerStart, prometheus.GaugeValue, float64(c.StartTime.UnixNano())/1e9, l...))
			}
		}
	}
}

// resourceMetricsHandler serves resourceMetrics in Prometheus' text
// format.
func resourceMetricsHandler(stats *StatsSampler) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(resourceMetrics{stats})
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}
