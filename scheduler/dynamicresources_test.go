package scheduler

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

const draDriver = "gpu.example.com"

func (a *testAPI) createClass(t testing.TB, name string, selectors ...string) {
	t.Helper()
	c := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, s := range selectors {
		c.Spec.Selectors = append(c.Spec.Selectors, resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{Expression: s}})
	}
	if _, err := a.cs.ResourceV1().DeviceClasses().Create(context.Background(), c, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createSlice publishes node's devices: name → attributes.
func (a *testAPI) createSlice(t testing.TB, node string, devices map[string]map[resourcev1.QualifiedName]resourcev1.DeviceAttribute) {
	t.Helper()
	s := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-" + draDriver}, Spec: resourcev1.ResourceSliceSpec{
		Driver: draDriver, NodeName: ptr.To(node), Pool: resourcev1.ResourcePool{Name: node, ResourceSliceCount: 1}}}
	for name, attrs := range devices {
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: name, Attributes: attrs})
	}
	if _, err := a.cs.ResourceV1().ResourceSlices().Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (a *testAPI) createClaim(t testing.TB, name string, reqs []resourcev1.DeviceRequest, cons ...resourcev1.DeviceConstraint) {
	t.Helper()
	c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: reqs, Constraints: cons}}}
	if _, err := a.cs.ResourceV1().ResourceClaims("default").Create(context.Background(), c, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func request(name string, mod func(*resourcev1.ExactDeviceRequest), selectors ...string) resourcev1.DeviceRequest {
	r := resourcev1.DeviceRequest{Name: name, Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: draDriver}}
	for _, s := range selectors {
		r.Exactly.Selectors = append(r.Exactly.Selectors, resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{Expression: s}})
	}
	if mod != nil {
		mod(r.Exactly)
	}
	return r
}

// withClaim makes a pod use claim.
func withClaim(claim string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: "dev", ResourceClaimName: ptr.To(claim)})
		p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "dev"}}
	}
}

func (a *testAPI) claim(t testing.TB, name string) *resourcev1.ResourceClaim {
	t.Helper()
	c, err := a.cs.ResourceV1().ResourceClaims("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func attrs(kv ...any) map[resourcev1.QualifiedName]resourcev1.DeviceAttribute {
	out := map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{}
	for i := 0; i < len(kv); i += 2 {
		switch v := kv[i+1].(type) {
		case string:
			out[resourcev1.QualifiedName(kv[i].(string))] = resourcev1.DeviceAttribute{StringValue: ptr.To(v)}
		case int:
			out[resourcev1.QualifiedName(kv[i].(string))] = resourcev1.DeviceAttribute{IntValue: ptr.To(int64(v))}
		}
	}
	return out
}

func allocatedDevices(c *resourcev1.ResourceClaim) []string {
	if c.Status.Allocation == nil {
		return nil
	}
	var out []string
	for _, r := range c.Status.Allocation.Devices.Results {
		out = append(out, r.Pool+"/"+r.Device)
	}
	return out
}

// A pod with a claim gets devices matching its class and claim
// selectors on a node that has them: the allocation and the pod's
// reservation are in the claim's status (with upstream's finalizer)
// before the pod is bound. A second pod for the only such device stays
// Pending with kube-scheduler's message.
func TestDynamicResourcesAllocate(t *testing.T) {
	a := newTestAPI(t)
	a.createNode(t, node("n0", nil))
	a.createNode(t, node("n1", nil))
	a.createClass(t, draDriver, `device.driver == "gpu.example.com"`)
	a.createSlice(t, "n0", map[string]map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"gpu-0": attrs("model", "a100")})
	a.createSlice(t, "n1", map[string]map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"gpu-0": attrs("model", "t4")})
	a.startScheduler(t, Options{})

	a100 := `device.attributes["gpu.example.com"].model == "a100"`
	a.createClaim(t, "first", []resourcev1.DeviceRequest{request("gpu", nil, a100)})
	a.createPod(t, pod("first", nil, withClaim("first")))
	pods := a.waitPods(t, "first scheduled", func(ps []corev1.Pod) bool { return len(ps) == 1 && ps[0].Spec.NodeName != "" })
	if pods[0].Spec.NodeName != "n0" {
		t.Fatalf("first went to %s, want n0 (the only a100)", pods[0].Spec.NodeName)
	}
	c := a.claim(t, "first")
	if got := allocatedDevices(c); len(got) != 1 || got[0] != "n0/gpu-0" || c.Status.Allocation.Devices.Results[0].Driver != draDriver {
		t.Errorf("allocation: %+v", c.Status.Allocation)
	}
	if len(c.Status.ReservedFor) != 1 || c.Status.ReservedFor[0].UID != pods[0].UID || c.Status.ReservedFor[0].Resource != "pods" {
		t.Errorf("reservedFor: %+v", c.Status.ReservedFor)
	}
	if len(c.Finalizers) != 1 || c.Finalizers[0] != resourcev1.Finalizer {
		t.Errorf("finalizers: %v", c.Finalizers)
	}
	if ns := c.Status.Allocation.NodeSelector; ns == nil || len(ns.NodeSelectorTerms) != 1 {
		t.Errorf("allocation's node selector: %+v", ns)
	}

	a.createClaim(t, "second", []resourcev1.DeviceRequest{request("gpu", nil, a100)})
	a.createPod(t, pod("second", nil, withClaim("second")))
	const msg = "0/2 nodes are available: 2 cannot allocate all claims."
	a.waitPods(t, "second unschedulable", func(ps []corev1.Pod) bool {
		for i := range ps {
			if ps[i].Name == "second" {
				return unschedulableWith(&ps[i], msg)
			}
		}
		return false
	})
	if c := a.claim(t, "second"); c.Status.Allocation != nil {
		t.Errorf("second claim allocated: %+v", c.Status.Allocation)
	}

	// Another pod naming the allocated claim shares it: it goes to the
	// claim's node and is reserved too.
	a.createPod(t, pod("sharer", nil, withClaim("first")))
	a.waitPods(t, "sharer scheduled on n0", func(ps []corev1.Pod) bool {
		for _, p := range ps {
			if p.Name == "sharer" {
				return p.Spec.NodeName == "n0"
			}
		}
		return false
	})
	if c := a.claim(t, "first"); len(c.Status.ReservedFor) != 2 {
		t.Errorf("shared claim reservations: %+v", c.Status.ReservedFor)
	}

	// A missing class is the pod's reason, word for word.
	a.createClaim(t, "classless", []resourcev1.DeviceRequest{{Name: "x", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "nosuch"}}})
	a.createPod(t, pod("classless", nil, withClaim("classless")))
	a.waitPods(t, "classless unschedulable", func(ps []corev1.Pod) bool {
		for i := range ps {
			if ps[i].Name == "classless" {
				return unschedulableWith(&ps[i], "0/2 nodes are available: request x: device class nosuch does not exist.")
			}
		}
		return false
	})
}

