package deviceplugin

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// metrics use the kubelet's names where it has one
// (kubelet_device_plugin_registration_total,
// kubelet_device_plugin_alloc_duration_seconds), so existing dashboards
// read them.
type metrics struct {
	registrations *prometheus.CounterVec
	errors        *prometheus.CounterVec
	allocDur      *prometheus.HistogramVec
	admission     prometheus.Histogram
	state         *stateCollector
}

func newMetrics(m *Manager) *metrics {
	return &metrics{
		registrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kubelet_device_plugin_registration_total",
			Help: "Cumulative number of device plugin registrations, by resource.",
		}, []string{"resource_name"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bonsai_device_plugin_errors_total",
			Help: "Device plugin errors, by resource and operation (register, dial, options, listandwatch, preferredallocation, allocate, prestartcontainer).",
		}, []string{"resource_name", "operation"}),
		allocDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kubelet_device_plugin_alloc_duration_seconds",
			Help:    "Duration in seconds to serve a device plugin Allocation request, by resource.",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}, []string{"resource_name"}),
		admission: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "bonsai_device_admission_duration_seconds",
			Help:    "Time a pod's admission spends getting its devices: choosing them, the plugins' GetPreferredAllocation and Allocate, and the checkpoint write. Pods without device plugin resources are not counted.",
			Buckets: []float64{0.00025, 0.0005, 0.001, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.1, 0.25, 1},
		}),
		state: &stateCollector{m: m,
			allocatable: prometheus.NewDesc("bonsai_device_plugin_allocatable_devices", "Healthy devices of each device plugin resource.", []string{"resource_name"}, nil),
			allocated:   prometheus.NewDesc("bonsai_device_plugin_allocated_devices", "Devices of each device plugin resource held by pods.", []string{"resource_name"}, nil),
		},
	}
}

// Collectors are the manager's metrics, for the /metrics registry.
func (m *Manager) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.metrics.registrations, m.metrics.errors, m.metrics.allocDur, m.metrics.admission, m.metrics.state}
}

func (x *metrics) registered(res string) { x.registrations.WithLabelValues(res).Inc() }
func (x *metrics) registrationErr(res string) {
	x.errors.WithLabelValues(res, "register").Inc()
}
func (x *metrics) pluginErr(res, op string) { x.errors.WithLabelValues(res, op).Inc() }
func (x *metrics) allocErr(res string)      { x.errors.WithLabelValues(res, "allocate").Inc() }
func (x *metrics) allocDuration(res string, d time.Duration) {
	x.allocDur.WithLabelValues(res).Observe(d.Seconds())
}

// stateCollector reads allocatable and allocated devices at scrape time.
type stateCollector struct {
	m                      *Manager
	allocatable, allocated *prometheus.Desc
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.allocatable
	ch <- c.allocated
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	inUse := m.inUseLocked()
	for name, r := range m.resources {
		healthy := 0
		for _, d := range r.devices {
			if d.Health == pluginapi.Healthy {
				healthy++
			}
		}
		ch <- prometheus.MustNewConstMetric(c.allocatable, prometheus.GaugeValue, float64(healthy), name)
		ch <- prometheus.MustNewConstMetric(c.allocated, prometheus.GaugeValue, float64(len(inUse[name])), name)
	}
}
