package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"bonsai.dev/bonsai/netplugin"
	"bonsai.dev/bonsai/netplugin/netpol"
)

// netpolParams size the netpol suite; -quick shrinks it.
type netpolParams struct {
	samples         int           // policy writes timed to enforcement
	selecting       int           // policies selecting the server in the throughput run
	policies, pods  int           // the full sync's load
	throughputFor   time.Duration // each throughput round
	throughputTimes int
}

func netpolParamsFor(quick bool) netpolParams {
	if quick {
		return netpolParams{samples: 10, selecting: 100, policies: 200, pods: 200, throughputFor: time.Second, throughputTimes: 2}
	}
	return netpolParams{samples: 40, selecting: 100, policies: 1000, pods: 1000, throughputFor: time.Second, throughputTimes: 7}
}

type netpolResults struct {
	writeP50, writeP99    *float64
	fullSync, rssAdded    *float64
	bare, policed         *float64 // throughput, MB/s
	ratio                 *float64
	connBare, connPoliced *float64 // new connections/s
	connRatio             *float64
}

func netpolRows(p netpolParams, r *netpolResults) []Row {
	row := func(name, unit string, v *float64, t *Target) Row {
		return Row{Name: "netpol: " + name, Unit: unit, Bonsai: v, Target: t}
	}
	load := fmt.Sprintf("%s policies over %s pods", fmtNum(float64(p.policies)), fmtNum(float64(p.pods)))
	rows := []Row{
		row("policy written → enforced (traffic stops or flows) p50", "ms", r.writeP50, nil),
		row("policy written → enforced p99", "ms", r.writeP99, atMost(100, "ms")),
		row("full sync of "+load+" (pods on simulated nodes, peers)", "ms", r.fullSync, nil),
		row("RSS added by "+load+" (the whole server)", "MB", r.rssAdded, nil),
		row("pod-to-pod TCP throughput, no policy", "MB/s", r.bare, nil),
		row(fmt.Sprintf("pod-to-pod TCP throughput, %d policies selecting the server", p.selecting), "MB/s", r.policed, nil),
		row(fmt.Sprintf("throughput with %d policies / with none", p.selecting), "%", r.ratio, atLeast(95, "%")),
		row("pod-to-pod TCP connections set up per second, no policy", "conns/s", r.connBare, nil),
		row(fmt.Sprintf("pod-to-pod TCP connections set up per second, %d policies selecting the server", p.selecting), "conns/s", r.connPoliced, nil),
		row(fmt.Sprintf("connection setup with %d policies / with none", p.selecting), "%", r.connRatio, atLeast(90, "%")),
	}
	if p.policies == 1000 {
		rows[2].Target = atMost(1000, "ms")
	}
	return rows
}

