package apiserver

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"bonsai.dev/bonsai/apiserver/params"
	"bonsai.dev/bonsai/store"
)

// Metric and label names follow kube-apiserver's, so that dashboards and
// alerts written for it read bonsai unchanged.
const metricsComponent = "apiserver"

// latencyBuckets start well below kube-apiserver's 5 ms first bucket:
// bonsai answers most requests in under a millisecond, and upstream's
// buckets would put all of them in one.
var latencyBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// Storage operations timed by instrumentedStore, as indexes into
// storeObservers.
const (
	opGet = iota
	opList
	opCreate
	opUpdate
	opDelete
	numStoreOps
)

var storeOpNames = [numStoreOps]string{"get", "list", "create", "update", "delete"}

type storeObservers [numStoreOps]prometheus.Observer

// metrics belong to one Server: each has its own registry, so several
// servers in one process (tests) never collide on registration.
type metrics struct {
	registry    *prometheus.Registry
	gatherers   prometheus.Gatherers // registry and what gatherAlso adds
	handler     http.Handler
	requests    *prometheus.CounterVec
	durations   *prometheus.HistogramVec
	longRunning *prometheus.GaugeVec
	// storeByPrefix maps a resource's key prefix (/registry/<g>/<r>/) to
	// its storage latency observers. It is filled once in New and only
	// read afterwards, so lookups need no lock.
	storeByPrefix map[string]*storeObservers
	storeOther    *storeObservers
}

func newMetrics(reg *resourceIndex, raw store.Store) *metrics {
	requestLabels := []string{"verb", "group", "version", "resource", "subresource", "scope", "component"}
	m := &metrics{
		registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "apiserver_request_total",
			Help: "Counter of apiserver requests broken out for each verb, group, version, resource, subresource, scope, component, and HTTP response code.",
		}, append(requestLabels[:len(requestLabels):len(requestLabels)], "code")),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "apiserver_request_duration_seconds",
			Help:    "Response latency distribution in seconds for each verb, group, version, resource, subresource, scope and component. Watches are not included.",
			Buckets: latencyBuckets,
		}, requestLabels),
		longRunning: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "apiserver_longrunning_requests",
			Help: "Gauge of all active long-running apiserver requests (watches) broken out by verb, group, version, resource, scope and component.",
		}, requestLabels),
		storeByPrefix: map[string]*storeObservers{},
	}
	storeLatency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		// Upstream's name, although the store may be badger: it is the
		// figure every kube-apiserver storage dashboard reads.
		Name:    "etcd_request_duration_seconds",
		Help:    "Storage request latency in seconds for each operation and object type.",
		Buckets: latencyBuckets,
	}, []string{"operation", "type"})
	observers := func(typ string) *storeObservers {
		var o storeObservers
		for op, name := range storeOpNames {
			o[op] = storeLatency.WithLabelValues(name, typ)
		}
		return &o
	}
	counted := map[string]string{}
	for _, res := range reg.byGVR {
		prefix := res.prefix("")
		if _, ok := m.storeByPrefix[prefix]; ok {
			continue // the same resource served at another version
		}
		typ := schema.GroupResource{Group: res.gvr.Group, Resource: res.gvr.Resource}.String()
		m.storeByPrefix[prefix] = observers(typ)
		counted[prefix] = typ
	}
	m.storeOther = observers("other")

	m.registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.requests, m.durations, m.longRunning, storeLatency,
		&objectCounter{st: raw, prefixes: counted, desc: prometheus.NewDesc(
			"apiserver_storage_objects",
			"Number of stored objects at the time of the last check split by kind.",
			[]string{"resource"}, nil)},
	)
	m.gatherers = prometheus.Gatherers{m.registry}
	m.handler = promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
	return m
}

// gatherAlso serves g's metrics (an admission plugin's, kept in its own
// registry) beside the server's own.
func (m *metrics) gatherAlso(g prometheus.Gatherer) {
	m.gatherers = append(m.gatherers, g)
	m.handler = promhttp.HandlerFor(m.gatherers, promhttp.HandlerOpts{})
}

