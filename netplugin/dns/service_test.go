package dns

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

// EnsureService creates kube-system/kube-dns as k3s and kubeadm do, keeps
// an existing one, refuses one at another address; the DNS server then
// answers for itself (DNS-02, DNS-08).
func TestEnsureService(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{})
	inf := client.NewInformers(e.Config)
	s := startServer(t, inf, startStub(t).addr, nil)
	inf.Start(e.Ctx)
	ip := netip.MustParseAddr("10.43.0.10")
	if err := EnsureService(e.Ctx, e.Client.Core, ip); err != nil {
		t.Fatal(err)
	}
	got, err := e.Client.Core.Services("kube-system").Get(e.Ctx, "kube-dns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.ClusterIP != "10.43.0.10" || got.Spec.Selector != nil {
		t.Errorf("clusterIP %s, selector %v", got.Spec.ClusterIP, got.Spec.Selector)
	}
	wantLabels := map[string]string{"k8s-app": "kube-dns", "kubernetes.io/cluster-service": "true", "kubernetes.io/name": "CoreDNS",
		"service.kubernetes.io/service-proxy-name": "bonsai-dns"}
	if diff := cmp.Diff(wantLabels, got.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	type port struct {
		Name  string
		Port  int32
		Proto corev1.Protocol
	}
	var ports []port
	for _, p := range got.Spec.Ports {
		ports = append(ports, port{p.Name, p.Port, p.Protocol})
	}
	if diff := cmp.Diff([]port{{"dns", 53, corev1.ProtocolUDP}, {"dns-tcp", 53, corev1.ProtocolTCP}, {"metrics", 9153, corev1.ProtocolTCP}}, ports); diff != "" {
		t.Errorf("ports (-want +got):\n%s", diff)
	}

	// Again: nothing to do, the Service is kept as it is.
	if err := EnsureService(e.Ctx, e.Client.Core, ip); err != nil {
		t.Errorf("second EnsureService: %v", err)
	}
	again, err := e.Client.Core.Services("kube-system").Get(e.Ctx, "kube-dns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if again.ResourceVersion != got.ResourceVersion {
		t.Errorf("the Service was written again: resourceVersion %s → %s", got.ResourceVersion, again.ResourceVersion)
	}
	if err := EnsureService(e.Ctx, e.Client.Core, netip.MustParseAddr("10.43.0.53")); err == nil || !strings.Contains(err.Error(), "10.43.0.10") {
		t.Errorf("EnsureService at another address: %v", err)
	}

	clustertest.Eventually(t, 10*time.Second, func() error {
		m := exchange(t, s.address, "udp", "kube-dns.kube-system.svc.cluster.local.", dns.TypeA, 0)
		if got := rrStrings(m.Answer); !cmp.Equal(got, []string{"kube-dns.kube-system.svc.cluster.local. 5 IN A 10.43.0.10"}) {
			return fmt.Errorf("kube-dns answers %v", got)
		}
		return nil
	})
	m := exchange(t, s.address, "udp", "_dns-tcp._tcp.kube-dns.kube-system.svc.cluster.local.", dns.TypeSRV, 0)
	if got := rrStrings(m.Answer); !cmp.Equal(got, []string{"_dns-tcp._tcp.kube-dns.kube-system.svc.cluster.local. 5 IN SRV 0 100 53 kube-dns.kube-system.svc.cluster.local."}) {
		t.Errorf("SRV of dns-tcp: %v", got)
	}
}
