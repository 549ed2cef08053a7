package dns

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestParseResolvConf(t *testing.T) {
	in := `# generated
nameserver 192.0.2.53
; comment
nameserver 192.0.2.54
search old.example
search lan. corp.example . 
options ndots:1
options edns0 timeout:2
domain ignored.example
nameserver
`
	got, err := ParseResolvConf(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := ResolvConf{
		Nameservers: []string{"192.0.2.53", "192.0.2.54"},
		Searches:    []string{"lan", "corp.example"},
		Options:     []string{"edns0", "timeout:2"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestPodResolvConf(t *testing.T) {
	host := ResolvConf{Nameservers: []string{"192.0.2.53", "192.0.2.54"}, Searches: []string{"lan"}, Options: []string{"edns0", "timeout:2"}}
	pod := func(ns string, policy corev1.DNSPolicy, hostNet bool, cfg *corev1.PodDNSConfig) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns}, Spec: corev1.PodSpec{DNSPolicy: policy, HostNetwork: hostNet, DNSConfig: cfg}}
	}
	opt := func(name, value string) corev1.PodDNSConfigOption {
		if value == "" {
			return corev1.PodDNSConfigOption{Name: name}
		}
		return corev1.PodDNSConfigOption{Name: name, Value: &value}
	}
	var many []string
	for i := range 40 {
		many = append(many, fmt.Sprintf("d%02d.example", i))
	}
	long := strings.Repeat("a", 250) + ".org" // 254 characters
	var wide []string
	for i := range 20 {
		wide = append(wide, fmt.Sprintf("%03d.%s.example", i, strings.Repeat("w", 100)))
	}
	clusterSearch := "search shop.svc.cluster.local svc.cluster.local cluster.local lan\n"
	for _, tc := range []struct {
		name       string
		pod        *corev1.Pod
		host       ResolvConf
		clusterDNS []string
		domain     string
		want       string
	}{
		{"unset policy is ClusterFirst (DNS-06, UP-01)", pod("shop", "", false, nil), host, []string{"10.43.0.10"}, "cluster.local",
			"nameserver 10.43.0.10\n" + clusterSearch + "options ndots:5\n"},
		{"ClusterFirst on the host network falls back to Default (UP-02)", pod("shop", corev1.DNSClusterFirst, true, nil), host, []string{"10.43.0.10"}, "cluster.local",
			"nameserver 192.0.2.53\nnameserver 192.0.2.54\nsearch lan\noptions edns0 timeout:2\n"},
		{"ClusterFirstWithHostNet (DNS-25)", pod("shop", corev1.DNSClusterFirstWithHostNet, true, nil), host, []string{"10.43.0.10"}, "cluster.local",
			"nameserver 10.43.0.10\n" + clusterSearch + "options ndots:5\n"},
		{"ClusterFirst without a cluster DNS falls back to Default", pod("shop", corev1.DNSClusterFirst, false, nil), host, nil, "cluster.local",
			"nameserver 192.0.2.53\nnameserver 192.0.2.54\nsearch lan\noptions edns0 timeout:2\n"},
		{"Default is the host's", pod("shop", corev1.DNSDefault, false, nil), host, []string{"10.43.0.10"}, "cluster.local",
			"nameserver 192.0.2.53\nnameserver 192.0.2.54\nsearch lan\noptions edns0 timeout:2\n"},
		{"None with dnsConfig (DNS-31)", pod("shop", corev1.DNSNone, false, &corev1.PodDNSConfig{
			Nameservers: []string{"1.2.3.4"}, Searches: []string{"ns1.svc.cluster-domain.example", "my.dns.search.suffix"},
			Options: []corev1.PodDNSConfigOption{opt("ndots", "2"), opt("edns0", "")},
		}), host, []string{"10.43.0.10"}, "cluster.local",
			"nameserver 1.2.3.4\nsearch ns1.svc.cluster-domain.example my.dns.search.suffix\noptions ndots:2 edns0\n"},
		{"None without dnsConfig is empty", pod("shop", corev1.DNSNone, false, nil), host, []string{"10.43.0.10"}, "cluster.local", ""},
		{"IPv6 cluster DNS (DNS-32)", pod("default", corev1.DNSClusterFirst, false, nil), ResolvConf{}, []string{"fd00:79:30::a"}, "cluster-domain.example",
			"nameserver fd00:79:30::a\nsearch default.svc.cluster-domain.example svc.cluster-domain.example cluster-domain.example\noptions ndots:5\n"},
		{"dnsConfig merges into ClusterFirst without duplicates, pod options win (DNS-27..30, UP-04)",
			pod("shop", corev1.DNSClusterFirst, false, &corev1.PodDNSConfig{
				Nameservers: []string{"10.43.0.10", "192.0.2.1"}, Searches: []string{"lan", "extra.example", "svc.cluster.local"},
				Options: []corev1.PodDNSConfigOption{opt("ndots", "2"), opt("rotate", "")},
			}), host, []string{"10.43.0.10"}, "cluster.local",
			"nameserver 10.43.0.10\nnameserver 192.0.2.1\nsearch shop.svc.cluster.local svc.cluster.local cluster.local lan extra.example\noptions ndots:2 rotate\n"},
		{"pod options override the host's in place", pod("shop", corev1.DNSDefault, false, &corev1.PodDNSConfig{
			Options: []corev1.PodDNSConfigOption{opt("timeout", "5"), opt("attempts", "3")},
		}), ResolvConf{Nameservers: []string{"192.0.2.53"}, Options: []string{"ndots:1", "timeout:2", "ndots:3"}}, nil, "cluster.local",
			"nameserver 192.0.2.53\noptions ndots:3 timeout:5 attempts:3\n"},
		{"at most 3 nameservers (UP-03)", pod("shop", corev1.DNSDefault, false, &corev1.PodDNSConfig{Nameservers: []string{"192.0.2.1", "192.0.2.2"}}),
			host, nil, "cluster.local",
			"nameserver 192.0.2.53\nnameserver 192.0.2.54\nnameserver 192.0.2.1\nsearch lan\noptions edns0 timeout:2\n"},
		{"at most 32 search paths (DNS-34)", pod("shop", corev1.DNSNone, false, &corev1.PodDNSConfig{Nameservers: []string{"192.0.2.1"}, Searches: many}),
			host, nil, "cluster.local", "nameserver 192.0.2.1\nsearch " + strings.Join(many[:32], " ") + "\n"},
		{"search paths over 253 characters are dropped", pod("shop", corev1.DNSNone, false, &corev1.PodDNSConfig{Nameservers: []string{"192.0.2.1"}, Searches: []string{"a.example", long, "b.example"}}),
			host, nil, "cluster.local", "nameserver 192.0.2.1\nsearch a.example b.example\n"},
		{"search list cut to 2048 characters (DNS-34)", pod("shop", corev1.DNSNone, false, &corev1.PodDNSConfig{Nameservers: []string{"192.0.2.1"}, Searches: wide}),
			host, nil, "cluster.local", "nameserver 192.0.2.1\nsearch " + strings.Join(wide[:18], " ") + "\n"},
	} {
		got := PodResolvConf(tc.pod, tc.host, tc.clusterDNS, tc.domain)
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
	if n := len(strings.Join(wide[:18], " ")); n > 2048 || n+1+len(wide[18]) <= 2048 {
		t.Fatalf("the 2048-character case is miscomputed: 18 paths are %d characters", n)
	}
}

// The node resolv.conf for pods skips one with only loopback nameservers
// (systemd-resolved's stub) for systemd-resolved's real list.
func TestHostResolvConfPath(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	stub := write("stub.conf", "nameserver 127.0.0.53\noptions edns0 trust-ad\n")
	real := write("real.conf", "nameserver 192.0.2.53\n")
	empty := write("empty.conf", "# nothing\n")
	missing := filepath.Join(dir, "missing.conf")
	for _, tc := range []struct {
		candidates []string
		want       string
	}{
		{[]string{real, stub}, real},
		{[]string{stub, real}, real},
		{[]string{missing, empty, real}, real},
		{[]string{stub, empty, missing}, ""},
	} {
		got, err := HostResolvConfPath(tc.candidates)
		if got != tc.want || (err == nil) != (tc.want != "") {
			t.Errorf("HostResolvConfPath(%v) = %q, %v; want %q", tc.candidates, got, err, tc.want)
		}
	}
}
