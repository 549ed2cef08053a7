package apiserver

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/store"
)

// Service ranges of the dual-stack tests: small, so that exhausting them
// is cheap.
const (
	dsV4 = "10.96.0.0/24"
	dsV6 = "fd00:96::/120"
)

// newServiceRangesEnv is an allocEnv over the given service ranges, the
// primary first.
func newServiceRangesEnv(t *testing.T, st store.Store, cidrs ...string) *allocEnv {
	t.Helper()
	var ps []netip.Prefix
	for _, c := range cidrs {
		ps = append(ps, netip.MustParsePrefix(c))
	}
	s, err := New(Config{Store: st, ServiceCIDRs: ps, NodePortRange: PortRange{Base: 30000, Max: 30099}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	cs := kubernetes.NewForConfigOrDie(s.ClientConfig(&authn.User{Name: "test-admin", Groups: []string{authn.GroupMasters}}))
	return &allocEnv{s: s, st: st, cs: cs, ctx: ctx}
}

// ipAddresses are the recorded cluster IPs, each with its family label.
func (e *allocEnv) ipAddresses(t *testing.T) map[string]string {
	t.Helper()
	list, err := e.cs.NetworkingV1().IPAddresses().List(e.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, a := range list.Items {
		out[a.Name] = a.Labels["ipaddress.kubernetes.io/ip-family"] + " " + a.Spec.ParentRef.Namespace + "/" + a.Spec.ParentRef.Name
	}
	return out
}

func familyOfIP(t *testing.T, ip string) corev1.IPFamily {
	t.Helper()
	a, err := netip.ParseAddr(ip)
	if err != nil {
		t.Fatalf("cluster IP %q: %v", ip, err)
	}
	return ipFamilyOf(a)
}

// checkClusterIPs: clusterIP is clusterIPs[0], each IP is of its family
// and in that family's range, and each is recorded for the Service.
func checkClusterIPs(t *testing.T, e *allocEnv, ranges []string, svc *corev1.Service) {
	t.Helper()
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 || svc.Spec.ClusterIP != ips[0] {
		t.Errorf("%s: clusterIP %q, clusterIPs %v", svc.Name, svc.Spec.ClusterIP, ips)
		return
	}
	if ips[0] == corev1.ClusterIPNone {
		return
	}
	if len(ips) != len(svc.Spec.IPFamilies) {
		t.Errorf("%s: clusterIPs %v, ipFamilies %v", svc.Name, ips, svc.Spec.IPFamilies)
		return
	}
	recs := e.ipAddresses(t)
	for i, ip := range ips {
		fam := familyOfIP(t, ip)
		if fam != svc.Spec.IPFamilies[i] {
			t.Errorf("%s: clusterIPs[%d] %s is not %s", svc.Name, i, ip, svc.Spec.IPFamilies[i])
		}
		in := false
		for _, r := range ranges {
			in = in || netip.MustParsePrefix(r).Contains(netip.MustParseAddr(ip))
		}
		if !in {
			t.Errorf("%s: %s is in none of %v", svc.Name, ip, ranges)
		}
		if want := string(fam) + " default/" + svc.Name; recs[ip] != want {
			t.Errorf("%s: IPAddress %s is %q, want %q", svc.Name, ip, recs[ip], want)
		}
	}
}

// TestDualStackServiceDefaulting runs the scenarios of the reference
// (DS-09 to DS-18) on a dual-stack server of each primary family and on
// single-stack IPv4 and IPv6 servers: what each gets, or kube-apiserver's
// error where the cluster cannot give it.
func TestDualStackServiceDefaulting(t *testing.T) {
	v4, v6 := corev1.IPv4Protocol, corev1.IPv6Protocol
	single := corev1.IPFamilyPolicySingleStack
	prefer := corev1.IPFamilyPolicyPreferDualStack
	require := corev1.IPFamilyPolicyRequireDualStack
	type want struct {
		policy   corev1.IPFamilyPolicy
		families []corev1.IPFamily
		none     bool   // headless: clusterIPs [None]
		err      string // refused with this
	}
	clusters := []struct {
		name   string
		ranges []string
	}{
		{"dual-stack", []string{dsV4, dsV6}},
		{"dual-stack-v6-primary", []string{dsV6, dsV4}},
		{"ipv4", []string{dsV4}},
		{"ipv6", []string{dsV6}},
	}
	notDual := `spec.ipFamilyPolicy: Invalid value: "RequireDualStack": this cluster is not configured for dual-stack services`
	scenarios := []struct {
		name string
		edit func(*corev1.Service)
		// want per cluster, in clusters' order
		want [4]want
	}{
		{"DS-09 no policy", func(s *corev1.Service) {},
			[4]want{{policy: single, families: []corev1.IPFamily{v4}}, {policy: single, families: []corev1.IPFamily{v6}}, {policy: single, families: []corev1.IPFamily{v4}}, {policy: single, families: []corev1.IPFamily{v6}}}},
		{"DS-09 no policy, no selector", func(s *corev1.Service) { s.Spec.Selector = nil },
			[4]want{{policy: single, families: []corev1.IPFamily{v4}}, {policy: single, families: []corev1.IPFamily{v6}}, {policy: single, families: []corev1.IPFamily{v4}}, {policy: single, families: []corev1.IPFamily{v6}}}},
		{"DS-09/DS-14 headless with selector", func(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone },
			[4]want{{policy: single, families: []corev1.IPFamily{v4}, none: true}, {policy: single, families: []corev1.IPFamily{v6}, none: true}, {policy: single, families: []corev1.IPFamily{v4}, none: true}, {policy: single, families: []corev1.IPFamily{v6}, none: true}}},
		{"DS-10 PreferDualStack", func(s *corev1.Service) { s.Spec.IPFamilyPolicy = &prefer },
			[4]want{{policy: prefer, families: []corev1.IPFamily{v4, v6}}, {policy: prefer, families: []corev1.IPFamily{v6, v4}}, {policy: prefer, families: []corev1.IPFamily{v4}}, {policy: prefer, families: []corev1.IPFamily{v6}}}},
		{"DS-11 RequireDualStack", func(s *corev1.Service) { s.Spec.IPFamilyPolicy = &require },
			[4]want{{policy: require, families: []corev1.IPFamily{v4, v6}}, {policy: require, families: []corev1.IPFamily{v6, v4}}, {err: notDual}, {err: notDual}}},
		{"DS-12 [IPv6,IPv4] PreferDualStack", func(s *corev1.Service) {
			s.Spec.IPFamilyPolicy, s.Spec.IPFamilies = &prefer, []corev1.IPFamily{v6, v4}
		}, [4]want{{policy: prefer, families: []corev1.IPFamily{v6, v4}}, {policy: prefer, families: []corev1.IPFamily{v6, v4}},
			{err: `spec.ipFamilies[0]: Invalid value: "IPv6": not configured on this cluster`},
			{err: `spec.ipFamilies[1]: Invalid value: "IPv4": not configured on this cluster`}}},
		{"DS-07 [IPv4] SingleStack", func(s *corev1.Service) {
			s.Spec.IPFamilyPolicy, s.Spec.IPFamilies = &single, []corev1.IPFamily{v4}
		}, [4]want{{policy: single, families: []corev1.IPFamily{v4}}, {policy: single, families: []corev1.IPFamily{v4}}, {policy: single, families: []corev1.IPFamily{v4}},
			{err: `spec.ipFamilies[0]: Invalid value: "IPv4": not configured on this cluster`}}},
		{"DS-07 two families SingleStack", func(s *corev1.Service) {
			s.Spec.IPFamilyPolicy, s.Spec.IPFamilies = &single, []corev1.IPFamily{v4, v6}
		}, [4]want{
			{err: `spec.ipFamilyPolicy: Invalid value: "SingleStack": must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified`},
			{err: `must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified`},
			{err: `must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified`},
			{err: `must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified`}}},
		{"DS-07 duplicate family", func(s *corev1.Service) {
			s.Spec.IPFamilyPolicy, s.Spec.IPFamilies = &prefer, []corev1.IPFamily{v4, v4}
		}, [4]want{{err: `spec.ipFamilies[1]: Duplicate value: "IPv4"`}, {err: `spec.ipFamilies[1]: Duplicate value: "IPv4"`}, {err: `spec.ipFamilies[1]: Duplicate value: "IPv4"`}, {err: `spec.ipFamilies[1]: Duplicate value: "IPv4"`}}},
		{"DS-17 headless without selector", func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.Selector = corev1.ClusterIPNone, nil },
			[4]want{{policy: require, families: []corev1.IPFamily{v4, v6}, none: true}, {policy: require, families: []corev1.IPFamily{v6, v4}, none: true}, {policy: require, families: []corev1.IPFamily{v4, v6}, none: true}, {policy: require, families: []corev1.IPFamily{v6, v4}, none: true}}},
		{"DS-18 LoadBalancer RequireDualStack", func(s *corev1.Service) {
			s.Spec.Type, s.Spec.IPFamilyPolicy = corev1.ServiceTypeLoadBalancer, &require
		}, [4]want{{policy: require, families: []corev1.IPFamily{v4, v6}}, {policy: require, families: []corev1.IPFamily{v6, v4}}, {err: notDual}, {err: notDual}}},
		{"DS-18 NodePort PreferDualStack", func(s *corev1.Service) {
			s.Spec.Type, s.Spec.IPFamilyPolicy = corev1.ServiceTypeNodePort, &prefer
		}, [4]want{{policy: prefer, families: []corev1.IPFamily{v4, v6}}, {policy: prefer, families: []corev1.IPFamily{v6, v4}}, {policy: prefer, families: []corev1.IPFamily{v4}}, {policy: prefer, families: []corev1.IPFamily{v6}}}},
		{"two IPs of one family", func(s *corev1.Service) {
			s.Spec.IPFamilyPolicy, s.Spec.ClusterIP, s.Spec.ClusterIPs = &prefer, "10.96.0.7", []string{"10.96.0.7", "10.96.0.8"}
		}, [4]want{{err: `spec.clusterIPs: Invalid value: ["10.96.0.7","10.96.0.8"]: may specify no more than one IP for each IP family`},
			{err: "may specify no more than one IP for each IP family"}, {err: "may specify no more than one IP for each IP family"}, {err: "may specify no more than one IP for each IP family"}}},
		{"IP against its family", func(s *corev1.Service) {
			s.Spec.IPFamilies, s.Spec.ClusterIP, s.Spec.ClusterIPs = []corev1.IPFamily{v6}, "10.96.0.7", []string{"10.96.0.7"}
		}, [4]want{{err: "spec.clusterIPs[0]: Invalid value: \"10.96.0.7\": expected an IPv6 value as indicated by `ipFamilies[0]`"},
			{err: "expected an IPv6 value as indicated by `ipFamilies[0]`"}, {err: "expected an IPv6 value as indicated by `ipFamilies[0]`"}, {err: "expected an IPv6 value as indicated by `ipFamilies[0]`"}}},
		{"requested IPs of both families", func(s *corev1.Service) {
			s.Spec.IPFamilyPolicy, s.Spec.ClusterIP, s.Spec.ClusterIPs = &require, "10.96.0.9", []string{"10.96.0.9", "fd00:96::9"}
		}, [4]want{{policy: require, families: []corev1.IPFamily{v4, v6}}, {policy: require, families: []corev1.IPFamily{v4, v6}},
			{err: `spec.clusterIPs[1]: Invalid value: ["10.96.0.9","fd00:96::9"]: IPv6 is not configured on this cluster`},
			{err: `spec.clusterIPs[0]: Invalid value: ["10.96.0.9","fd00:96::9"]: IPv4 is not configured on this cluster`}}},
		{"requested IP outside the range", func(s *corev1.Service) {
			s.Spec.IPFamilyPolicy, s.Spec.ClusterIP, s.Spec.ClusterIPs = &prefer, "fd00:97::1", []string{"fd00:97::1"}
		}, [4]want{{err: `spec.clusterIPs[0]: Invalid value: "fd00:97::1": failed to allocate IP fd00:97::1: the provided network does not match the current range`},
			{err: "failed to allocate IP fd00:97::1: the provided network does not match the current range"},
			{err: `spec.clusterIPs[0]: Invalid value: ["fd00:97::1"]: IPv6 is not configured on this cluster`},
			{err: "failed to allocate IP fd00:97::1: the provided network does not match the current range"}}},
	}
	for ci, c := range clusters {
		t.Run(c.name, func(t *testing.T) {
			e := newServiceRangesEnv(t, openBadger(t), c.ranges...)
			svcs := e.cs.CoreV1().Services("default")
			for si, sc := range scenarios {
				svc := clusterIPService(fmt.Sprintf("s%d", si), "")
				svc.Spec.Selector = map[string]string{"app": "x"}
				sc.edit(svc)
				w := sc.want[ci]
				got, err := svcs.Create(e.ctx, svc, metav1.CreateOptions{})
				if w.err != "" {
					if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), w.err) {
						t.Errorf("%s: got %v, want %q", sc.name, err, w.err)
					}
					continue
				}
				if err != nil {
					t.Errorf("%s: %v", sc.name, err)
					continue
				}
				if got.Spec.IPFamilyPolicy == nil || *got.Spec.IPFamilyPolicy != w.policy {
					t.Errorf("%s: ipFamilyPolicy %v, want %s", sc.name, got.Spec.IPFamilyPolicy, w.policy)
				}
				if diff := cmp.Diff(w.families, got.Spec.IPFamilies); diff != "" {
					t.Errorf("%s: ipFamilies (-want +got):\n%s", sc.name, diff)
				}
				if w.none {
					if diff := cmp.Diff([]string{"None"}, got.Spec.ClusterIPs); diff != "" || got.Spec.ClusterIP != "None" {
						t.Errorf("%s: headless clusterIPs %v", sc.name, got.Spec.ClusterIPs)
					}
				} else {
					checkClusterIPs(t, e, c.ranges, got)
				}
				// What was created reads back the same.
				back, err := svcs.Get(e.ctx, got.Name, metav1.GetOptions{})
				if err != nil || !slices.Equal(back.Spec.ClusterIPs, got.Spec.ClusterIPs) || !slices.Equal(back.Spec.IPFamilies, got.Spec.IPFamilies) {
					t.Errorf("%s: read back %v %+v", sc.name, err, back.Spec)
				}
			}
			// Refused creates hold nothing: every IPAddress is a live
			// Service's.
			list, err := svcs.List(e.ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			held := 0
			for _, s := range list.Items {
				for _, ip := range s.Spec.ClusterIPs {
					if ip != corev1.ClusterIPNone {
						held++
					}
				}
			}
			if recs := e.ipAddresses(t); len(recs) != held {
				t.Errorf("%d IPAddresses for %d cluster IPs: %v", len(recs), held, recs)
			}
		})
	}
}

// TestDualStackServiceUpgradeDowngrade: SingleStack to PreferDualStack
// or RequireDualStack allocates the missing family (DS-15); back to
// SingleStack keeps the first cluster IP and gives the other back
// (DS-16); a dual-stack Service may not drop a family without
// SingleStack; on a single-stack cluster PreferDualStack stays single.
func TestDualStackServiceUpgradeDowngrade(t *testing.T) {
	e := newServiceRangesEnv(t, openBadger(t), dsV4, dsV6)
	svcs := e.cs.CoreV1().Services("default")
	for _, policy := range []corev1.IPFamilyPolicy{corev1.IPFamilyPolicyPreferDualStack, corev1.IPFamilyPolicyRequireDualStack} {
		name := "up-" + strings.ToLower(string(policy))
		svc, err := svcs.Create(e.ctx, clusterIPService(name, ""), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		first := svc.Spec.ClusterIP
		svc.Spec.IPFamilyPolicy = &policy
		up, err := svcs.Update(e.ctx, svc, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("%s: upgrade: %v", policy, err)
		}
		if len(up.Spec.ClusterIPs) != 2 || up.Spec.ClusterIPs[0] != first || up.Spec.ClusterIP != first ||
			!slices.Equal(up.Spec.IPFamilies, []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}) {
			t.Fatalf("%s: upgraded to %v %v", policy, up.Spec.ClusterIPs, up.Spec.IPFamilies)
		}
		checkClusterIPs(t, e, []string{dsV4, dsV6}, up)
		second := up.Spec.ClusterIPs[1]

		// Dropping the second IP needs SingleStack.
		drop := up.DeepCopy()
		drop.Spec.ClusterIPs, drop.Spec.IPFamilies = drop.Spec.ClusterIPs[:1], drop.Spec.IPFamilies[:1]
		if _, err := svcs.Update(e.ctx, drop, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) ||
			!strings.Contains(err.Error(), "must be 'SingleStack' to release the secondary cluster IP") {
			t.Errorf("%s: dropping the secondary IP: %v", policy, err)
		}

		// Downgrade: only the policy changes.
		down := up.DeepCopy()
		down.Spec.IPFamilyPolicy = ptrTo(corev1.IPFamilyPolicySingleStack)
		got, err := svcs.Update(e.ctx, down, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("%s: downgrade: %v", policy, err)
		}
		if diff := cmp.Diff([]string{first}, got.Spec.ClusterIPs); diff != "" || got.Spec.ClusterIP != first ||
			!slices.Equal(got.Spec.IPFamilies, []corev1.IPFamily{corev1.IPv4Protocol}) {
			t.Errorf("%s: downgraded to %v %v", policy, got.Spec.ClusterIPs, got.Spec.IPFamilies)
		}
		if recs := e.ipAddresses(t); recs[second] != "" || recs[first] == "" {
			t.Errorf("%s: after the downgrade %s should be free and %s held: %v", policy, second, first, recs)
		}
	}

	// An old client that PUTs without the dual-stack fields keeps them.
	dual := clusterIPService("keep", "")
	dual.Spec.IPFamilyPolicy = ptrTo(corev1.IPFamilyPolicyRequireDualStack)
	created, err := svcs.Create(e.ctx, dual, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old := created.DeepCopy()
	old.Spec.ClusterIP, old.Spec.ClusterIPs, old.Spec.IPFamilies, old.Spec.IPFamilyPolicy = "", nil, nil, nil
	old.Spec.Ports[0].Port = 81
	kept, err := svcs.Update(e.ctx, old, metav1.UpdateOptions{})
	if err != nil || !slices.Equal(kept.Spec.ClusterIPs, created.Spec.ClusterIPs) || *kept.Spec.IPFamilyPolicy != corev1.IPFamilyPolicyRequireDualStack {
		t.Errorf("update without the dual-stack fields: %v %+v", err, kept)
	}

	// Single-stack cluster: PreferDualStack on update stays single, and
	// RequireDualStack is refused.
	s := newServiceRangesEnv(t, openBadger(t), dsV6)
	ssvcs := s.cs.CoreV1().Services("default")
	one, err := ssvcs.Create(s.ctx, clusterIPService("one", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	one.Spec.IPFamilyPolicy = ptrTo(corev1.IPFamilyPolicyPreferDualStack)
	if got, err := ssvcs.Update(s.ctx, one, metav1.UpdateOptions{}); err != nil || len(got.Spec.ClusterIPs) != 1 || got.Spec.IPFamilies[0] != corev1.IPv6Protocol {
		t.Errorf("PreferDualStack on an IPv6 cluster: %v %+v", err, got)
	}
	one, _ = ssvcs.Get(s.ctx, "one", metav1.GetOptions{})
	one.Spec.IPFamilyPolicy = ptrTo(corev1.IPFamilyPolicyRequireDualStack)
	if _, err := ssvcs.Update(s.ctx, one, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) ||
		!strings.Contains(err.Error(), `spec.ipFamilyPolicy: Invalid value: "RequireDualStack": this cluster is not configured for dual-stack services`) {
		t.Errorf("RequireDualStack on an IPv6 cluster: %v", err)
	}
}

// TestDualStackAllocationsDoNotLeak: filling both ranges, deleting
// everything and filling them again works round after round, and creates
// that fail after taking one family's IP give it back.
func TestDualStackAllocationsDoNotLeak(t *testing.T) {
	// A /28 has 14 usable IPv4 addresses, a /124 15 IPv6 ones: 14
	// dual-stack Services fill the IPv4 range.
	e := newServiceRangesEnv(t, openBadger(t), "10.96.0.0/28", "fd00:96::/124")
	svcs := e.cs.CoreV1().Services("default")
	prefer := corev1.IPFamilyPolicyPreferDualStack
	for round := range 3 {
		var names []string
		for i := 0; ; i++ {
			svc := clusterIPService(fmt.Sprintf("r%d-%d", round, i), "")
			svc.Spec.IPFamilyPolicy = &prefer
			got, err := svcs.Create(e.ctx, svc, metav1.CreateOptions{})
			if err != nil {
				if !strings.Contains(err.Error(), "failed to allocate a serviceIP: range is full") {
					t.Fatalf("round %d: %v", round, err)
				}
				break
			}
			if len(got.Spec.ClusterIPs) != 2 {
				t.Fatalf("round %d: %v", round, got.Spec.ClusterIPs)
			}
			names = append(names, got.Name)
		}
		if len(names) != 14 {
			t.Fatalf("round %d: %d Services fit, want 14", round, len(names))
		}
		// The create that failed on IPv4 took nothing.
		if recs := e.ipAddresses(t); len(recs) != 28 {
			t.Fatalf("round %d: %d IPAddresses for 14 dual-stack Services", round, len(recs))
		}
		for _, n := range names {
			if err := svcs.Delete(e.ctx, n, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if recs := e.ipAddresses(t); len(recs) != 0 {
			t.Fatalf("round %d: deleted Services left %v", round, recs)
		}
	}

	// [IPv4, IPv6] where the IPv6 asked for is taken: the IPv4 address
	// taken first goes back.
	taken := clusterIPService("taken", "")
	taken.Spec.IPFamilies, taken.Spec.ClusterIP, taken.Spec.ClusterIPs = []corev1.IPFamily{corev1.IPv6Protocol}, "fd00:96::5", []string{"fd00:96::5"}
	if _, err := svcs.Create(e.ctx, taken, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	clash := clusterIPService("clash", "10.96.0.5")
	clash.Spec.IPFamilyPolicy, clash.Spec.ClusterIPs = ptrTo(corev1.IPFamilyPolicyRequireDualStack), []string{"10.96.0.5", "fd00:96::5"}
	if _, err := svcs.Create(e.ctx, clash, metav1.CreateOptions{}); !apierrors.IsInvalid(err) ||
		!strings.Contains(err.Error(), `spec.clusterIPs: Invalid value: ["10.96.0.5","fd00:96::5"]: failed to allocate IP fd00:96::5: provided IP is already allocated`) {
		t.Fatalf("taken IPv6: %v", err)
	}
	// A dual-stack NodePort Service whose node port is taken gives back
	// both its IPs.
	np := nodePortService("np", 30007)
	if _, err := svcs.Create(e.ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	np2 := nodePortService("np2", 30007)
	np2.Spec.IPFamilyPolicy = &prefer
	if _, err := svcs.Create(e.ctx, np2, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("taken node port: %v", err)
	}
	want := map[string]string{"fd00:96::5": "IPv6 default/taken"}
	npSvc, err := svcs.Get(e.ctx, "np", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want[npSvc.Spec.ClusterIP] = "IPv4 default/np"
	if diff := cmp.Diff(want, e.ipAddresses(t)); diff != "" {
		t.Errorf("IPAddresses after failed creates (-want +got):\n%s", diff)
	}
}

// TestDualStackServiceCIDRAndLegacyServices: the kubernetes ServiceCIDR
// shows both ranges, the kubernetes Service stays single-stack of the
// primary family, and a Service stored before the dual-stack fields
// reads with them (DS-13, DS-14).
func TestDualStackServiceCIDRAndLegacyServices(t *testing.T) {
	st := openBadger(t)
	res := newRegistry(builtinResources()).byGVR[gvr("", "v1", "services")]
	legacy := func(svc *corev1.Service) {
		t.Helper()
		svc.Namespace, svc.UID = "default", types.UID("uid-"+svc.Name)
		data, err := encodeForStore(res, svc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Create(t.Context(), res.key("default", svc.Name), data); err != nil {
			t.Fatal(err)
		}
	}
	old := clusterIPService("old", "10.96.0.123")
	old.Spec.Type = corev1.ServiceTypeClusterIP
	legacy(old)
	oldHeadless := clusterIPService("old-headless", corev1.ClusterIPNone)
	oldHeadless.Spec.Selector = map[string]string{"app": "x"}
	legacy(oldHeadless)
	oldNoSel := clusterIPService("old-nosel", corev1.ClusterIPNone)
	legacy(oldNoSel)

	s, err := New(Config{Store: st, ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix(dsV4), netip.MustParsePrefix(dsV6)},
		AdvertiseAddress: netip.MustParseAddr("127.0.0.1"), SecurePort: 6443})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	cs := kubernetes.NewForConfigOrDie(s.ClientConfig(&authn.User{Name: "test-admin", Groups: []string{authn.GroupMasters}}))
	ctx := t.Context()
	cidr, err := cs.NetworkingV1().ServiceCIDRs().Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{dsV4, dsV6}, cidr.Spec.CIDRs); diff != "" {
		t.Errorf("kubernetes ServiceCIDR (-want +got):\n%s", diff)
	}
	var k *corev1.Service
	for range 100 {
		if k, err = cs.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{}); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"10.96.0.1"}, k.Spec.ClusterIPs); diff != "" || *k.Spec.IPFamilyPolicy != corev1.IPFamilyPolicySingleStack || !slices.Equal(k.Spec.IPFamilies, []corev1.IPFamily{corev1.IPv4Protocol}) {
		t.Errorf("kubernetes Service: %v %v %v", k.Spec.ClusterIPs, *k.Spec.IPFamilyPolicy, k.Spec.IPFamilies)
	}

	list, err := cs.CoreV1().Services("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]corev1.ServiceSpec{}
	for _, s := range list.Items {
		got[s.Name] = s.Spec
	}
	for _, tc := range []struct {
		name     string
		ips      []string
		families []corev1.IPFamily
		policy   corev1.IPFamilyPolicy
	}{
		{"old", []string{"10.96.0.123"}, []corev1.IPFamily{corev1.IPv4Protocol}, corev1.IPFamilyPolicySingleStack},
		{"old-headless", []string{"None"}, []corev1.IPFamily{corev1.IPv4Protocol}, corev1.IPFamilyPolicySingleStack},
		{"old-nosel", []string{"None"}, []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}, corev1.IPFamilyPolicyRequireDualStack},
	} {
		spec := got[tc.name]
		if !slices.Equal(spec.ClusterIPs, tc.ips) || !slices.Equal(spec.IPFamilies, tc.families) || spec.IPFamilyPolicy == nil || *spec.IPFamilyPolicy != tc.policy {
			t.Errorf("%s reads as %v %v %v", tc.name, spec.ClusterIPs, spec.IPFamilies, spec.IPFamilyPolicy)
		}
		one, err := cs.CoreV1().Services("default").Get(ctx, tc.name, metav1.GetOptions{})
		if err != nil || !slices.Equal(one.Spec.IPFamilies, tc.families) {
			t.Errorf("get %s: %v %v", tc.name, err, one)
		}
	}
	// The legacy Service upgrades like any other (DS-15).
	up, _ := cs.CoreV1().Services("default").Get(ctx, "old", metav1.GetOptions{})
	up.Spec.IPFamilyPolicy = ptrTo(corev1.IPFamilyPolicyPreferDualStack)
	if up, err = cs.CoreV1().Services("default").Update(ctx, up, metav1.UpdateOptions{}); err != nil || len(up.Spec.ClusterIPs) != 2 || up.Spec.ClusterIP != "10.96.0.123" {
		t.Errorf("legacy upgrade: %v %+v", err, up)
	}
}

// TestSingleStackClusterRestartedDualStack: a server restarted with a
// second service range shows it in the kubernetes ServiceCIDR, keeps the
// Services it had, and upgrades them on request (DS-13, DS-15).
func TestSingleStackClusterRestartedDualStack(t *testing.T) {
	st := openBadger(t)
	before := newServiceRangesEnv(t, st, dsV4)
	old, err := before.cs.CoreV1().Services("default").Create(before.ctx, clusterIPService("old", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before.s.Shutdown()

	e := newServiceRangesEnv(t, st, dsV4, dsV6)
	cidr, err := e.cs.NetworkingV1().ServiceCIDRs().Get(e.ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{dsV4, dsV6}, cidr.Spec.CIDRs); diff != "" || len(cidr.Status.Conditions) != 1 {
		t.Errorf("kubernetes ServiceCIDR after the restart (-want +got):\n%s\n%+v", diff, cidr.Status)
	}
	svc, err := e.cs.CoreV1().Services("default").Get(e.ctx, "old", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(svc.Spec.ClusterIPs, old.Spec.ClusterIPs) || *svc.Spec.IPFamilyPolicy != corev1.IPFamilyPolicySingleStack {
		t.Errorf("old Service after the restart: %v %v", svc.Spec.ClusterIPs, *svc.Spec.IPFamilyPolicy)
	}
	svc.Spec.IPFamilyPolicy = ptrTo(corev1.IPFamilyPolicyRequireDualStack)
	up, err := e.cs.CoreV1().Services("default").Update(e.ctx, svc, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(up.Spec.ClusterIPs) != 2 || up.Spec.ClusterIP != old.Spec.ClusterIP {
		t.Errorf("upgraded: %v", up.Spec.ClusterIPs)
	}
	checkClusterIPs(t, e, []string{dsV4, dsV6}, up)
}

// TestDualStackServiceUpdatesRefused: a secondary cluster IP and the
// families may not change once set, with kube-apiserver's messages.
func TestDualStackServiceUpdatesRefused(t *testing.T) {
	e := newServiceRangesEnv(t, openBadger(t), dsV4, dsV6)
	svcs := e.cs.CoreV1().Services("default")
	dual := clusterIPService("dual", "")
	dual.Spec.IPFamilyPolicy = ptrTo(corev1.IPFamilyPolicyRequireDualStack)
	created, err := svcs.Create(e.ctx, dual, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(*corev1.Service)
		want string
	}{
		{"secondary IP", func(s *corev1.Service) { s.Spec.ClusterIPs[1] = "fd00:96::77" }, `spec.clusterIPs[1]: Invalid value: ["` + created.Spec.ClusterIP + `","fd00:96::77"]: may not change once set`},
		{"families swapped", func(s *corev1.Service) {
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
		}, "expected an IPv6 value as indicated by `ipFamilies[0]`"},
	} {
		svc := created.DeepCopy()
		tc.edit(svc)
		if _, err := svcs.Update(e.ctx, svc, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	// Nothing was taken by the refused updates.
	want := map[string]string{created.Spec.ClusterIPs[0]: "IPv4 default/dual", created.Spec.ClusterIPs[1]: "IPv6 default/dual"}
	if diff := cmp.Diff(want, e.ipAddresses(t)); diff != "" {
		t.Errorf("IPAddresses (-want +got):\n%s", diff)
	}
}
