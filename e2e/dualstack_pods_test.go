package e2e

import (
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// randomULA48 is a random fdxx:xxxx:xxxx::/48 (RFC 4193), for a test's
// IPv6 ranges: no other test uses it and nothing routes it off the host.
func randomULA48() netip.Prefix {
	var b [16]byte
	b[0] = 0xfd
	rand.Read(b[1:6])
	return netip.PrefixFrom(netip.AddrFrom16(b), 48)
}

// TestDualStackPodNetwork runs real pods on a dual-stack cluster (IPv4
// first): a pod gets an address of each family in status.podIPs, in
// the order of the cluster CIDRs, and both in its /etc/hosts; another
// pod reaches it over IPv6; its hostPort answers on the node's IPv6
// gateway address as on IPv4.
func TestDualStackPodNetwork(t *testing.T) {
	ula := randomULA48()
	cluster6 := netip.PrefixFrom(ula.Addr(), 56)
	b := ula.Addr().As16()
	b[6] = 1 // beside the cluster CIDR, in the same /48
	svc6 := netip.PrefixFrom(netip.AddrFrom16(b), 112)
	var r [1]byte
	rand.Read(r[:])
	// Later flags win: the env's IPv4 range is replaced by one of the
	// same kind with an IPv6 one after it.
	e := startPodEnv(t, fmt.Sprintf("--cluster-cidr=10.%d.0.0/16,%s", 100+int(r[0])%100, cluster6),
		"--service-cidr=10.43.0.0/16,"+svc6.String())
	ctx := t.Context()

	node, err := e.cs.CoreV1().Nodes().Get(ctx, e.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(node.Spec.PodCIDRs) != 2 {
		t.Fatalf("node pod CIDRs %v: want one per family", node.Spec.PodCIDRs)
	}
	pod4, pod6 := netip.MustParsePrefix(node.Spec.PodCIDRs[0]), netip.MustParsePrefix(node.Spec.PodCIDRs[1])
	if !pod6.Addr().Is6() || !cluster6.Contains(pod6.Addr()) {
		t.Fatalf("node pod CIDRs %v: want the second in %s", node.Spec.PodCIDRs, cluster6)
	}

	ns := "ds-" + strings.ToLower(e.node[len(e.node)-6:])
	if _, err := e.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the default service account of "+ns, func() bool {
		_, err := e.cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	})
	hostPort := int32(freePort(t))
	svc, err := e.cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{IPFamilyPolicy: ptr(corev1.IPFamilyPolicyPreferDualStack), Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(svc.Spec.ClusterIPs) != 2 {
		t.Fatalf("service cluster IPs %v: want one per family", svc.Spec.ClusterIPs)
	}
	srv := e.create(t, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr(int64(1)), Containers: []corev1.Container{{Name: "httpd",
			Command: sh("mkdir -p /www && echo served-by-$(hostname) > /www/index.html && exec httpd -f -p 8080 -h /www"),
			Ports:   []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, HostPort: hostPort}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/index.html", Port: intstr.FromString("http")}},
				PeriodSeconds: 1},
		}}},
	})
	srv = waitPodIn(t, e, ns, srv.Name, 60*time.Second, "Ready", running)
	if len(srv.Status.PodIPs) != 2 || srv.Status.PodIP != srv.Status.PodIPs[0].IP {
		t.Fatalf("pod IPs %q %v: want one per family", srv.Status.PodIP, srv.Status.PodIPs)
	}
	ip4, ip6 := netip.MustParseAddr(srv.Status.PodIPs[0].IP), netip.MustParseAddr(srv.Status.PodIPs[1].IP)
	if !pod4.Contains(ip4) || !pod6.Contains(ip6) {
		t.Fatalf("pod IPs %v: want one of %s then one of %s", srv.Status.PodIPs, pod4, pod6)
	}

	t.Run("hostPort on the node's IPv6 address", func(t *testing.T) {
		gw6 := pod6.Addr().Next()
		for _, host := range []string{netip.AddrPortFrom(gw6, uint16(hostPort)).String(), fmt.Sprintf("127.0.0.1:%d", hostPort)} {
			resp, err := http.Get("http://" + host + "/index.html")
			if err != nil {
				t.Fatalf("hostPort on %s: %v", host, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(body) != "served-by-web\n" {
				t.Fatalf("hostPort on %s answered %q", host, body)
			}
		}
	})

	t.Run("the Service's IPv6 EndpointSlice has the pod's IPv6 address", func(t *testing.T) {
		waitFor(t, 30*time.Second, "an IPv6 endpoint "+ip6.String(), func() bool {
			slices, err := e.cs.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=web"})
			if err != nil {
				return false
			}
			for _, sl := range slices.Items {
				for _, ep := range sl.Endpoints {
					if sl.AddressType == "IPv6" && len(ep.Addresses) == 1 && ep.Addresses[0] == ip6.String() {
						return true
					}
				}
			}
			return false
		})
	})

	dashed6 := strings.ReplaceAll(ip6.String(), ":", "-")
	t.Run("pod to pod over IPv6, both addresses in /etc/hosts, DNS of both families", func(t *testing.T) {
		client := e.create(t, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "client"},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "wget",
				Command: sh(fmt.Sprintf("wget -q -O - http://[%s]:8080/index.html && grep -c client /etc/hosts && ip -6 addr show dev eth0 scope global && "+
					"echo --- && nslookup web.%s.svc.cluster.local; echo --- && nslookup %s.%s.pod.cluster.local; echo ---; cat /etc/resolv.conf; echo ---; nslookup %s",
					ip6, ns, dashed6, ns, svc.Spec.ClusterIPs[1]))}}},
		})
		client = waitPodIn(t, e, ns, client.Name, 60*time.Second, "finished", func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
		})
		got := e.logText(t, client, "wget", 0)
		if client.Status.Phase != corev1.PodSucceeded || !strings.HasPrefix(got, "served-by-web\n2\n") {
			t.Fatalf("pod to pod over IPv6: %s, log %q", statusSummary(client), got)
		}
		if len(client.Status.PodIPs) != 2 || !strings.Contains(got, client.Status.PodIPs[1].IP+"/64") {
			t.Errorf("client pod IPs %v, its eth0 shows %q", client.Status.PodIPs, got)
		}
		parts := strings.Split(got, "---\n")
		if len(parts) != 5 {
			t.Fatalf("client log %q", got)
		}
		// busybox nslookup asks for A and AAAA: the Service answers
		// with its cluster IP of each family, the pod record of the
		// IPv6 dashed form with the pod's IPv6 address.
		for _, ip := range svc.Spec.ClusterIPs {
			if !strings.Contains(parts[1], "Address: "+ip+"\n") {
				t.Errorf("nslookup of the Service shows no %s:\n%s", ip, parts[1])
			}
		}
		if !strings.Contains(parts[2], "Address: "+ip6.String()+"\n") {
			t.Errorf("nslookup of %s.%s.pod shows no %s:\n%s", dashed6, ns, ip6, parts[2])
		}
		if !strings.Contains(parts[3], "nameserver 10.43.0.10\n") {
			t.Errorf("resolv.conf: %q, want the first family's DNS address", parts[3])
		}
		if want := "name = web." + ns + ".svc.cluster.local"; !strings.Contains(parts[4], want) {
			t.Errorf("PTR of the IPv6 cluster IP %s: %q, want %q", svc.Spec.ClusterIPs[1], parts[4], want)
		}
	})
}

