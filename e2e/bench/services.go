package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"bonsai.dev/bonsai/netplugin/proxy"
)

// serviceParams size the services suite; -quick shrinks it.
type serviceParams struct {
	services, endpoints int // selectorless Services and endpoints of each
	updates             int // one-endpoint updates timed
	readyPods           int // pods whose Ready → rule is timed
	dnsFor              time.Duration
	// dualStack runs the cluster with an IPv4 and an IPv6 range each, its
	// Services PreferDualStack with an EndpointSlice of each family.
	dualStack bool
}

func serviceParamsFor(quick bool) serviceParams {
	if quick {
		return serviceParams{services: 200, endpoints: 10, updates: 10, readyPods: 5, dnsFor: 2 * time.Second}
	}
	return serviceParams{services: 1000, endpoints: 10, updates: 50, readyPods: 20, dnsFor: 5 * time.Second}
}

type serviceResults struct {
	fullSync, updateP50, updateP99 *float64
	readyP50, readyP99             *float64
	dnsQPS, dnsP99                 *float64
}

func serviceRows(p serviceParams, r *serviceResults) []Row {
	prefix := "services: "
	if p.dualStack {
		prefix = "services (dual-stack): "
	}
	row := func(name, unit string, v *float64, t *Target) Row {
		return Row{Name: prefix + name, Unit: unit, Bonsai: v, Target: t}
	}
	size := fmt.Sprintf("%s Services × %d endpoints", fmtNum(float64(p.services)), p.endpoints)
	rows := []Row{
		row("proxy full sync of "+size, "ms", r.fullSync, nil),
		row("proxy one-endpoint update p50, "+size, "ms", r.updateP50, nil),
		row("proxy one-endpoint update p99, "+size, "ms", r.updateP99, atMost(5, "ms")),
		row("pod Ready (seen by a watch) → its rule in the kernel p50", "ms", r.readyP50, nil),
		row("pod Ready (seen by a watch) → its rule in the kernel p99", "ms", r.readyP99, atMost(200, "ms")),
		row(fmt.Sprintf("cluster DNS queries/s, %d clients over UDP", dnsClients), "queries/s", r.dnsQPS, atLeast(20000, "queries/s")),
		row("cluster DNS query p99 under that load", "ms", r.dnsP99, atMost(2, "ms")),
	}
	if p.services == 1000 {
		rows[0].Target = atMost(200, "ms")
	}
	return rows
}

// servicesSuite runs a real node (bonsai with its own containerd, so the
// service proxy and the cluster DNS run) and measures the service path:
// the proxy's syncs, as it reports them in kube-proxy's metrics; a pod's
// Ready to its address in the proxy's endpoint map, read back from the
// kernel; and the cluster DNS under load from local clients.
func servicesSuite(ctx context.Context, b *bench) ([]Row, error) {
	return runServicesSuite(ctx, b, serviceParamsFor(b.quick))
}

// servicesDualStackSuite is the services suite on a dual-stack cluster,
// against the same targets: the proxy must do with both families what
// it does with one.
func servicesDualStackSuite(ctx context.Context, b *bench) ([]Row, error) {
	p := serviceParamsFor(b.quick)
	p.dualStack = true
	return runServicesSuite(ctx, b, p)
}

