package apiserver

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/store"
	"bonsai.dev/bonsai/testsupport/testenv"
)

// allocEnv is an API server over a badger store with a small service
// range and node port range, and no kubernetes Service, so that every
// address of the range is the test's.
type allocEnv struct {
	s   *Server
	st  store.Store
	cs  *kubernetes.Clientset
	ctx context.Context
}

func newAllocEnv(t *testing.T, cidr string, ports PortRange) *allocEnv {
	t.Helper()
	return newAllocEnvOn(t, openBadger(t), cidr, ports)
}

func openBadger(t *testing.T) store.Store {
	t.Helper()
	st, err := store.OpenBadger(store.BadgerOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// allocBackends are the stores the concurrency tests run on: atomicity is
// the store's create-if-absent, which both backends must give.
var allocBackends = []struct {
	name string
	open func(*testing.T) store.Store
}{
	{"badger", openBadger},
	{"etcd", func(t *testing.T) store.Store {
		e := testenv.EtcdForTest(t)
		st, err := store.OpenEtcd(store.EtcdOptions{Endpoint: e.Endpoint})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}},
}

// newAllocEnvOn starts another server over st, as a restart or a second
// server on one etcd would.
func newAllocEnvOn(t *testing.T, st store.Store, cidr string, ports PortRange) *allocEnv {
	t.Helper()
	s, err := New(Config{Store: st, ServiceCIDR: netip.MustParsePrefix(cidr), NodePortRange: ports})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	cs := kubernetes.NewForConfigOrDie(s.ClientConfig(&authn.User{Name: "test-admin", Groups: []string{authn.GroupMasters}}))
	return &allocEnv{s: s, st: st, cs: cs, ctx: ctx}
}

func clusterIPService(name, ip string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.ServiceSpec{ClusterIP: ip, Ports: []corev1.ServicePort{{Port: 80}}},
	}
}

func nodePortService(name string, nodePort int32) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 80, NodePort: nodePort}}},
	}
}

// ipRecords maps each recorded cluster IP to the Service its IPAddress
// names, checking the allocator's labels.
func (e *allocEnv) ipRecords(t *testing.T) map[string]string {
	t.Helper()
	list, err := e.cs.NetworkingV1().IPAddresses().List(e.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, a := range list.Items {
		if a.Labels[networkingv1.LabelManagedBy] != "ipallocator.k8s.io" || a.Labels[networkingv1.LabelIPAddressFamily] != "IPv4" {
			t.Errorf("IPAddress %s labels %v", a.Name, a.Labels)
		}
		r := a.Spec.ParentRef
		if r == nil || r.Resource != "services" || r.Group != "" {
			t.Fatalf("IPAddress %s parent %+v", a.Name, r)
		}
		out[a.Name] = r.Namespace + "/" + r.Name
	}
	return out
}

// portRecords maps each recorded node port to the Service holding it.
func (e *allocEnv) portRecords(t *testing.T) map[int32]string {
	t.Helper()
	ports, err := e.s.allocatedNodePorts(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]string{}
	for p := range ports {
		rec, _, err := e.s.readNodePort(e.ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		out[p] = rec.Namespace + "/" + rec.Name
	}
	return out
}

// createConcurrently creates the services at once and returns those
// created and the errors of the others.
func (e *allocEnv) createConcurrently(svcs []*corev1.Service) ([]*corev1.Service, []error) {
	var mu sync.Mutex
	var created []*corev1.Service
	var errs []error
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, svc := range svcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			got, err := e.cs.CoreV1().Services("default").Create(e.ctx, svc, metav1.CreateOptions{})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			created = append(created, got)
		}()
	}
	close(start)
	wg.Wait()
	return created, errs
}

func TestClusterIPConcurrentCreatesNeverShareAnIP(t *testing.T) {
	for _, b := range allocBackends {
		t.Run(b.name, func(t *testing.T) {
			testClusterIPConcurrentCreates(t, newAllocEnvOn(t, b.open(t), "10.96.0.0/27", PortRange{}))
		})
	}
}