// allocationMode All takes every matching device of a node, and a
// matchAttribute constraint keeps two requests on devices that agree.
func TestDynamicResourcesAllAndMatchAttribute(t *testing.T) {
	a := newTestAPI(t)
	a.createNode(t, node("n0", nil))
	a.createClass(t, draDriver, `device.driver == "gpu.example.com"`)
	a.createSlice(t, "n0", map[string]map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
		"gpu-0": attrs("numa", 0, "kind", "gpu"), "gpu-1": attrs("numa", 1, "kind", "gpu"),
		"nic-0": attrs("numa", 1, "kind", "nic"), "nic-1": attrs("numa", 2, "kind", "nic"),
	})
	a.startScheduler(t, Options{})

	gpuSel, nicSel := `device.attributes["gpu.example.com"].kind == "gpu"`, `device.attributes["gpu.example.com"].kind == "nic"`
	a.createClaim(t, "pair", []resourcev1.DeviceRequest{request("gpu", nil, gpuSel), request("nic", nil, nicSel)},
		resourcev1.DeviceConstraint{MatchAttribute: ptr.To(resourcev1.FullyQualifiedName("gpu.example.com/numa"))})
	a.createPod(t, pod("pair", nil, withClaim("pair")))
	a.waitPods(t, "pair scheduled", func(ps []corev1.Pod) bool { return len(ps) == 1 && ps[0].Spec.NodeName == "n0" })
	got := allocatedDevices(a.claim(t, "pair"))
	if len(got) != 2 || got[0] != "n0/gpu-1" || got[1] != "n0/nic-0" {
		t.Errorf("matchAttribute numa: got %v, want [n0/gpu-1 n0/nic-0]", got)
	}

	// All of the remaining devices: gpu-0 and nic-1 (gpu-1 and nic-0
	// are taken).
	a.createClaim(t, "rest", []resourcev1.DeviceRequest{request("all", func(r *resourcev1.ExactDeviceRequest) {
		r.AllocationMode, r.Count = resourcev1.DeviceAllocationModeAll, 0
	})})
	a.createPod(t, pod("rest", nil, withClaim("rest")))
	const msg = "0/1 nodes are available: 1 cannot allocate all claims."
	// Upstream's All needs every matching device free: with two taken
	// the pod waits.
	a.waitPods(t, "rest unschedulable", func(ps []corev1.Pod) bool {
		for i := range ps {
			if ps[i].Name == "rest" {
				return unschedulableWith(&ps[i], msg)
			}
		}
		return false
	})
	// A count of 2 with a selector for the free ones fits.
	a.createClaim(t, "two", []resourcev1.DeviceRequest{request("two", func(r *resourcev1.ExactDeviceRequest) { r.Count = 2 },
		`device.attributes["gpu.example.com"].numa != 1`)})
	a.createPod(t, pod("two", nil, withClaim("two")))
	a.waitPods(t, "two scheduled", func(ps []corev1.Pod) bool {
		for _, p := range ps {
			if p.Name == "two" {
				return p.Spec.NodeName == "n0"
			}
		}
		return false
	})
	if got := allocatedDevices(a.claim(t, "two")); len(got) != 2 || got[0] == got[1] {
		t.Errorf("count 2: %v", got)
	}
}