func runServicesSuite(ctx context.Context, b *bench, p serviceParams) ([]Row, error) {
	res := &serviceResults{}
	rows := func() []Row { return serviceRows(p, res) }
	if os.Geteuid() != 0 {
		return rows(), errors.New("the services suite needs root (network namespaces, containerd, nftables)")
	}
	b.logf("services: starting bonsai with its own containerd")
	const serviceCIDR = "10.252.0.0/16"
	name, clusterCIDRs, serviceCIDRs := "services", "10.251.0.0/16", serviceCIDR
	if p.dualStack {
		name, clusterCIDRs, serviceCIDRs = "services-dualstack", clusterCIDRs+","+benchCluster6, serviceCIDRs+",fd00:bec:252::/112"
	}
	n, err := startRealNode(ctx, b, name, clusterCIDRs, "--service-cidr="+serviceCIDRs)
	if err != nil {
		return rows(), err
	}
	defer func() { n.close() }()

	b.logf("services: %d selectorless Services with %d endpoints each (dual-stack: %v)", p.services, p.endpoints, p.dualStack)
	if err := createServices(ctx, n.cs, p); err != nil {
		return rows(), err
	}
	// The proxy's first sync after a start is a full one: start again
	// with the Services in place.
	n.close()
	if err := n.start(ctx, b); err != nil {
		return rows(), err
	}
	// The proxy logs each full sync: waiting for that line rather than
	// polling /metrics keeps the bench's own load off the server while
	// the sync it times runs.
	if err := n.srv.waitLog(ctx, proxy.FullSyncLog, 60*time.Second); err != nil {
		return rows(), err
	}
	full, err := waitMetric(ctx, n.cs, "kubeproxy_sync_full_proxy_rules_duration_seconds", 1, 60*time.Second)
	if err != nil {
		return rows(), fmt.Errorf("%w\n%s", err, n.srv.logTail())
	}
	res.fullSync = ms(time.Duration(full.sum * float64(time.Second)))

	b.logf("services: %d one-endpoint updates", p.updates)
	nft, err := nftables.New()
	if err != nil {
		return rows(), err
	}
	syncs, err := readHistogram(ctx, n.cs, partialSyncMetric)
	if err != nil {
		return rows(), err
	}
	// Two seconds after start bonsai pages its binary out (cmd/bonsai's
	// start-up trim), and the first sync after that faults the sync's
	// code back in from disk. That happens once; the updates time the
	// steady state, after it and one untimed update.
	if err := n.srv.waitLog(ctx, startupTrimmed, 30*time.Second); err != nil {
		return rows(), err
	}
	first, syncs, err := oneEndpointUpdate(ctx, n, nft, p.updates, syncs)
	if err != nil {
		return rows(), fmt.Errorf("%w\n%s", err, n.srv.logTail())
	}
	b.logf("services: the first update after the start-up page-out took %s", first)
	var updates []time.Duration
	for i := range p.updates {
		var d time.Duration
		d, syncs, err = oneEndpointUpdate(ctx, n, nft, i, syncs)
		if err != nil {
			return rows(), fmt.Errorf("%w\n%s", err, n.srv.logTail())
		}
		updates = append(updates, d)
		if d > 5*time.Millisecond { // over the target: say which
			b.logf("services: update %d took %s", i, d)
		}
	}
	res.updateP50, res.updateP99 = ms(percentile(updates, 0.5)), ms(percentile(updates, 0.99))

	b.logf("services: %d pods, Ready → rule", p.readyPods)
	ready, err := readyToRule(ctx, n, p.readyPods, p.dualStack)
	if err != nil {
		return rows(), fmt.Errorf("%w\n%s", err, n.srv.logTail())
	}
	res.readyP50, res.readyP99 = ms(percentile(ready, 0.5)), ms(percentile(ready, 0.99))

	b.logf("services: cluster DNS under load for %v", p.dnsFor)
	// The cluster DNS address is the service CIDR's tenth (10.43.0.10 by
	// default).
	a := netip.MustParsePrefix(serviceCIDR).Addr().As4()
	a[3] += 10
	dnsAddr := netip.AddrPortFrom(netip.AddrFrom4(a), 53)
	qps, p99, err := dnsLoad(ctx, dnsAddr, p)
	if err != nil {
		return rows(), fmt.Errorf("%w\n%s", err, n.srv.logTail())
	}
	res.dnsQPS, res.dnsP99 = num(qps), ms(p99)
	return rows(), nil
}

func benchServiceName(i int) string { return fmt.Sprintf("svc-%d", i) }

// benchEndpoint is endpoint j of Service i: an address in the node's pod
// network that no pod has, which is all the proxy needs.
func benchEndpoint(i, j int) string {
	k := i*16 + j
	return fmt.Sprintf("10.251.%d.%d", 1+k/250, 1+k%250)
}