// netpolSuite runs a real node beside simulated ones and measures the
// network policy enforcer: a policy's write to the moment traffic
// between two real pods obeys it, a full sync of many policies over
// many pods (on the simulated nodes: they are peers of the real node's
// pods), the memory that load adds, and what policies cost a pod's
// throughput.
func netpolSuite(ctx context.Context, b *bench) ([]Row, error) {
	p := netpolParamsFor(b.quick)
	res := &netpolResults{}
	rows := func() []Row { return netpolRows(p, res) }
	if os.Geteuid() != 0 {
		return rows(), errors.New("the netpol suite needs root (network namespaces, containerd, nftables)")
	}
	b.logf("netpol: starting bonsai with its own containerd and 10 simulated nodes")
	n, err := startRealNode(ctx, b, "netpol", "10.247.0.0/16", "--simulated-nodes=10")
	if err != nil {
		return rows(), err
	}
	defer func() { n.close() }()
	if _, err := waitSimReady(ctx, n.cs, 10, 60*time.Second); err != nil {
		return rows(), err
	}
	if _, err := n.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "np"}}, metav1.CreateOptions{}); err != nil {
		return rows(), err
	}
	server, err := netpolPod(ctx, n, "server")
	if err != nil {
		return rows(), err
	}
	client, err := netpolPod(ctx, n, "client")
	if err != nil {
		return rows(), err
	}
	serverAddr := net.JoinHostPort(server.Status.PodIP, "5001")
	stopServer, err := sinkIn(netnsPath(n, server), ":5001")
	if err != nil {
		return rows(), err
	}
	defer stopServer()
	clientNS := netnsPath(n, client)

	b.logf("netpol: %d policy writes timed to enforcement", p.samples)
	var took []time.Duration
	nps := n.cs.NetworkingV1().NetworkPolicies("np")
	for i := range p.samples {
		deny := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("deny-%d", i)},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "server"}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}}
		start := time.Now()
		if _, err := nps.Create(ctx, deny, metav1.CreateOptions{}); err != nil {
			return rows(), err
		}
		d, err := untilReach(ctx, clientNS, serverAddr, false, start)
		if err != nil {
			return rows(), err
		}
		took = append(took, d)
		start = time.Now()
		if err := nps.Delete(ctx, deny.Name, metav1.DeleteOptions{}); err != nil {
			return rows(), err
		}
		if d, err = untilReach(ctx, clientNS, serverAddr, true, start); err != nil {
			return rows(), err
		}
		took = append(took, d)
	}
	res.writeP50, res.writeP99 = ms(percentile(took, 0.5)), ms(percentile(took, 0.99))
	b.noteOnce("netpol-write", "netpol: a write → enforced sample runs from the API call to the first new connection that obeys the policy; half the samples are a deny, seen when a connection times out after 20 ms, which they include")

	b.logf("netpol: throughput with %d policies selecting the server", p.selecting)
	for i := range p.selecting {
		if _, err := nps.Create(ctx, allowClient(i), metav1.CreateOptions{}); err != nil {
			return rows(), err
		}
	}
	// Enforced: a default-deny beside them would now stop nothing the
	// policies allow; the throughput runs once the last one is in.
	if _, err := untilReach(ctx, clientNS, serverAddr, true, time.Now()); err != nil {
		return rows(), err
	}
	if err := sleep(ctx, 500*time.Millisecond); err != nil {
		return rows(), err
	}
	// The same rounds to a pod no policy selects, alternating with the
	// policed one's, so that the machine's other load falls on both.
	open, err := netpolPod(ctx, n, "open")
	if err != nil {
		return rows(), err
	}
	openAddr := net.JoinHostPort(open.Status.PodIP, "5001")
	stopOpen, err := sinkIn(netnsPath(n, open), ":5001")
	if err != nil {
		return rows(), err
	}
	defer stopOpen()
	// Each round measures both pods back to back; the rows are medians
	// over the rounds, the ratios medians of each round's ratio.
	var bare, policed, connBare, connPoliced, ratio, connRatio []float64
	for range p.throughputTimes {
		tb, err := throughput(ctx, clientNS, openAddr, p.throughputFor)
		if err != nil {
			return rows(), err
		}
		tp, err := throughput(ctx, clientNS, serverAddr, p.throughputFor)
		if err != nil {
			return rows(), err
		}
		cb, err := connectRate(ctx, clientNS, openAddr, p.throughputFor)
		if err != nil {
			return rows(), err
		}
		cp, err := connectRate(ctx, clientNS, serverAddr, p.throughputFor)
		if err != nil {
			return rows(), err
		}
		bare, policed, ratio = append(bare, tb), append(policed, tp), append(ratio, 100*tp/tb)
		connBare, connPoliced, connRatio = append(connBare, cb), append(connPoliced, cp), append(connRatio, 100*cp/cb)
	}
	res.bare, res.policed, res.ratio = num(median(bare)), num(median(policed)), num(median(ratio))
	res.connBare, res.connPoliced, res.connRatio = num(median(connBare)), num(median(connPoliced)), num(median(connRatio))
	b.noteOnce("netpol-throughput", "netpol: throughput and connection setup: %d rounds, each 1 s to a pod that %d policies select and 1 s to a pod on the same node that none does; rows are medians over the rounds, ratios the median of each round's ratio", p.throughputTimes, p.selecting)
	if err := nps.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return rows(), err
	}

	b.logf("netpol: %d policies over %d pods, full sync at a start", p.policies, p.pods)
	// The RSS before and after, each measured after a start and its
	// start-up trim, so that both are the same kind of moment.
	n.close()
	if err := n.start(ctx, b); err != nil {
		return rows(), err
	}
	if err := n.srv.waitLog(ctx, startupTrimmed, 30*time.Second); err != nil {
		return rows(), err
	}
	before, err := n.srv.rssMB()
	if err != nil {
		return rows(), err
	}
	if err := netpolLoad(ctx, n.cs, p); err != nil {
		return rows(), err
	}
	n.close()
	if err := n.start(ctx, b); err != nil {
		return rows(), err
	}
	if err := n.srv.waitLog(ctx, netpol.FullSyncLog, 60*time.Second); err != nil {
		return rows(), err
	}
	full, err := fullSyncTook(n.srv.log)
	if err != nil {
		return rows(), err
	}
	res.fullSync = ms(full)
	if err := n.srv.waitLog(ctx, startupTrimmed, 30*time.Second); err != nil {
		return rows(), err
	}
	after, err := n.srv.rssMB()
	if err != nil {
		return rows(), err
	}
	res.rssAdded = num(*after - *before)
	return rows(), nil
}