// waitPodIn polls a pod of namespace ns until cond holds.
func waitPodIn(t *testing.T, e *podEnv, ns, name string, timeout time.Duration, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last *corev1.Pod
	for {
		p, err := e.cs.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err == nil {
			last = p
			if cond(p) {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s/%s: not %s within %v; last status: %+v\n%s", ns, name, what, timeout, statusSummary(last), e.s.stderrText())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestIPv6OnlyPodNetwork runs real pods on an IPv6-only cluster: a pod
// gets one IPv6 address, another pod reaches it, and cluster DNS, served
// on the IPv6 cluster DNS address that the pods' resolv.conf names,
// answers the Service's AAAA record.
func TestIPv6OnlyPodNetwork(t *testing.T) {
	ula := randomULA48()
	cluster6 := netip.PrefixFrom(ula.Addr(), 56)
	b := ula.Addr().As16()
	b[6] = 1
	svc6 := netip.PrefixFrom(netip.AddrFrom16(b), 112)
	dnsAddr := svc6.Addr()
	for range 10 {
		dnsAddr = dnsAddr.Next()
	}
	e := startPodEnv(t, "--cluster-cidr="+cluster6.String(), "--service-cidr="+svc6.String())
	ctx := t.Context()
	ns := "v6-" + strings.ToLower(e.node[len(e.node)-6:])
	if _, err := e.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the default service account of "+ns, func() bool {
		_, err := e.cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	})
	svc, err := e.cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srv := e.create(t, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr(int64(1)), Containers: []corev1.Container{{Name: "httpd",
			Command: sh("mkdir -p /www && echo served-by-$(hostname) > /www/index.html && exec httpd -f -p 8080 -h /www"),
			Ports:   []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/index.html", Port: intstr.FromString("http")}},
				PeriodSeconds: 1},
		}}},
	})
	srv = waitPodIn(t, e, ns, srv.Name, 60*time.Second, "Ready", running)
	ip := netip.MustParseAddr(srv.Status.PodIP)
	if len(srv.Status.PodIPs) != 1 || !ip.Is6() || !cluster6.Contains(ip) {
		t.Fatalf("pod IPs %v: want one of %s", srv.Status.PodIPs, cluster6)
	}
	client := e.create(t, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "client"},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "wget",
			Command: sh(fmt.Sprintf("wget -q -O - http://[%s]:8080/index.html && echo --- && nslookup web.%s.svc.cluster.local; echo ---; cat /etc/resolv.conf", ip, ns))}}},
	})
	client = waitPodIn(t, e, ns, client.Name, 60*time.Second, "finished", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	})
	got := e.logText(t, client, "wget", 0)
	parts := strings.Split(got, "---\n")
	if client.Status.Phase != corev1.PodSucceeded || len(parts) != 3 || parts[0] != "served-by-web\n" {
		t.Fatalf("pod to pod over IPv6: %s, log %q", statusSummary(client), got)
	}
	if !strings.Contains(parts[1], "Address: "+svc.Spec.ClusterIP+"\n") {
		t.Errorf("nslookup of the Service shows no %s:\n%s", svc.Spec.ClusterIP, parts[1])
	}
	if !strings.Contains(parts[2], "nameserver "+dnsAddr.String()+"\n") {
		t.Errorf("resolv.conf %q: want nameserver %s", parts[2], dnsAddr)
	}
}