// statusCodes are the code label's values, made once so that labelling a
// response allocates nothing.
var statusCodes = func() (c [600]string) {
	for i := range c {
		c[i] = strconv.Itoa(i)
	}
	return c
}()

func codeLabel(code int) string {
	if code >= 0 && code < len(statusCodes) {
		return statusCodes[code]
	}
	return "other"
}

// requestLabelValues are a request's labels in the order of the metrics'
// label names (less code).
type requestLabelValues [7]string

// labelRequest labels r the way kube-apiserver does. Only served
// resources get resource labels and only known methods a verb of their
// own, so that made-up paths and methods cannot grow the number of series.
func (s *Server) labelRequest(r *http.Request) (l requestLabelValues, watch bool) {
	l[6] = metricsComponent
	watchParam := false
	if strings.Contains(r.URL.RawQuery, "watch") {
		watchParam = params.Bool(r.URL.Query(), "watch")
	}
	ri, ok := parseResourcePath(r.Method, r.URL.Path, watchParam)
	var res *resource
	if ok {
		res = s.reg.byGVR[ri.gvr]
	}
	if res == nil || (ri.subresource != "" && !res.hasSubresource(ri.subresource)) {
		l[0] = methodVerb(r.Method)
		return l, false
	}
	var verb string
	switch ri.verb {
	case "get":
		verb = "GET"
	case "list":
		verb = "LIST"
	case "watch":
		verb = "WATCH"
	case "create":
		verb = "POST"
	case "update":
		verb = "PUT"
	case "patch":
		verb = "PATCH"
		if isApply(r) {
			verb = "APPLY"
		}
	case "delete":
		verb = "DELETE"
	case "deletecollection":
		verb = "DELETECOLLECTION"
	default:
		verb = methodVerb(r.Method)
	}
	var scope string
	switch {
	case ri.name != "" || ri.verb == "create":
		scope = "resource"
	case ri.namespace != "":
		scope = "namespace"
	default:
		scope = "cluster"
	}
	l[0], l[1], l[2], l[3], l[4], l[5] = verb, ri.gvr.Group, ri.gvr.Version, ri.gvr.Resource, ri.subresource, scope
	return l, ri.verb == "watch"
}

func methodVerb(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions:
		return method
	}
	return "other"
}

// withMetrics counts and times every request, the unauthenticated ones
// too: a flood of 401s is something an operator wants to see.
func (s *Server) withMetrics(next http.Handler) http.Handler {
	m := s.metrics
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		l, watch := s.labelRequest(r)
		rec := &statusRecorder{ResponseWriter: w}
		if watch {
			// Upstream leaves watches out of the latency histogram: their
			// duration is the client's choice, not the server's speed.
			g := m.longRunning.WithLabelValues(l[:]...)
			g.Inc()
			defer g.Dec()
		}
		if pooled(l, watch) {
			s.handlers.serve(next, rec, r)
		} else {
			next.ServeHTTP(rec, r)
		}
		code := rec.code
		if code == 0 {
			code = http.StatusOK // net/http's answer to a handler that wrote nothing
		}
		if !watch {
			m.durations.WithLabelValues(l[:]...).Observe(time.Since(start).Seconds())
		}
		m.requests.WithLabelValues(l[0], l[1], l[2], l[3], l[4], l[5], l[6], codeLabel(code)).Inc()
	})
}

// statusRecorder remembers the status code a handler sent. It is a Flusher
// whatever it wraps, because watch streams look for one.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (w *statusRecorder) WriteHeader(code int) {
	if w.code == 0 && code >= 200 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusRecorder) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection's own writer.