// movedEndpoint is the address the n-th one-endpoint update moves an
// endpoint to or adds, apart from every benchEndpoint.
func movedEndpoint(n int) string { return fmt.Sprintf("10.251.%d.%d", 200+n/250, 1+n%250) }

// benchCluster6 is the dual-stack runs' IPv6 cluster CIDR: a ULA range
// inside the bench's own node, routed nowhere.
const benchCluster6 = "fd00:bec:251::/56"

// benchEndpoint6 is the IPv6 twin of benchEndpoint.
func benchEndpoint6(i, j int) string {
	k := i*16 + j
	return fmt.Sprintf("fd00:bec:251:1::%x", 1+k)
}

func benchSlice(i, endpoints int) *discoveryv1.EndpointSlice {
	return benchSliceOf(i, endpoints, discoveryv1.AddressTypeIPv4, "-1", benchEndpoint)
}

func benchSliceOf(i, endpoints int, family discoveryv1.AddressType, suffix string, addr func(i, j int) string) *discoveryv1.EndpointSlice {
	ready := true
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: benchServiceName(i) + suffix, Namespace: "default",
			Labels: map[string]string{discoveryv1.LabelServiceName: benchServiceName(i)}},
		AddressType: family,
		Ports:       []discoveryv1.EndpointPort{{Name: ptrTo("http"), Port: ptrTo(int32(8080)), Protocol: ptrTo(corev1.ProtocolTCP)}},
	}
	for j := range endpoints {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{addr(i, j)},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready}})
	}
	return s
}

func ptrTo[T any](v T) *T { return &v }