// A burst of pods, each with its own claim for one device, onto 4 nodes
// with 2 devices each: exactly 8 bind, no device goes to two claims,
// and the rest wait with kube-scheduler's message.
func TestDynamicResourcesBurst(t *testing.T) {
	a := newTestAPI(t)
	for i := range 4 {
		n := fmt.Sprintf("n%d", i)
		a.createNode(t, node(n, nil))
		a.createSlice(t, n, map[string]map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"gpu-0": attrs("model", "a100"), "gpu-1": attrs("model", "a100")})
	}
	a.createClass(t, draDriver, `device.driver == "gpu.example.com"`)
	for i := range 20 {
		a.createClaim(t, fmt.Sprintf("c%02d", i), []resourcev1.DeviceRequest{request("gpu", nil)})
	}
	a.startScheduler(t, Options{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w * 5; i < w*5+5; i++ {
				a.createPod(t, pod(fmt.Sprintf("p%02d", i), nil, withClaim(fmt.Sprintf("c%02d", i))))
			}
		}()
	}
	wg.Wait()
	const msg = "0/4 nodes are available: 4 cannot allocate all claims."
	a.waitPods(t, "8 bound, 12 unschedulable", func(ps []corev1.Pod) bool {
		bound, waiting := 0, 0
		for i := range ps {
			switch {
			case ps[i].Spec.NodeName != "":
				bound++
			case unschedulableWith(&ps[i], msg):
				waiting++
			}
		}
		return bound == 8 && waiting == 12
	})
	time.Sleep(300 * time.Millisecond) // nothing more may bind
	list, err := a.cs.ResourceV1().ResourceClaims("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	owner := map[string]string{}
	allocated := 0
	for i := range list.Items {
		c := &list.Items[i]
		for _, d := range allocatedDevices(c) {
			if o, ok := owner[d]; ok {
				t.Errorf("device %s given to %s and %s", d, o, c.Name)
			}
			owner[d] = c.Name
		}
		if c.Status.Allocation != nil {
			allocated++
		}
	}
	if allocated != 8 || len(owner) != 8 {
		t.Errorf("%d claims allocated, %d devices; want 8 and 8", allocated, len(owner))
	}
	pods, _ := a.cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" {
			continue
		}
		c := a.claim(t, *p.Spec.ResourceClaims[0].ResourceClaimName)
		got := allocatedDevices(c)
		if len(got) != 1 || got[0][:2] != p.Spec.NodeName {
			t.Errorf("pod %s on %s has devices %v", p.Name, p.Spec.NodeName, got)
		}
	}
}