func testClusterIPConcurrentCreates(t *testing.T, e *allocEnv) {
	var svcs []*corev1.Service
	for i := range 64 {
		svcs = append(svcs, clusterIPService(fmt.Sprintf("s%d", i), ""))
	}
	created, errs := e.createConcurrently(svcs)
	// A /27 has 32 addresses: all but the network and broadcast ones.
	if len(created) != 30 {
		t.Fatalf("%d services created, want 30; errors: %v", len(created), errs)
	}
	for _, err := range errs {
		if !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), "failed to allocate a serviceIP: range is full") {
			t.Errorf("error when the range is full: %v", err)
		}
	}
	want := map[string]string{}
	for _, svc := range created {
		if prev, dup := want[svc.Spec.ClusterIP]; dup {
			t.Errorf("%s given to %s and %s", svc.Spec.ClusterIP, prev, svc.Name)
		}
		want[svc.Spec.ClusterIP] = "default/" + svc.Name
		if a := netip.MustParseAddr(svc.Spec.ClusterIP); a.String() == "10.96.0.0" || a.String() == "10.96.0.31" || !netip.MustParsePrefix("10.96.0.0/27").Contains(a) {
			t.Errorf("%s got %s", svc.Name, a)
		}
	}
	if diff := cmp.Diff(want, e.ipRecords(t)); diff != "" {
		t.Errorf("IPAddress records differ from the Services (-services +records):\n%s", diff)
	}
}

