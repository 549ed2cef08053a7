package e2e

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"bonsai.dev/bonsai/testsupport/testenv"
)

// Ranges of the dual-stack test: none of another test's (the default
// 10.42/10.43, the pod tests' 10.100-199), and the simulated runtime
// sets up no host networking for them anyway.
const (
	dsServiceCIDRs = "10.201.0.0/16,fd01:201::/112"
	dsClusterCIDRs = "10.202.0.0/16,fd01:202::/56"
)

const dsServiceYAML = `apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  ipFamilyPolicy: PreferDualStack
  selector: {app: web}
  ports: [{port: 80}]
`

// TestDualStackServer starts bonsai with a dual-stack --service-cidr and
// --cluster-cidr: a PreferDualStack Service gets a cluster IP of each
// family, the node a pod CIDR of each, the Service an EndpointSlice of
// each family (the IPv6 one empty while pods have IPv4 only), and the
// kubernetes Service stays IPv4. Bad ranges stop the server with
// kube-apiserver's message.
func TestDualStackServer(t *testing.T) {
	requireBinary(t)
	for _, tc := range []struct {
		cidrs, want string
	}{
		{"--service-cidr=10.201.0.0/16,10.203.0.0/16", "--service-cidr[0] and --service-cidr[1] must be of different IP family"},
		{"--service-cidr=10.201.0.0/16,fd01:201::/64", "specified --service-cidr[1] is too large; for 128-bit addresses, the mask must be >= 108"},
		{"--service-cidr=10.201.0.0/16,fd01:201::/112,10.203.0.0/16", "--service-cidr must not contain more than two entries"},
	} {
		code, stderr := runToExit(t, "server", "--data-dir", t.TempDir(), "--https-listen-port", fmt.Sprint(freePort(t)), "--bind-address", "127.0.0.1",
			"--config", emptyConfig(t), "--disable-agent", "--cluster-cidr="+dsClusterCIDRs, tc.cidrs)
		if code == 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want %q", tc.cidrs, code, stderr, tc.want)
		}
	}

	kcs := testenv.Kubectls(t)
	kc := kcs[len(kcs)-1]
	s := startServer(t, t.TempDir(), "--runtime=simulated", "--node-name=ds-1",
		"--service-cidr="+dsServiceCIDRs, "--cluster-cidr="+dsClusterCIDRs)
	k := &kubectlRunner{t: t, bin: kc.Path, kubeconfig: filepath.Join(s.dataDir, "kubeconfig.yaml"), cacheDir: t.TempDir()}
	waitNodesReady(t, k, s, 1)

	podCIDRs := strings.Fields(k.must("get", "node", "ds-1", "-o", `jsonpath={.spec.podCIDR} {.spec.podCIDRs[*]}`))
	if len(podCIDRs) != 3 || podCIDRs[0] != podCIDRs[1] ||
		!strings.HasPrefix(podCIDRs[1], "10.202.") || !strings.HasSuffix(podCIDRs[1], "/24") ||
		!strings.HasPrefix(podCIDRs[2], "fd01:202:") || !strings.HasSuffix(podCIDRs[2], "/64") {
		t.Errorf("node podCIDR and podCIDRs: %v", podCIDRs)
	}
	if got := k.must("get", "servicecidr", "kubernetes", "-o", "jsonpath={.spec.cidrs[*]}"); got != "10.201.0.0/16 fd01:201::/112" {
		t.Errorf("kubernetes ServiceCIDR: %q", got)
	}
	if got := k.must("get", "service", "kubernetes", "-n", "default", "-o", "jsonpath={.spec.ipFamilyPolicy} {.spec.ipFamilies[*]} {.spec.clusterIPs[*]}"); got != "SingleStack IPv4 10.201.0.1" {
		t.Errorf("kubernetes Service: %q", got)
	}

	k.must("apply", "-f", writeFile(t, "svc.yaml", dsServiceYAML, 0o600))
	k.must("run", "web", "--image=nginx:1.27", "--labels=app=web")
	k.must("wait", "--for=condition=Ready", "pod/web", "--timeout=20s")
	got := strings.Fields(k.must("get", "service", "web", "-o", "jsonpath={.spec.ipFamilyPolicy} {.spec.clusterIP} {.spec.ipFamilies[*]} {.spec.clusterIPs[*]}"))
	if len(got) != 6 || got[0] != "PreferDualStack" || got[1] != got[4] || got[2] != "IPv4" || got[3] != "IPv6" {
		t.Fatalf("service web: %v", got)
	}
	if ip, err := netip.ParseAddr(got[4]); err != nil || !netip.MustParsePrefix("10.201.0.0/16").Contains(ip) {
		t.Errorf("IPv4 cluster IP %s", got[4])
	}
	if ip, err := netip.ParseAddr(got[5]); err != nil || !netip.MustParsePrefix("fd01:201::/112").Contains(ip) {
		t.Errorf("IPv6 cluster IP %s", got[5])
	}
	podIP := k.must("get", "pod", "web", "-o", "jsonpath={.status.podIP}")
	for deadline := time.Now().Add(15 * time.Second); ; {
		out := k.must("get", "endpointslices", "-l", "kubernetes.io/service-name=web", "-o", `jsonpath={range .items[*]}{.addressType}={.endpoints[*].addresses[*]};{end}`)
		slices := map[string]string{}
		for _, s := range strings.Split(strings.TrimSuffix(out, ";"), ";") {
			if at, addrs, ok := strings.Cut(s, "="); ok {
				slices[at] = addrs
			}
		}
		if len(slices) == 2 && slices["IPv4"] == podIP && slices["IPv6"] == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("EndpointSlices of web: %q; want an IPv4 one with %s and an empty IPv6 one", out, podIP)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Downgrade: the first cluster IP stays, the IPv6 one is given back.
	k.must("patch", "service", "web", "-p", `{"spec":{"ipFamilyPolicy":"SingleStack"}}`)
	if after := k.must("get", "service", "web", "-o", "jsonpath={.spec.clusterIPs[*]} {.spec.ipFamilies[*]}"); after != got[4]+" IPv4" {
		t.Errorf("after the downgrade: %q", after)
	}
	if out := k.fails("get", "ipaddress", got[5]); !strings.Contains(out, "NotFound") && !strings.Contains(out, "not found") {
		t.Errorf("IPv6 cluster IP %s still recorded: %s", got[5], out)
	}
}