func createServices(ctx context.Context, cs kubernetes.Interface, p serviceParams) error {
	work := make(chan int)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: benchServiceName(i), Namespace: "default"},
					Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
				if p.dualStack {
					svc.Spec.IPFamilyPolicy = ptrTo(corev1.IPFamilyPolicyPreferDualStack)
				}
				if _, err := cs.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
				if _, err := cs.DiscoveryV1().EndpointSlices("default").Create(ctx, benchSlice(i, p.endpoints), metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
				if p.dualStack {
					s6 := benchSliceOf(i, p.endpoints, discoveryv1.AddressTypeIPv6, "-2", benchEndpoint6)
					if _, err := cs.DiscoveryV1().EndpointSlices("default").Create(ctx, s6, metav1.CreateOptions{}); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	for i := range p.services {
		select {
		case work <- i:
		case err := <-errs:
			close(work)
			wg.Wait()
			return err
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// histogram is one histogram's count and sum from /metrics.
type histogram struct {
	count int
	sum   float64
}

func readHistogram(ctx context.Context, cs kubernetes.Interface, name string) (histogram, error) {
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return histogram{}, err
	}
	var h histogram
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		switch f[0] {
		case name + "_count":
			h.count, err = strconv.Atoi(f[1])
		case name + "_sum":
			h.sum, err = strconv.ParseFloat(f[1], 64)
		}
		if err != nil {
			return histogram{}, fmt.Errorf("/metrics: %s: %w", line, err)
		}
	}
	return h, nil
}

// metricPoll is how often waitMetric reads /metrics. Rendering and
// compressing them costs the server a few ms of CPU each time: read every
// 10 ms, as this once did, they took half of what the server spent in the
// seconds after its restart, while the syncs being measured ran.
const metricPoll = 50 * time.Millisecond

// waitMetric waits until the histogram has at least count samples.
func waitMetric(ctx context.Context, cs kubernetes.Interface, name string, count int, timeout time.Duration) (histogram, error) {
	deadline := time.Now().Add(timeout)
	for {
		h, err := readHistogram(ctx, cs, name)
		if err == nil && h.count >= count {
			return h, nil
		}
		if time.Now().After(deadline) {
			return h, fmt.Errorf("%s: %d samples after %v, want %d (last error: %v)", name, h.count, timeout, count, err)
		}
		if err := sleep(ctx, metricPoll); err != nil {
			return h, err
		}
	}
}

// partialSyncMetric is the proxy's histogram of incremental syncs.
const partialSyncMetric = "kubeproxy_sync_partial_proxy_rules_duration_seconds"

// oneEndpointUpdate changes one endpoint of Service i and returns the
// proxy's partial sync time for it, from the metric's sum, and the
// metric after it; before is the metric before the change. The changes
// take turns: an endpoint moves to another address, one goes, one comes.
//
// It waits for the change in the kernel, read through nft, before it
// reads the metric once: reading /metrics costs the server several ms of
// CPU (rendering and compressing half a MB), and polling it while the
// sync ran, as this once did, took half of the server's CPU and slowed
// the very syncs it timed.
func oneEndpointUpdate(ctx context.Context, n *realNode, nft *nftables.Conn, i int, before histogram) (time.Duration, histogram, error) {
	s, err := n.cs.DiscoveryV1().EndpointSlices("default").Get(ctx, benchServiceName(i)+"-1", metav1.GetOptions{})
	if err != nil {
		return 0, before, err
	}
	switch i % 3 {
	case 0:
		s.Endpoints[0].Addresses = []string{movedEndpoint(i)}
	case 1:
		s.Endpoints = s.Endpoints[:len(s.Endpoints)-1]
	default:
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{movedEndpoint(i)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(true)}})
	}
	var want []netip.AddrPort
	for _, e := range s.Endpoints {
		want = append(want, netip.AddrPortFrom(netip.MustParseAddr(e.Addresses[0]), 8080))
	}
	slices.SortFunc(want, netip.AddrPort.Compare)
	if _, err := n.cs.DiscoveryV1().EndpointSlices("default").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		return 0, before, err
	}
	port := "default/" + benchServiceName(i) + "/tcp/http"
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := proxy.EndpointTargets(nft, n.bridge, port)
		if err == nil {
			slices.SortFunc(got, netip.AddrPort.Compare)
			if slices.Equal(got, want) {
				break
			}
		}
		if time.Now().After(deadline) {
			return 0, before, fmt.Errorf("Service %s: the kernel DNATs to %v (err %v) 30s after the update, want %v", port, got, err, want)
		}
		if err := sleep(ctx, 2*time.Millisecond); err != nil {
			return 0, before, err
		}
	}
	after, err := waitMetric(ctx, n.cs, partialSyncMetric, before.count+1, 30*time.Second)
	if err != nil {
		return 0, before, err
	}
	return time.Duration((after.sum - before.sum) / float64(after.count-before.count) * float64(time.Second)), after, nil
}

// readyToRule creates pods behind a Service one at a time and times each
// from its Ready condition, as a watch sees it, to its address in the
// Service's endpoint map in the kernel.
func readyToRule(ctx context.Context, n *realNode, pods int, dualStack bool) ([]time.Duration, error) {
	labels := map[string]string{"app": "ready"}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "ready", Namespace: "default"},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
	if dualStack {
		svc.Spec.IPFamilyPolicy = ptrTo(corev1.IPFamilyPolicyPreferDualStack)
	}
	if _, err := n.cs.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	nft, err := nftables.New()
	if err != nil {
		return nil, err
	}
	inMap := func(ip string) bool {
		targets, err := proxy.EndpointTargets(nft, n.bridge, "default/ready/tcp/http")
		if err != nil {
			return false
		}
		want := netip.MustParseAddr(ip)
		for _, t := range targets {
			if t.Addr() == want {
				return true
			}
		}
		return false
	}
	var out []time.Duration
	for i := range pods {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ready-%d", i), Namespace: "default", Labels: labels},
			Spec: corev1.PodSpec{NodeName: n.name, TerminationGracePeriodSeconds: ptrTo(int64(0)),
				Containers: []corev1.Container{{Name: "main", Image: "bonsai.test/busybox:1", ImagePullPolicy: corev1.PullNever,
					Command: []string{"sleep", "3600"}}}},
		}
		if _, err := n.cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
		var ip string
		var readyAt time.Time
		deadline := time.Now().Add(60 * time.Second)
		for ip == "" {
			// A tight poll of the pod stands in for a watch: both see
			// the status write within a millisecond or two.
			p, err := n.cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.Status.PodIP != "" {
					ip, readyAt = p.Status.PodIP, time.Now()
				}
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("pod %s not Ready within 60s", pod.Name)
			}
			if ip == "" {
				if err := sleep(ctx, 2*time.Millisecond); err != nil {
					return nil, err
				}
			}
		}
		for !inMap(ip) {
			if time.Since(readyAt) > 30*time.Second {
				return nil, fmt.Errorf("pod %s (%s) Ready but not in the proxy's map after 30s", pod.Name, ip)
			}
			if err := sleep(ctx, time.Millisecond); err != nil {
				return nil, err
			}
		}
		out = append(out, time.Since(readyAt))
	}
	return out, nil
}