// netpolPod runs a pod of the real node that sleeps, labelled app=name,
// and returns it once it has an address.
func netpolPod(ctx context.Context, n *realNode, name string) (*corev1.Pod, error) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "np", Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{NodeName: n.name, TerminationGracePeriodSeconds: ptrTo(int64(0)),
			Containers: []corev1.Container{{Name: "main", Image: "bonsai.test/busybox:1", ImagePullPolicy: corev1.PullNever,
				Command: []string{"sleep", "3600"}}}},
	}
	if _, err := n.cs.CoreV1().Pods("np").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		p, err := n.cs.CoreV1().Pods("np").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
			return p, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("pod %s not running within 60s", name)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

// netnsPath is where the built-in network mounts a pod's namespace.
func netnsPath(n *realNode, p *corev1.Pod) string {
	return filepath.Join("/run/bonsai", n.bridge, "netns", string(p.UID))
}

// inPodNetns runs fn on a thread inside the network namespace at path;
// sockets it makes stay there.
func inPodNetns(path string, fn func() error) error { return netplugin.InNetns(path, fn) }

// sinkIn listens in a pod's namespace and reads every connection to the
// end: the throughput's server.
func sinkIn(path, addr string) (stop func(), err error) {
	var l net.Listener
	if err := inPodNetns(path, func() (err error) {
		l, err = net.Listen("tcp4", addr)
		return err
	}); err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				io.Copy(io.Discard, c)
				c.Close()
			}()
		}
	}()
	return func() { l.Close() }, nil
}

// dialFrom connects from a pod's namespace.
func dialFrom(path, addr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := inPodNetns(path, func() (err error) {
		c, err = net.DialTimeout("tcp4", addr, timeout)
		return err
	})
	return c, err
}

// untilReach tries new connections from the client's namespace, one
// every few milliseconds, until they go through (reach) or stop going
// through, and returns the time from start. A connection the policies
// stop is dropped: it times out, after 20 ms here, where an allowed one
// on this node takes well under a millisecond.
func untilReach(ctx context.Context, path, addr string, reach bool, start time.Time) (time.Duration, error) {
	for {
		c, err := dialFrom(path, addr, 20*time.Millisecond)
		if err == nil {
			c.Close()
		}
		if (err == nil) == reach {
			return time.Since(start), nil
		}
		if time.Since(start) > 10*time.Second {
			return 0, fmt.Errorf("connections to %s still %v after 10s (%v)", addr, !reach, err)
		}
		if err := sleep(ctx, 2*time.Millisecond); err != nil {
			return 0, err
		}
	}
}

// throughput sends as much as it can over one TCP connection for d and
// returns the rate, in MB/s.
func throughput(ctx context.Context, path, addr string, d time.Duration) (float64, error) {
	buf := bytes.Repeat([]byte{'x'}, 256<<10)
	c, err := dialFrom(path, addr, 2*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	var sent int64
	start := time.Now()
	for time.Since(start) < d && ctx.Err() == nil {
		n, err := c.Write(buf)
		sent += int64(n)
		if err != nil {
			return 0, err
		}
	}
	return float64(sent) / (1 << 20) / time.Since(start).Seconds(), ctx.Err()
}

// connectRate opens and closes connections one after another from the
// client's namespace for d and returns the rate: what a policy costs the
// first packet of a connection, which conntrack has not seen yet.
func connectRate(ctx context.Context, path, addr string, d time.Duration) (float64, error) {
	var n int
	var took time.Duration
	err := inPodNetns(path, func() error {
		start := time.Now()
		for ; took < d && ctx.Err() == nil; took = time.Since(start) {
			c, err := net.DialTimeout("tcp4", addr, 2*time.Second)
			if err != nil {
				return err
			}
			// A reset rather than a FIN: no TIME_WAIT, so a round
			// never runs out of the namespace's ephemeral ports.
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
			n++
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return float64(n) / took.Seconds(), ctx.Err()
}

// allowClient is the i-th of the policies that select the server and
// allow the client, each in its own words.
func allowClient(i int) *networkingv1.NetworkPolicy {
	port := intstr.FromInt32(5001)
	extra := intstr.FromInt32(int32(6000 + i))
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("allow-%d", i)},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "server"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client", "copy": fmt.Sprint(i % 5)}}}, {PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: &port}, {Port: &extra}},
			}},
		}}
}