func (w *statusRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// RegisterMetrics adds other components' collectors (the node's device
// manager, say) to the server's /metrics.
func (s *Server) RegisterMetrics(cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := s.metrics.registry.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	s.metrics.handler.ServeHTTP(w, r)
}

// instrumentedStore times the API server's reads and writes. Watch,
// CurrentRevision and Compact pass through: a watch's duration is not a
// latency and the other two name no resource.
type instrumentedStore struct {
	store.Store
	m *metrics
}

func (s instrumentedStore) observe(op int, key string, start time.Time) {
	s.m.storeObserversFor(key)[op].Observe(time.Since(start).Seconds())
}

// storeObserversFor finds the key's resource by its prefix without
// building a string, so timing a store call allocates nothing.
func (m *metrics) storeObserversFor(key string) *storeObservers {
	rest, ok := strings.CutPrefix(key, store.RegistryRoot)
	if !ok {
		return m.storeOther
	}
	// rest is <group>/<resource>/...: the prefix ends at the second slash.
	i := strings.IndexByte(rest, '/')
	if i < 0 {
		return m.storeOther
	}
	j := strings.IndexByte(rest[i+1:], '/')
	if j < 0 {
		return m.storeOther
	}
	if o := m.storeByPrefix[key[:len(store.RegistryRoot)+i+1+j+1]]; o != nil {
		return o
	}
	return m.storeOther
}

func (s instrumentedStore) Get(ctx context.Context, key string) (store.KeyValue, error) {
	start := time.Now()
	kv, err := s.Store.Get(ctx, key)
	s.observe(opGet, key, start)
	return kv, err
}

func (s instrumentedStore) GetUnless(ctx context.Context, key string, have func(rev uint64) bool) (store.KeyValue, error) {
	start := time.Now()
	kv, err := store.GetUnless(ctx, s.Store, key, have)
	s.observe(opGet, key, start)
	return kv, err
}

func (s instrumentedStore) List(ctx context.Context, prefix string, opts store.ListOptions) (store.ListResult, error) {
	start := time.Now()
	res, err := s.Store.List(ctx, prefix, opts)
	s.observe(opList, prefix, start)
	return res, err
}

func (s instrumentedStore) Create(ctx context.Context, key string, value []byte) (uint64, error) {
	start := time.Now()
	rev, err := s.Store.Create(ctx, key, value)
	s.observe(opCreate, key, start)
	return rev, err
}

func (s instrumentedStore) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	start := time.Now()
	newRev, err := s.Store.Update(ctx, key, value, rev)
	s.observe(opUpdate, key, start)
	return newRev, err
}

func (s instrumentedStore) Replace(ctx context.Context, key string, value []byte, rev uint64, prev []byte) (uint64, error) {
	start := time.Now()
	newRev, err := store.Replace(ctx, s.Store, key, value, rev, prev)
	s.observe(opUpdate, key, start)
	return newRev, err
}

func (s instrumentedStore) Delete(ctx context.Context, key string, rev uint64) (store.KeyValue, error) {
	start := time.Now()
	kv, err := s.Store.Delete(ctx, key, rev)
	s.observe(opDelete, key, start)
	return kv, err
}

// objectCounter counts each resource's objects when /metrics is scraped,
// not on every write: the hot path stays untouched and the figure is
// right after a restart. A one-item page's RemainingCount costs a key-only
// scan in badger and a count query in etcd.
type objectCounter struct {
	st       store.Store // not the instrumented one: scrapes are not API latency
	prefixes map[string]string
	desc     *prometheus.Desc
}

func (c *objectCounter) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *objectCounter) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for prefix, typ := range c.prefixes {
		res, err := c.st.List(ctx, prefix, store.ListOptions{Limit: 1})
		if err != nil {
			// Leave the series out rather than report a wrong count; the
			// scrape itself still succeeds.
			continue
		}
		n := float64(len(res.Items)) + float64(res.RemainingCount)
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, n, typ)
	}
}

// MetricsRegisterer is where the other parts of the process (the service
// proxy, the device-plugin host) register their metrics, so that the
// server's /metrics serves them too.
func (s *Server) MetricsRegisterer() prometheus.Registerer { return s.metrics.registry }