// A request with adminAccess (in a namespace labelled for it) gets a
// device another claim holds, and leaves it free for others, as
// upstream counts admin access.
func TestDynamicResourcesAdminAccess(t *testing.T) {
	a := newTestAPI(t)
	ctx := context.Background()
	a.createNode(t, node("n0", nil))
	a.createClass(t, draDriver, `device.driver == "gpu.example.com"`)
	a.createSlice(t, "n0", map[string]map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"gpu-0": attrs("model", "a100")})
	if _, err := a.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ops",
		Labels: map[string]string{"resource.kubernetes.io/admin-access": "true"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.cs.CoreV1().ServiceAccounts("ops").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.startScheduler(t, Options{})
	a.createClaim(t, "user", []resourcev1.DeviceRequest{request("gpu", nil)})
	a.createPod(t, pod("user", nil, withClaim("user")))
	a.waitPods(t, "user scheduled", func(ps []corev1.Pod) bool { return len(ps) == 1 && ps[0].Spec.NodeName == "n0" })

	admin := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "monitor", Namespace: "ops"}, Spec: resourcev1.ResourceClaimSpec{
		Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{request("gpu", func(r *resourcev1.ExactDeviceRequest) { r.AdminAccess = ptr.To(true) })}}}}
	if _, err := a.cs.ResourceV1().ResourceClaims("ops").Create(ctx, admin, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := pod("monitor", nil, withClaim("monitor"))
	p.Namespace = "ops"
	a.createPod(t, p)
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := a.cs.CoreV1().Pods("ops").Get(ctx, "monitor", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.NodeName == "n0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("admin pod not scheduled: %s", summary([]corev1.Pod{*got}))
		}
		time.Sleep(20 * time.Millisecond)
	}
	c, err := a.cs.ResourceV1().ResourceClaims("ops").Get(ctx, "monitor", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Status.Allocation.Devices.Results; len(r) != 1 || r[0].Device != "gpu-0" || r[0].AdminAccess == nil || !*r[0].AdminAccess {
		t.Errorf("admin allocation: %+v", c.Status.Allocation)
	}
	// The device is still the user's alone: another ordinary claim waits.
	a.createClaim(t, "other", []resourcev1.DeviceRequest{request("gpu", nil)})
	a.createPod(t, pod("other", nil, withClaim("other")))
	a.waitPods(t, "other unschedulable", func(ps []corev1.Pod) bool {
		for i := range ps {
			if ps[i].Name == "other" {
				return unschedulableWith(&ps[i], "0/1 nodes are available: 1 cannot allocate all claims.")
			}
		}
		return false
	})
}

// A claim whose status write is refused (admin access in a namespace
// whose label went since the claim was made) fails the cycle with a
// PreBind event, and what was written for the pod's other claim is
// undone: no allocation, reservation or finalizer stays behind.
func TestDynamicResourcesUndoOnFailedWrite(t *testing.T) {
	a := newTestAPI(t)
	ctx := context.Background()
	a.createNode(t, node("n0", nil))
	a.createClass(t, draDriver, `device.driver == "gpu.example.com"`)
	a.createSlice(t, "n0", map[string]map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"gpu-0": attrs("model", "a100"), "gpu-1": attrs("model", "a100")})
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ops", Labels: map[string]string{"resource.kubernetes.io/admin-access": "true"}}}
	ns, err := a.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.cs.CoreV1().ServiceAccounts("ops").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	claims := a.cs.ResourceV1().ResourceClaims("ops")
	for _, c := range []*resourcev1.ResourceClaim{
		{ObjectMeta: metav1.ObjectMeta{Name: "plain"}, Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{request("gpu", nil)}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "admin"}, Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{
			request("gpu", func(r *resourcev1.ExactDeviceRequest) { r.AdminAccess = ptr.To(true) })}}}},
	} {
		if _, err := claims.Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ns.Labels = nil
	if _, err := a.cs.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.startScheduler(t, Options{})
	p := pod("both", nil, func(p *corev1.Pod) {
		p.Namespace = "ops"
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "plain", ResourceClaimName: ptr.To("plain")}, {Name: "admin", ResourceClaimName: ptr.To("admin")}}
	})
	a.createPod(t, p)
	deadline := time.Now().Add(30 * time.Second)
	for {
		evs, err := a.cs.CoreV1().Events("ops").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, e := range evs.Items {
			found = found || e.Reason == "FailedScheduling" && strings.Contains(e.Message, `running PreBind plugin "DynamicResources"`) &&
				strings.Contains(e.Message, "admin access to devices requires the `resource.kubernetes.io/admin-access: true` label on the containing namespace")
		}
		if found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no PreBind FailedScheduling event; events: %+v", evs.Items)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := claims.Get(ctx, "plain", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c.Status.Allocation == nil && len(c.Status.ReservedFor) == 0 && len(c.Finalizers) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("plain claim not cleaned up: finalizers %v, status %+v", c.Finalizers, c.Status)
		}
	}
	if got, _ := a.cs.CoreV1().Pods("ops").Get(ctx, "both", metav1.GetOptions{}); got.Spec.NodeName != "" {
		t.Errorf("pod bound to %s although a claim could not be written", got.Spec.NodeName)
	}
}
