package proxy

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

// TestRun drives the proxier through New and Run from a real API server:
// informer events reach the kernel table, and LoadBalancer Services get
// the node's address as ingress and are served there.
func TestRun(t *testing.T) {
	requireRoot(t)
	e := clustertest.New(t, clustertest.Options{Nodes: 1})
	e.WaitNodesReady(1)
	node, err := e.Client.Core.Nodes().Get(e.Ctx, "sim-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var nodeIP string
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			nodeIP = a.Address
		}
	}
	if nodeIP == "" {
		t.Fatalf("node sim-0 has no InternalIP: %+v", node.Status.Addresses)
	}

	// The proxier's nftables socket is opened in a namespace of the
	// test's, so the table lives (and dies) there.
	ns := newNetns(t)
	inf := client.NewInformers(e.Config)
	cfg := Config{
		Client: e.Client, Informers: inf, NodeName: "sim-0", Logger: e.Log,
		ClusterCIDR:     netip.MustParsePrefix("10.42.0.0/16"),
		MinSyncInterval: 10 * time.Millisecond,
		Metrics:         prometheus.NewRegistry(),
	}
	var p *Proxier
	if err := inNS(ns, func() (err error) { p, err = New(cfg); return err }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.Ctx)
	done := make(chan error, 1)
	inf.Start(ctx)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	table := TableName("")

	// waitElems waits until the table's map elements with the keys of
	// the Service's addresses are want.
	var keys []string
	waitElems := func(want ...string) {
		t.Helper()
		slices.Sort(want)
		clustertest.Eventually(t, 30*time.Second, func() error {
			_, got, err := kernelView(ns, table)
			if err != nil {
				return err
			}
			got = slices.DeleteFunc(got, func(s string) bool { return !slices.Contains(keys, strings.Fields(s)[1]) })
			if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
				return fmt.Errorf("elements (-want +got):\n%s", diff)
			}
			return nil
		})
	}

	svc, err := e.Client.Core.Services("default").Create(e.Ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{
			Type:  corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sp := servicePort{proto: protoTCP, port: 80, namespace: "default", name: "web", portName: "http"}
	cip := netip.MustParseAddr(svc.Spec.ClusterIP)
	sp.nodePort = uint16(svc.Spec.Ports[0].NodePort)
	lbIP := netip.MustParseAddr(nodeIP)
	for _, e := range []elem{addrElem("", cip, &sp, nil), addrElem("", lbIP, &sp, nil), portElem("", &sp, nil)} {
		keys = append(keys, fmt.Sprintf("%x", e.key))
	}
	// The built-in load balancer gives it the node's address.
	clustertest.Eventually(t, 30*time.Second, func() error {
		got, err := e.Client.Core.Services("default").Get(e.Ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		vip := corev1.LoadBalancerIPModeVIP
		want := []corev1.LoadBalancerIngress{{IP: nodeIP, IPMode: &vip}}
		if diff := cmp.Diff(want, got.Status.LoadBalancer.Ingress); diff != "" {
			return fmt.Errorf("ingress (-want +got):\n%s", diff)
		}
		return nil
	})

	// No endpoints yet: the cluster IP, the load balancer IP and the
	// node port reject.
	waitElems(
		addrElem(mapNoEndpointServices, cip, &sp, gotoVerdict(chainReject)).kernelText(),
		addrElem(mapNoEndpointServices, lbIP, &sp, gotoVerdict(chainReject)).kernelText(),
		portElem(mapNoEndpointNodePorts, &sp, gotoVerdict(chainReject)).kernelText(),
	)

	// An endpoint: every address of the Service goes to its chains.
	// Its trigger time is when its pods changed: the network programming
	// latency counts from there.
	web1 := newSlice("web", "web-1", 8080, readyEP("10.42.0.5", "sim-0"))
	triggered := time.Now()
	web1.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: triggered.UTC().Format(time.RFC3339Nano)}
	if _, err := e.Client.Discovery.EndpointSlices("default").Create(e.Ctx, web1, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitElems(
		addrElem(mapServiceIPs, cip, &sp, gotoVerdict(serviceChain(&sp))).kernelText(),
		addrElem(mapServiceIPs, lbIP, &sp, gotoVerdict(externalChain(&sp))).kernelText(),
		portElem(mapServiceNodePorts, &sp, gotoVerdict(externalChain(&sp))).kernelText(),
	)
	programmedBy := time.Since(triggered)
	families, err := cfg.Metrics.(*prometheus.Registry).Gather()
	if err != nil {
		t.Fatal(err)
	}
	hist := map[string]*dto.Histogram{}
	for _, f := range families {
		hist[f.GetName()] = f.GetMetric()[0].GetHistogram()
	}
	if h := hist["kubeproxy_sync_full_proxy_rules_duration_seconds"]; h.GetSampleCount() != 1 {
		t.Errorf("full syncs counted: %d, want 1 (the first)", h.GetSampleCount())
	}
	if h := hist["kubeproxy_sync_partial_proxy_rules_duration_seconds"]; h.GetSampleCount() == 0 {
		t.Error("no partial sync counted")
	}
	if h := hist["kubeproxy_network_programming_duration_seconds"]; h.GetSampleCount() != 1 ||
		h.GetSampleSum() <= 0 || h.GetSampleSum() > programmedBy.Seconds() {
		t.Errorf("network programming latency: %d samples summing to %vs, want 1 in (0, %v]", h.GetSampleCount(), h.GetSampleSum(), programmedBy)
	}

	// A load balancer of another class is not ours to fill in. Made
	// before a second Service, of bonsai's own class, whose status shows
	// the controller got past it and serves its class.
	other, own := "example.com/other", LoadBalancerClass
	for _, s := range []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "classed"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
			LoadBalancerClass: &other, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "second"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
			LoadBalancerClass: &own, Ports: []corev1.ServicePort{{Name: "http", Port: 81}}}},
	} {
		if _, err := e.Client.Core.Services("default").Create(e.Ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	clustertest.Eventually(t, 30*time.Second, func() error {
		got, err := e.Client.Core.Services("default").Get(e.Ctx, "second", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(got.Status.LoadBalancer.Ingress) == 0 {
			return fmt.Errorf("no ingress on Service second yet")
		}
		return nil
	})
	if got, err := e.Client.Core.Services("default").Get(e.Ctx, "classed", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if len(got.Status.LoadBalancer.Ingress) != 0 {
		t.Errorf("Service of class %s got ingress %+v", other, got.Status.LoadBalancer.Ingress)
	}

	// A Service that stops being a LoadBalancer loses its ingress.
	second, err := e.Client.Core.Services("default").Get(e.Ctx, "second", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	second.Spec.Type = corev1.ServiceTypeClusterIP
	second.Spec.Ports[0].NodePort = 0
	second.Spec.AllocateLoadBalancerNodePorts = nil
	second.Spec.ExternalTrafficPolicy = ""
	if _, err := e.Client.Core.Services("default").Update(e.Ctx, second, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 30*time.Second, func() error {
		got, err := e.Client.Core.Services("default").Get(e.Ctx, "second", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(got.Status.LoadBalancer.Ingress) != 0 {
			return fmt.Errorf("ClusterIP Service second still has ingress %+v", got.Status.LoadBalancer.Ingress)
		}
		return nil
	})

	// A newer Service on web's port waits for it, as with ServiceLB.
	if _, err := e.Client.Core.Services("default").Create(e.Ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "third"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Deleting the Service removes its elements, and frees its port.
	if err := e.Client.Core.Services("default").Delete(e.Ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 30*time.Second, func() error {
		got, err := e.Client.Core.Services("default").Get(e.Ctx, "third", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(got.Status.LoadBalancer.Ingress) == 0 {
			return fmt.Errorf("no ingress on Service third after web, which had its port, went")
		}
		return nil
	})
	// Of web's keys only the load balancer address and port are left,
	// now third's (with no endpoints).
	waitElems(addrElem(mapNoEndpointServices, lbIP, &sp, gotoVerdict(chainReject)).kernelText())
}

// kernelText is an element as kernelView renders it.
func (e elem) kernelText() string {
	s := fmt.Sprintf("%s %x", e.set, e.key)
	if e.data != nil {
		s += fmt.Sprintf(" : %x", e.data)
	}
	if e.verdict != nil {
		s += " : " + verdictText(e.verdict)
	}
	return s
}