func TestRequestedClusterIPTaken(t *testing.T) {
	e := newAllocEnv(t, "10.96.0.0/24", PortRange{})
	svcs := e.cs.CoreV1().Services("default")
	if _, err := svcs.Create(e.ctx, clusterIPService("a", "10.96.0.10"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := svcs.Create(e.ctx, clusterIPService("b", "10.96.0.10"), metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.clusterIPs: Invalid value: [\"10.96.0.10\"]: failed to allocate IP 10.96.0.10: provided IP is already allocated") {
		t.Fatalf("taken IP: %v", err)
	}
	if diff := cmp.Diff(map[string]string{"10.96.0.10": "default/a"}, e.ipRecords(t)); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	// A dry run reports the same and records nothing.
	_, err = svcs.Create(e.ctx, clusterIPService("c", "10.96.0.10"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsInvalid(err) {
		t.Fatalf("dry run of a taken IP: %v", err)
	}
	dry, err := svcs.Create(e.ctx, clusterIPService("c", ""), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil || dry.Spec.ClusterIP == "" {
		t.Fatalf("dry run: %v %+v", err, dry)
	}
	if got := e.ipRecords(t); len(got) != 1 {
		t.Errorf("a dry run recorded an IP: %v", got)
	}
}

func TestNodePortConcurrentCreatesGetDistinctPorts(t *testing.T) {
	for _, b := range allocBackends {
		t.Run(b.name, func(t *testing.T) {
			testNodePortConcurrentCreates(t, newAllocEnvOn(t, b.open(t), "10.96.0.0/24", PortRange{Base: 30000, Max: 30009}))
		})
	}
}

func testNodePortConcurrentCreates(t *testing.T, e *allocEnv) {
	var svcs []*corev1.Service
	for i := range 24 {
		svcs = append(svcs, nodePortService(fmt.Sprintf("np%d", i), 0))
	}
	created, errs := e.createConcurrently(svcs)
	if len(created) != 10 {
		t.Fatalf("%d services created, want 10; errors: %v", len(created), errs)
	}
	for _, err := range errs {
		if !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), "failed to allocate a nodePort: range is full") {
			t.Errorf("error when the range is full: %v", err)
		}
	}
	wantPorts, wantIPs := map[int32]string{}, map[string]string{}
	for _, svc := range created {
		p := svc.Spec.Ports[0].NodePort
		if prev, dup := wantPorts[p]; dup {
			t.Errorf("port %d given to %s and %s", p, prev, svc.Name)
		}
		wantPorts[p] = "default/" + svc.Name
		wantIPs[svc.Spec.ClusterIP] = "default/" + svc.Name
	}
	if diff := cmp.Diff(wantPorts, e.portRecords(t)); diff != "" {
		t.Errorf("port records (-services +records):\n%s", diff)
	}
	// The refused creates gave back the cluster IPs they had taken.
	if diff := cmp.Diff(wantIPs, e.ipRecords(t)); diff != "" {
		t.Errorf("IP records (-services +records):\n%s", diff)
	}
}

func TestNodePortRequests(t *testing.T) {
	e := newAllocEnv(t, "10.96.0.0/24", PortRange{Base: 30000, Max: 30009})
	svcs := e.cs.CoreV1().Services("default")
	if _, err := svcs.Create(e.ctx, nodePortService("a", 30005), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		port int32
		want string
	}{
		{"taken", 30005, "spec.ports[0].nodePort: Invalid value: 30005: provided port is already allocated"},
		{"outside", 31000, "spec.ports[0].nodePort: Invalid value: 31000: provided port is not in the valid range. The range of valid ports is 30000-30009"},
	} {
		_, err := svcs.Create(e.ctx, nodePortService("b-"+tc.name, tc.port), metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	// One port number over two protocols shares one node port.
	multi := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "dns"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{
			{Name: "udp", Port: 53, Protocol: corev1.ProtocolUDP}, {Name: "tcp", Port: 53, Protocol: corev1.ProtocolTCP},
		}},
	}
	got, err := svcs.Create(e.ctx, multi, metav1.CreateOptions{})
	if err != nil || got.Spec.Ports[0].NodePort != got.Spec.Ports[1].NodePort {
		t.Fatalf("one port, two protocols: %v %+v", err, got)
	}
	want := map[int32]string{30005: "default/a", got.Spec.Ports[0].NodePort: "default/dns"}
	if diff := cmp.Diff(want, e.portRecords(t)); diff != "" {
		t.Errorf("port records (-want +got):\n%s", diff)
	}
}

func TestServiceAllocationsReleasedAndReused(t *testing.T) {
	e := newAllocEnv(t, "10.96.0.0/24", PortRange{Base: 30000, Max: 30009})
	svcs := e.cs.CoreV1().Services("default")
	svc := nodePortService("a", 30001)
	svc.Spec.ClusterIP = "10.96.0.20"
	if _, err := svcs.Create(e.ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Deleting gives both back: another Service takes them.
	if err := svcs.Delete(e.ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	svc.Name = "b"
	b, err := svcs.Create(e.ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("re-use after delete: %v", err)
	}
	// NodePort to ClusterIP gives the port back; to ExternalName the IP.
	b.Spec.Type = corev1.ServiceTypeClusterIP
	b.Spec.Ports[0].NodePort = 0
	if b, err = svcs.Update(e.ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := e.portRecords(t); len(got) != 0 {
		t.Errorf("port kept after NodePort→ClusterIP: %v", got)
	}
	b.Spec.Type, b.Spec.ExternalName = corev1.ServiceTypeExternalName, "example.com"
	if b, err = svcs.Update(e.ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if b.Spec.ClusterIP != "" || len(b.Spec.ClusterIPs) != 0 {
		t.Errorf("ExternalName kept its IP: %+v", b.Spec)
	}
	if got := e.ipRecords(t); len(got) != 0 {
		t.Errorf("IP kept after →ExternalName: %v", got)
	}
	// Back to ClusterIP: a new IP is taken and recorded.
	b.Spec.Type, b.Spec.ExternalName = corev1.ServiceTypeClusterIP, ""
	if b, err = svcs.Update(e.ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{b.Spec.ClusterIP: "default/b"}, e.ipRecords(t)); diff != "" {
		t.Errorf("IP records (-want +got):\n%s", diff)
	}
	// The cluster IP never changes while the Service exists.
	b.Spec.ClusterIP, b.Spec.ClusterIPs = "10.96.0.99", nil
	if _, err := svcs.Update(e.ctx, b, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "may not change once set") {
		t.Fatalf("cluster IP change: %v", err)
	}
	if got := e.ipRecords(t); len(got) != 1 || got["10.96.0.99"] != "" {
		t.Errorf("a refused IP change left a record: %v", got)
	}
}

func TestServiceAllocationsGivenBackWhenTheWriteFails(t *testing.T) {
	e := newAllocEnv(t, "10.96.0.0/24", PortRange{Base: 30000, Max: 30009})
	svcs := e.cs.CoreV1().Services("default")
	// Metadata validation runs after allocation.
	bad := nodePortService("bad", 30003)
	bad.Spec.ClusterIP = "10.96.0.30"
	bad.Labels = map[string]string{"x": "not a valid label value"}
	if _, err := svcs.Create(e.ctx, bad, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("invalid label: %v", err)
	}
	// The store refuses a second Service of the same name.
	if _, err := svcs.Create(e.ctx, nodePortService("a", 30004), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := svcs.Create(e.ctx, nodePortService("a", 0), metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("second create: %v", err)
	}
	a, err := svcs.Get(e.ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{a.Spec.ClusterIP: "default/a"}, e.ipRecords(t)); diff != "" {
		t.Errorf("IP records (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[int32]string{a.Spec.Ports[0].NodePort: "default/a"}, e.portRecords(t)); diff != "" {
		t.Errorf("port records (-want +got):\n%s", diff)
	}
	// What the failed create asked for is free.
	bad.Labels = nil
	if _, err := svcs.Create(e.ctx, bad, metav1.CreateOptions{}); err != nil {
		t.Fatalf("IP and port of a refused create: %v", err)
	}
}

func TestServiceAllocationsSeenByASecondServer(t *testing.T) {
	for _, b := range allocBackends {
		t.Run(b.name, func(t *testing.T) {
			testSecondServer(t, newAllocEnvOn(t, b.open(t), "10.96.0.0/28", PortRange{Base: 30000, Max: 30003}))
		})
	}
}

func testSecondServer(t *testing.T, e *allocEnv) {
	var svcs []*corev1.Service
	for i := range 7 {
		svcs = append(svcs, clusterIPService(fmt.Sprintf("first%d", i), ""))
	}
	svcs = append(svcs, nodePortService("np", 30001))
	if _, errs := e.createConcurrently(svcs); len(errs) > 0 {
		t.Fatal(errs)
	}
	// A second server over the same store (a restart, or two servers on
	// one etcd) sees what the first took, and races it for the rest.
	e2 := newAllocEnvOn(t, e.st, "10.96.0.0/28", PortRange{Base: 30000, Max: 30003})
	if _, err := e2.cs.CoreV1().Services("default").Create(e.ctx, nodePortService("np2", 30001), metav1.CreateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "provided port is already allocated") {
		t.Fatalf("port taken on the first server: %v", err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var created []*corev1.Service
	for i, env := range []*allocEnv{e, e2} {
		for j := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				svc := clusterIPService(fmt.Sprintf("second%d-%d", i, j), "")
				if got, err := env.cs.CoreV1().Services("default").Create(env.ctx, svc, metav1.CreateOptions{}); err == nil {
					mu.Lock()
					created = append(created, got)
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	// A /28 has 14 usable addresses; 8 are taken.
	if len(created) != 6 {
		t.Errorf("%d created, want 6", len(created))
	}
	all, err := e2.cs.CoreV1().Services("default").List(e.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ips []string
	seen := map[string]string{}
	for _, svc := range all.Items {
		if prev, dup := seen[svc.Spec.ClusterIP]; dup {
			t.Errorf("%s given to %s and %s", svc.Spec.ClusterIP, prev, svc.Name)
		}
		seen[svc.Spec.ClusterIP] = svc.Name
		ips = append(ips, svc.Spec.ClusterIP)
	}
	sort.Strings(ips)
	if len(ips) != 14 {
		t.Errorf("cluster IPs %v, want the 14 of the range", ips)
	}
	if _, err := e2.cs.CoreV1().Services("default").Create(e.ctx, nodePortService("late", 0), metav1.CreateOptions{}); !apierrors.IsInternalError(err) {
		t.Errorf("full range on the second server: %v", err)
	}
}

func TestServiceIPFamiliesAndHeadless(t *testing.T) {
	e := newAllocEnv(t, "10.96.0.0/24", PortRange{})
	svcs := e.cs.CoreV1().Services("default")
	headless := clusterIPService("headless", corev1.ClusterIPNone)
	headless.Spec.Selector = map[string]string{"app": "x"}
	got, err := svcs.Create(e.ctx, headless, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"None"}, got.Spec.ClusterIPs); diff != "" || *got.Spec.IPFamilyPolicy != corev1.IPFamilyPolicySingleStack {
		t.Errorf("headless: clusterIPs %s policy %v", diff, *got.Spec.IPFamilyPolicy)
	}
	if recs := e.ipRecords(t); len(recs) != 0 {
		t.Errorf("headless Service recorded IPs: %v", recs)
	}
	// Headless without a selector defaults to RequireDualStack, the
	// cluster's family first.
	noSel, err := svcs.Create(e.ctx, clusterIPService("nosel", corev1.ClusterIPNone), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]corev1.IPFamily{"IPv4", "IPv6"}, noSel.Spec.IPFamilies); diff != "" || *noSel.Spec.IPFamilyPolicy != corev1.IPFamilyPolicyRequireDualStack {
		t.Errorf("headless without selector: families %s policy %v", diff, *noSel.Spec.IPFamilyPolicy)
	}
	for _, tc := range []struct {
		name string
		edit func(*corev1.Service)
		want string
	}{
		{"require-dual", func(s *corev1.Service) { s.Spec.IPFamilyPolicy = ptrTo(corev1.IPFamilyPolicyRequireDualStack) },
			`spec.ipFamilyPolicy: Invalid value: "RequireDualStack": this cluster is not configured for dual-stack services`},
		{"v6", func(s *corev1.Service) { s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol} },
			`spec.ipFamilies[0]: Invalid value: "IPv6": not configured on this cluster`},
		{"two-ips", func(s *corev1.Service) {
			s.Spec.IPFamilyPolicy = ptrTo(corev1.IPFamilyPolicyPreferDualStack)
			s.Spec.ClusterIPs = []string{"10.96.0.7", "fd00::7"}
		}, `spec.clusterIPs[1]: Invalid value: ["10.96.0.7","fd00::7"]: IPv6 is not configured on this cluster`},
		{"mismatch", func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.96.0.7", []string{"10.96.0.8"} },
			"first value must match `clusterIP`"},
		{"single-two", func(s *corev1.Service) {
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
		},
			`must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified`},
	} {
		svc := clusterIPService(tc.name, "")
		tc.edit(svc)
		if _, err := svcs.Create(e.ctx, svc, metav1.CreateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	if recs := e.ipRecords(t); len(recs) != 0 {
		t.Errorf("refused Services recorded IPs: %v", recs)
	}
	// PreferDualStack on a single-stack cluster gets the one family.
	prefer := clusterIPService("prefer", "")
	prefer.Spec.IPFamilyPolicy = ptrTo(corev1.IPFamilyPolicyPreferDualStack)
	if got, err := svcs.Create(e.ctx, prefer, metav1.CreateOptions{}); err != nil || len(got.Spec.ClusterIPs) != 1 || len(got.Spec.IPFamilies) != 1 {
		t.Errorf("PreferDualStack: %v %+v", err, got)
	}
	// ClientIP affinity defaults its timeout to three hours.
	aff := clusterIPService("affinity", "")
	aff.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	if got, err := svcs.Create(e.ctx, aff, metav1.CreateOptions{}); err != nil || *got.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds != 10800 {
		t.Errorf("ClientIP affinity: %v %+v", err, got)
	}
	long := aff.DeepCopy()
	long.Name, long.Spec.SessionAffinityConfig = "long", &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptrTo[int32](86401)}}
	if _, err := svcs.Create(e.ctx, long, metav1.CreateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.sessionAffinityConfig.clientIP.timeoutSeconds: Invalid value: 86401: must be greater than 0 and less than 86400") {
		t.Errorf("affinity over a day: %v", err)
	}
	none := clusterIPService("none", "")
	none.Spec.SessionAffinityConfig = long.Spec.SessionAffinityConfig
	if _, err := svcs.Create(e.ctx, none, metav1.CreateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "must not be set when session affinity is None") {
		t.Errorf("affinity config without affinity: %v", err)
	}
	// Several ports must all be named.
	multi := clusterIPService("multi", "")
	multi.Spec.Ports = append(multi.Spec.Ports, corev1.ServicePort{Port: 81})
	if _, err := svcs.Create(e.ctx, multi, metav1.CreateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.ports[0].name: Required value") {
		t.Errorf("unnamed ports: %v", err)
	}
}

func TestServiceCIDRAndIPAddressesServed(t *testing.T) {
	e := newAllocEnv(t, "10.96.0.0/24", PortRange{})
	cidr, err := e.cs.NetworkingV1().ServiceCIDRs().Get(e.ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"10.96.0.0/24"}, cidr.Spec.CIDRs); diff != "" || len(cidr.Status.Conditions) != 1 || cidr.Status.Conditions[0].Type != "Ready" || cidr.Status.Conditions[0].Status != "True" {
		t.Errorf("kubernetes ServiceCIDR: %s %+v", diff, cidr.Status)
	}
	cidr.Spec.CIDRs = []string{"10.97.0.0/24"}
	if _, err := e.cs.NetworkingV1().ServiceCIDRs().Update(e.ctx, cidr, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("ServiceCIDR change: %v", err)
	}
	if err := e.cs.NetworkingV1().ServiceCIDRs().Delete(e.ctx, "kubernetes", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("delete the default ServiceCIDR: %v", err)
	}
	extra := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "extra"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.98.0.0/24"}}}
	if _, err := e.cs.NetworkingV1().ServiceCIDRs().Create(e.ctx, extra, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("a ServiceCIDR the allocator would not use: %v", err)
	}
	res, err := e.cs.Discovery().ServerResourcesForGroupVersion("networking.k8s.io/v1")
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]string{}
	for _, r := range res.APIResources {
		found[r.Name] = r.Kind
	}
	if found["ipaddresses"] != "IPAddress" || found["servicecidrs"] != "ServiceCIDR" {
		t.Errorf("discovery: %v", found)
	}
	svc, err := e.cs.CoreV1().Services("default").Create(e.ctx, clusterIPService("a", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ip, err := e.cs.NetworkingV1().IPAddresses().Get(e.ctx, svc.Spec.ClusterIP, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := &networkingv1.ParentReference{Resource: "services", Namespace: "default", Name: "a"}
	if diff := cmp.Diff(want, ip.Spec.ParentRef); diff != "" {
		t.Errorf("parentRef (-want +got):\n%s", diff)
	}
	ip.Spec.ParentRef.Name = "b"
	if _, err := e.cs.NetworkingV1().IPAddresses().Update(e.ctx, ip, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("parentRef change: %v", err)
	}
}

func TestHealthCheckNodePort(t *testing.T) {
	e := newAllocEnv(t, "10.96.0.0/24", PortRange{Base: 30000, Max: 30009})
	svcs := e.cs.CoreV1().Services("default")
	lb := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "lb"},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Ports: []corev1.ServicePort{{Port: 80}},
		},
	}
	got, err := svcs.Create(e.ctx, lb, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hc, np := got.Spec.HealthCheckNodePort, got.Spec.Ports[0].NodePort
	if hc < 30000 || hc > 30009 || hc == np {
		t.Fatalf("health check port %d, node port %d", hc, np)
	}
	if diff := cmp.Diff(map[int32]string{hc: "default/lb", np: "default/lb"}, e.portRecords(t)); diff != "" {
		t.Errorf("port records (-want +got):\n%s", diff)
	}
	// Asking for a held one fails as upstream's allocator does.
	other := lb.DeepCopy()
	other.Name, other.Spec.HealthCheckNodePort = "other", hc
	if _, err := svcs.Create(e.ctx, other, metav1.CreateOptions{}); !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), fmt.Sprintf("failed to allocate requested HealthCheck NodePort %d: provided port is already allocated", hc)) {
		t.Errorf("taken health check port: %v", err)
	}
	// Only a Local LoadBalancer may have one.
	cip := clusterIPService("cip", "")
	cip.Spec.HealthCheckNodePort = 30008
	if _, err := svcs.Create(e.ctx, cip, metav1.CreateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'") {
		t.Errorf("health check port on a ClusterIP Service: %v", err)
	}
	// Leaving Local drops it and gives it back.
	got.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	if got, err = svcs.Update(e.ctx, got, metav1.UpdateOptions{}); err != nil || got.Spec.HealthCheckNodePort != 0 {
		t.Fatalf("Local→Cluster: %v %+v", err, got)
	}
	if diff := cmp.Diff(map[int32]string{np: "default/lb"}, e.portRecords(t)); diff != "" {
		t.Errorf("port records after Local→Cluster (-want +got):\n%s", diff)
	}
}

// TestServiceIPStaticSubrange: dynamic allocation leaves the lower band of
// the range to static assignment until the upper band is full.
func TestServiceIPStaticSubrange(t *testing.T) {
	for _, tc := range []struct {
		cidr string
		low  uint64
	}{
		{"10.96.0.0/28", 16}, {"10.96.0.0/24", 16}, {"10.96.0.0/21", 128}, {"10.96.0.0/20", 256}, {"10.96.0.0/16", 256},
	} {
		if got := newServiceIPRange(netip.MustParsePrefix(tc.cidr)).lowBand; got != tc.low {
			t.Errorf("%s: lower band %d, want %d", tc.cidr, got, tc.low)
		}
	}
	// A /27: offsets 16-30 first, then 1-15.
	e := newAllocEnv(t, "10.96.0.0/27", PortRange{})
	for i := range 20 {
		svc, err := e.cs.CoreV1().Services("default").Create(e.ctx, clusterIPService(fmt.Sprintf("s%d", i), ""), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		upper := netip.MustParseAddr(svc.Spec.ClusterIP).As4()[3] >= 16
		if want := i < 15; upper != want {
			t.Errorf("service %d got %s: in the upper band %v, want %v", i, svc.Spec.ClusterIP, upper, want)
		}
	}
}