// netpolLoad creates the full sync's load: ten namespaces, pods on the
// simulated nodes with app and tier labels and a named port, and
// policies selecting them by app, allowing by tier, by namespace label
// and by a CIDR with a hole, with an egress rule to DNS, as the netpol
// package's timing test does.
func netpolLoad(ctx context.Context, cs kubernetes.Interface, p netpolParams) error {
	for ns := range 10 {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("load-%d", ns),
			Labels: map[string]string{"team": fmt.Sprint(ns % 3)}}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*p.pods)
	work := make(chan func() error)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for f := range work {
				if err := f(); err != nil {
					errs <- err
				}
			}
		}()
	}
	tcp := corev1.ProtocolTCP
	udp := corev1.ProtocolUDP
	for i := range p.pods {
		ns := fmt.Sprintf("load-%d", i%10)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%d", i), Namespace: ns,
				Labels: map[string]string{"app": fmt.Sprintf("a%d", i%50), "tier": fmt.Sprintf("t%d", i%5)}},
			Spec: corev1.PodSpec{NodeName: fmt.Sprintf("sim-%d", i%10), Containers: []corev1.Container{{Name: "main", Image: "bonsai.test/busybox:1",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}},
		}
		work <- func() error { _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); return err }
	}
	for i := range p.policies {
		ns := fmt.Sprintf("load-%d", i%10)
		p80, named, lo := intstr.FromInt32(80), intstr.FromString("http"), intstr.FromInt32(5000)
		end, dns := int32(5100), intstr.FromInt32(53)
		np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("policy-%d", i), Namespace: ns},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("a%d", i%50)}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
				Ingress: []networkingv1.NetworkPolicyIngressRule{
					{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &p80}, {Protocol: &tcp, Port: &named}},
						From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": fmt.Sprintf("t%d", i%5)}}}}},
					{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &lo, EndPort: &end}},
						From: []networkingv1.NetworkPolicyPeer{
							{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": fmt.Sprint(i % 3)}}},
							{IPBlock: &networkingv1.IPBlock{CIDR: "192.168.0.0/16", Except: []string{"192.168.1.0/24"}}}}},
				},
				Egress: []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}}}},
			}}
		work <- func() error {
			_, err := cs.NetworkingV1().NetworkPolicies(ns).Create(ctx, np, metav1.CreateOptions{})
			return err
		}
	}
	close(work)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	// The simulated nodes give the pods their addresses.
	deadline := time.Now().Add(120 * time.Second)
	for {
		list, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		with := 0
		for _, pod := range list.Items {
			if strings.HasPrefix(pod.Namespace, "load-") && pod.Status.PodIP != "" {
				with++
			}
		}
		if with == p.pods {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d pods have an address after 120s", with, p.pods)
		}
		if err := sleep(ctx, 500*time.Millisecond); err != nil {
			return err
		}
	}
}

// fullSyncTook reads the duration of the last full sync the enforcer
// logged.
func fullSyncTook(logPath string) (time.Duration, error) {
	b, err := os.ReadFile(logPath)
	if err != nil {
		return 0, err
	}
	lines := strings.Split(string(b), "\n")
	for _, line := range slices.Backward(lines) {
		if !strings.Contains(line, netpol.FullSyncLog) {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "took="); ok {
				return time.ParseDuration(v)
			}
		}
	}
	return 0, fmt.Errorf("no %q line with took= in %s", netpol.FullSyncLog, logPath)
}

// median of xs, sorted in place.
func median(xs []float64) float64 {
	slices.Sort(xs)
	return xs[len(xs)/2]
}
