package proxy

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// proxyMetrics are kube-proxy's own sync metrics, under kube-proxy's
// names, so that its dashboards read bonsai unchanged. The buckets start
// at half a millisecond: an incremental sync takes a few.
type proxyMetrics struct {
	full, partial, programming prometheus.Histogram
	lastSync                   prometheus.Gauge
}

var syncBuckets = prometheus.ExponentialBucketsRange(0.0005, 60, 30)

func newProxyMetrics() *proxyMetrics {
	return &proxyMetrics{
		full: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "kubeproxy_sync_full_proxy_rules_duration_seconds", Buckets: syncBuckets,
			Help: "SyncProxyRules latency in seconds for full resyncs",
		}),
		partial: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "kubeproxy_sync_partial_proxy_rules_duration_seconds", Buckets: syncBuckets,
			Help: "SyncProxyRules latency in seconds for partial resyncs",
		}),
		programming: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "kubeproxy_network_programming_duration_seconds", Buckets: syncBuckets,
			Help: "In Network Programming Latency in seconds: from the last change of an EndpointSlice's pods (its endpoints.kubernetes.io/last-change-trigger-time) to its rules in the kernel",
		}),
		lastSync: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
			Help: "The last time proxy rules were successfully synced",
		}),
	}
}

func (m *proxyMetrics) register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.full, m.partial, m.programming, m.lastSync} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// synced records a successful sync that took d and programmed the
// changes triggered at triggers.
func (m *proxyMetrics) synced(full bool, d time.Duration, triggers []time.Time) {
	if full {
		m.full.Observe(d.Seconds())
	} else {
		m.partial.Observe(d.Seconds())
	}
	now := time.Now()
	m.lastSync.Set(float64(now.UnixNano()) / 1e9)
	for _, t := range triggers {
		m.programming.Observe(now.Sub(t).Seconds())
	}
}