// dnsClients is how many clients query at once, each with one query
// outstanding, as many pods resolving through one node's DNS.
const dnsClients = 8

// dnsLoad sends cluster-zone queries (A and SRV of Services, AAAA, and
// names that do not exist) from dnsClients UDP clients for p.dnsFor and
// returns the queries answered per second and their p99 latency.
func dnsLoad(ctx context.Context, server netip.AddrPort, p serviceParams) (float64, time.Duration, error) {
	var queries [][]byte
	for i := range min(p.services, 100) {
		for _, q := range []struct {
			name  string
			qtype uint16
		}{
			{benchServiceName(i) + ".default.svc.cluster.local.", dns.TypeA},
			{"_http._tcp." + benchServiceName(i) + ".default.svc.cluster.local.", dns.TypeSRV},
			{benchServiceName(i) + ".default.svc.cluster.local.", dns.TypeAAAA},
			{fmt.Sprintf("nope-%d.default.svc.cluster.local.", i), dns.TypeA},
		} {
			m := new(dns.Msg)
			m.SetQuestion(q.name, q.qtype)
			raw, err := m.Pack()
			if err != nil {
				return 0, 0, err
			}
			queries = append(queries, raw)
		}
	}
	// The DNS server starts once the node's network is up: wait for an
	// answer first.
	c, err := net.Dial("udp", server.String())
	if err != nil {
		return 0, 0, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.SetDeadline(time.Now().Add(200 * time.Millisecond))
		if _, err := c.Write(queries[0]); err == nil {
			buf := make([]byte, 512)
			if n, err := c.Read(buf); err == nil {
				var m dns.Msg
				if m.Unpack(buf[:n]) == nil && len(m.Answer) == 1 {
					break
				}
			}
		}
		if time.Now().After(deadline) {
			c.Close()
			return 0, 0, fmt.Errorf("cluster DNS at %s does not answer %s", server, benchServiceName(0))
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			c.Close()
			return 0, 0, err
		}
	}
	c.Close()

	var (
		mu   sync.Mutex
		lats []time.Duration
		wg   sync.WaitGroup
		errs = make(chan error, dnsClients)
	)
	end := time.Now().Add(p.dnsFor)
	for k := range dnsClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("udp", server.String())
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			buf := make([]byte, 1232)
			var mine []time.Duration
			for i := k; time.Now().Before(end); i++ {
				q := queries[i%len(queries)]
				t0 := time.Now()
				c.SetDeadline(t0.Add(time.Second))
				if _, err := c.Write(q); err != nil {
					errs <- err
					return
				}
				if _, err := c.Read(buf); err != nil {
					errs <- fmt.Errorf("DNS query: %w", err)
					return
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lats = append(lats, mine...)
			mu.Unlock()
		}()
	}
	start := time.Now()
	wg.Wait()
	took := time.Since(start)
	select {
	case err := <-errs:
		return 0, 0, err
	default:
	}
	return float64(len(lats)) / took.Seconds(), percentile(lats, 0.99), nil
}
