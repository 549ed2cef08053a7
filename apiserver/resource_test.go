package apiserver

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

func exactRequest(name, class string, selectors ...string) resourcev1.DeviceRequest {
	r := resourcev1.DeviceRequest{Name: name, Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class}}
	for _, s := range selectors {
		r.Exactly.Selectors = append(r.Exactly.Selectors, resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{Expression: s}})
	}
	return r
}

func testClaim(name string, reqs ...resourcev1.DeviceRequest) *resourcev1.ResourceClaim {
	return &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: reqs}}}
}

// resource.k8s.io/v1 as kube-apiserver serves it: v1's defaults, its
// validation with its field paths and messages — device selectors
// compiled and cost-limited by upstream's CEL compiler —, claims' and
// templates' fixed specs, the claim status rules and the columns.
func TestResourceAPI(t *testing.T) {
	e := newTestEnv(t)
	rs := e.cs.ResourceV1()

	t.Run("DeviceClass", func(t *testing.T) {
		_, err := rs.DeviceClasses().Create(e.ctx, &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu.example.com"},
			Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
				Expression: `device.driver == "gpu.example.com" && device.attributes["gpu.example.com"].model == "a100" && device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0`}}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = rs.DeviceClasses().Create(e.ctx, &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "bad"},
			Spec: resourcev1.DeviceClassSpec{
				Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: "true"}}, {}, {CEL: &resourcev1.CELDeviceSelector{Expression: "noSuchVar"}}, {CEL: &resourcev1.CELDeviceSelector{Expression: `device.driver`}}},
				Config: []resourcev1.DeviceClassConfiguration{{DeviceConfiguration: resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{
					Driver: "gpu.example.com", Parameters: runtime.RawExtension{Raw: []byte(`[1]`)}}}}},
			}}, metav1.CreateOptions{})
		wantInvalid(t, "bad class", err, `DeviceClass.resource.k8s.io "bad" is invalid`,
			"spec.selectors[1].cel: Required value",
			`spec.selectors[2].cel.expression: Invalid value: "noSuchVar": compilation failed: ERROR: <input>:1:1: undeclared reference to 'noSuchVar'`,
			`spec.selectors[3].cel.expression: Invalid value: "device.driver": must evaluate to bool`,
			`spec.config[0].opaque.parameters: Invalid value: "<value omitted>": must be a valid JSON object`)
		for name, ok := range map[string]bool{"example.com/gpu": true, "kubernetes.io/gpu": false, "gpu": false} {
			_, err := rs.DeviceClasses().Create(e.ctx, &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "ext-" + strings.NewReplacer("/", "-", ".", "-").Replace(name)},
				Spec: resourcev1.DeviceClassSpec{ExtendedResourceName: ptr.To(name)}}, metav1.CreateOptions{})
			if ok && err != nil {
				t.Errorf("extended resource %s: %v", name, err)
			}
			if !ok {
				wantInvalid(t, "extended resource "+name, err, "spec.extendedResourceName: Invalid value", "must be a valid extended resource name")
			}
		}
	})

	t.Run("ResourceClaim", func(t *testing.T) {
		c, err := rs.ResourceClaims("default").Create(e.ctx, testClaim("gpu", exactRequest("gpu", "gpu.example.com")), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if x := c.Spec.Devices.Requests[0].Exactly; x.AllocationMode != resourcev1.DeviceAllocationModeExactCount || x.Count != 1 {
			t.Errorf("defaults: %+v", x)
		}
		c.Spec.Devices.Requests[0].Exactly.Count = 2
		_, err = rs.ResourceClaims("default").Update(e.ctx, c, metav1.UpdateOptions{})
		wantInvalid(t, "spec changed", err, "spec: Invalid value", "field is immutable")

		costly := `[1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(x, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(y, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(z, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(z2, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(z3, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(z4, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(z5, int('1'.find('[0-9]*')) < 100)))))))`
		all := exactRequest("all", "gpu.example.com")
		all.Exactly.AllocationMode, all.Exactly.Count = resourcev1.DeviceAllocationModeAll, 2
		bad := testClaim("bad", exactRequest("one", "gpu.example.com", costly), all, resourcev1.DeviceRequest{Name: "none"}, exactRequest("one", "Not_A_Class"))
		bad.Spec.Devices.Constraints = []resourcev1.DeviceConstraint{{Requests: []string{"nosuch"}, MatchAttribute: ptr.To(resourcev1.FullyQualifiedName("model"))}}
		_, err = rs.ResourceClaims("default").Create(e.ctx, bad, metav1.CreateOptions{})
		wantInvalid(t, "bad claim", err,
			"spec.devices.requests[0].exactly.selectors[0].cel.expression: Forbidden: too complex, exceeds cost limit",
			"spec.devices.requests[1].exactly.count: Invalid value: 2: must not be specified when allocationMode is 'All'",
			"spec.devices.requests[2]: Required value: exactly one of `exactly` or `firstAvailable` is required",
			`spec.devices.requests[3].exactly.deviceClassName: Invalid value: "Not_A_Class"`,
			`spec.devices.requests[3]: Duplicate value: "one"`,
			`spec.devices.constraints[0].requests[0]: Invalid value: "nosuch": must be the name of a request in the claim`,
			`spec.devices.constraints[0].matchAttribute: Invalid value: "model": a fully qualified name must be a domain and a name separated by a slash`)

		admin := exactRequest("admin", "gpu.example.com")
		admin.Exactly.AdminAccess = ptr.To(true)
		_, err = rs.ResourceClaims("default").Create(e.ctx, testClaim("admin", admin), metav1.CreateOptions{})
		wantInvalid(t, "admin access", err, "spec.devices.requests[0].adminAccess: Forbidden: admin access to devices requires the `resource.kubernetes.io/admin-access: true` label on the containing namespace")
		if _, err := e.cs.CoreV1().Namespaces().Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ops",
			Labels: map[string]string{"resource.kubernetes.io/admin-access": "true"}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := rs.ResourceClaims("ops").Create(e.ctx, testClaim("admin", admin), metav1.CreateOptions{}); err != nil {
			t.Errorf("admin access in a labelled namespace: %v", err)
		}
	})

	t.Run("ResourceClaim status", func(t *testing.T) {
		c := testClaim("st", exactRequest("gpu", "gpu.example.com"))
		c.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "u1"}}
		c, err := rs.ResourceClaims("default").Create(e.ctx, c, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Status.ReservedFor) != 0 {
			t.Errorf("status set on create was kept: %+v", c.Status)
		}
		c.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "u1"}}
		_, err = rs.ResourceClaims("default").UpdateStatus(e.ctx, c, metav1.UpdateOptions{})
		wantInvalid(t, "reserved, not allocated", err, "status.reservedFor: Forbidden: may not be specified when `allocated` is not set")
		c.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{
			{Request: "gpu", Driver: "gpu.example.com", Pool: "node-1", Device: "gpu-0"}}}}
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourcev1.ResourceClaimConsumerReference{Resource: "pods", Name: "q", UID: "u1"})
		_, err = rs.ResourceClaims("default").UpdateStatus(e.ctx, c, metav1.UpdateOptions{})
		wantInvalid(t, "reserved twice", err, `status.reservedFor[1]: Duplicate value: "u1"`)
		c.Status.ReservedFor = c.Status.ReservedFor[:1]
		if c, err = rs.ResourceClaims("default").UpdateStatus(e.ctx, c, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("allocate and reserve: %v", err)
		}
		c.Status.Allocation.Devices.Results[0].Device = "gpu-1"
		_, err = rs.ResourceClaims("default").UpdateStatus(e.ctx, c, metav1.UpdateOptions{})
		wantInvalid(t, "allocation changed", err, "status.allocation: Invalid value", "field is immutable")
		c.Status.Allocation.Devices.Results[0].Device = "gpu-0"
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourcev1.DeviceRequestAllocationResult{Request: "nosuch", Driver: "gpu.example.com", Pool: "node-1", Device: "gpu-1"})
		fresh := testClaim("st2", exactRequest("gpu", "gpu.example.com"))
		fresh, err = rs.ResourceClaims("default").Create(e.ctx, fresh, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		fresh.Status.Allocation = c.Status.Allocation
		_, err = rs.ResourceClaims("default").UpdateStatus(e.ctx, fresh, metav1.UpdateOptions{})
		wantInvalid(t, "allocation of an unknown request", err, `status.allocation.devices.results[1].request: Invalid value: "nosuch"`)
	})

	t.Run("ResourceClaimTemplate", func(t *testing.T) {
		tpl := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}, Spec: resourcev1.ResourceClaimTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}},
			Spec:       resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{exactRequest("gpu", "gpu.example.com")}}}}}
		tpl, err := rs.ResourceClaimTemplates("default").Create(e.ctx, tpl, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if tpl.Spec.Spec.Devices.Requests[0].Exactly.Count != 1 {
			t.Errorf("template not defaulted: %+v", tpl.Spec.Spec.Devices.Requests[0].Exactly)
		}
		tpl.Spec.Spec.Devices.Requests[0].Name = "other"
		_, err = rs.ResourceClaimTemplates("default").Update(e.ctx, tpl, metav1.UpdateOptions{})
		wantInvalid(t, "template spec changed", err, "spec: Invalid value", "field is immutable")
		bad := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Spec: resourcev1.ResourceClaimTemplateSpec{
			Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{exactRequest("gpu", "gpu.example.com", "1 +")}}}}}
		_, err = rs.ResourceClaimTemplates("default").Create(e.ctx, bad, metav1.CreateOptions{})
		wantInvalid(t, "bad template", err, `spec.spec.devices.requests[0].exactly.selectors[0].cel.expression: Invalid value: "1 +": compilation failed`)
	})

	t.Run("ResourceSlice", func(t *testing.T) {
		slice := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "node-1-gpu"}, Spec: resourcev1.ResourceSliceSpec{
			Driver: "gpu.example.com", Pool: resourcev1.ResourcePool{Name: "node-1", ResourceSliceCount: 1}, NodeName: ptr.To("node-1"),
			Devices: []resourcev1.Device{{Name: "gpu-0", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				"model": {StringValue: ptr.To("a100")}, "driverVersion": {VersionValue: ptr.To("1.2.3")}}}}}}
		if _, err := rs.ResourceSlices().Create(e.ctx, slice, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		other := slice.DeepCopy()
		other.Name, other.Spec.NodeName, other.Spec.Pool.Name = "node-2-gpu", ptr.To("node-2"), "node-2"
		if _, err := rs.ResourceSlices().Create(e.ctx, other, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		l, err := rs.ResourceSlices().List(e.ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-2,spec.driver=gpu.example.com"})
		if err != nil || len(l.Items) != 1 || l.Items[0].Name != "node-2-gpu" {
			t.Errorf("field selector: %v %+v", err, l)
		}
		bad := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Spec: resourcev1.ResourceSliceSpec{
			Driver: "gpu.example.com", Pool: resourcev1.ResourcePool{Name: "p"}, NodeName: ptr.To("n"), AllNodes: ptr.To(true),
			Devices: []resourcev1.Device{{Name: "d", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				"1bad": {IntValue: ptr.To(int64(1))}, "v": {VersionValue: ptr.To("one")}, "both": {IntValue: ptr.To(int64(1)), BoolValue: ptr.To(true)}}}, {Name: "d"}}}}
		_, err = rs.ResourceSlices().Create(e.ctx, bad, metav1.CreateOptions{})
		wantInvalid(t, "bad slice", err,
			"spec.pool.resourceSliceCount: Invalid value: 0: must be greater than zero",
			"spec: Invalid value: \"{`nodeName`, `allNodes`}\": exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required, but multiple fields are set",
			`spec.devices[0].attributes: Invalid value: "1bad"`,
			`spec.devices[0].attributes[v].version: Invalid value: "one": must be a string compatible with semver.org spec 2.0.0`,
			`spec.devices[0].attributes[both]: Invalid value`, "exactly one value must be specified",
			`spec.devices[1]: Duplicate value: "d"`)
		none := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "none"}, Spec: resourcev1.ResourceSliceSpec{
			Driver: "gpu.example.com", Pool: resourcev1.ResourcePool{Name: "p", ResourceSliceCount: 1}}}
		_, err = rs.ResourceSlices().Create(e.ctx, none, metav1.CreateOptions{})
		wantInvalid(t, "no node", err, "spec: Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required")
		moved, _ := rs.ResourceSlices().Get(e.ctx, "node-1-gpu", metav1.GetOptions{})
		moved.Spec.NodeName = ptr.To("node-3")
		_, err = rs.ResourceSlices().Update(e.ctx, moved, metav1.UpdateOptions{})
		wantInvalid(t, "node changed", err, `spec.nodeName: Invalid value: "node-3": field is immutable`)
	})

	t.Run("DeviceTaintRule", func(t *testing.T) {
		r, err := rs.DeviceTaintRules().Create(e.ctx, &resourcev1.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: "maintenance"},
			Spec: resourcev1.DeviceTaintRuleSpec{DeviceSelector: &resourcev1.DeviceTaintSelector{Driver: ptr.To("gpu.example.com")},
				Taint: resourcev1.DeviceTaint{Key: "example.com/maintenance", Value: "true", Effect: resourcev1.DeviceTaintEffectNoSchedule}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Spec.Taint.TimeAdded == nil {
			t.Error("timeAdded not defaulted")
		}
		_, err = rs.DeviceTaintRules().Create(e.ctx, &resourcev1.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: "bad"},
			Spec: resourcev1.DeviceTaintRuleSpec{Taint: resourcev1.DeviceTaint{Key: "k", Effect: "Sometimes"}}}, metav1.CreateOptions{})
		wantInvalid(t, "bad effect", err, `spec.taint.effect: Unsupported value: "Sometimes"`)
	})

	t.Run("pod claims", func(t *testing.T) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "claims"}, Spec: corev1.PodSpec{
			ResourceClaims: []corev1.PodResourceClaim{
				{Name: "gpu", ResourceClaimName: ptr.To("gpu")},
				{Name: "gpu", ResourceClaimTemplateName: ptr.To("gpu")},
				{Name: "both", ResourceClaimName: ptr.To("a"), ResourceClaimTemplateName: ptr.To("b")},
				{Name: "neither"},
			},
			Containers: []corev1.Container{{Name: "c", Image: "busybox", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}, {Name: "gpu"}, {Name: "nosuch"}}}}},
		}}
		_, err := e.cs.CoreV1().Pods("default").Create(e.ctx, p, metav1.CreateOptions{})
		wantInvalid(t, "bad pod claims", err,
			`spec.resourceClaims[1].name: Duplicate value: "gpu"`,
			"spec.resourceClaims[2]: Invalid value", "at most one of `resourceClaimName` or `resourceClaimTemplateName` may be specified",
			"spec.resourceClaims[3]: Invalid value", "must specify one of: `resourceClaimName`, `resourceClaimTemplateName`",
			`spec.containers[0].resources.claims[1]: Duplicate value: "gpu"`,
			`spec.containers[0].resources.claims[2]: Not found: "nosuch": must be one of the names in pod.spec.resourceClaims: both, gpu, neither`)
		p.Spec.ResourceClaims = p.Spec.ResourceClaims[:1]
		p.Spec.Containers[0].Resources.Claims = p.Spec.Containers[0].Resources.Claims[:1]
		p, err = e.cs.CoreV1().Pods("default").Create(e.ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "other", ResourceClaimName: ptr.To("x")}}
		_, err = e.cs.CoreV1().Pods("default").UpdateStatus(e.ctx, p, metav1.UpdateOptions{})
		wantInvalid(t, "status of an unknown claim", err, "status.resourceClaimStatuses[0].name: Invalid value: \"other\": must match the name of an entry in `spec.resourceClaims`")
	})

	t.Run("tables", func(t *testing.T) {
		for _, c := range []struct {
			path    string
			headers []string
			row     []any
		}{
			{"/apis/resource.k8s.io/v1/deviceclasses/gpu.example.com", []string{"NAME", "AGE"}, []any{"gpu.example.com", recent}},
			{"/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/gpu", []string{"NAME", "STATE", "AGE"}, []any{"gpu", "pending", recent}},
			{"/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/st", []string{"NAME", "STATE", "AGE"}, []any{"st", "allocated,reserved", recent}},
			{"/apis/resource.k8s.io/v1/namespaces/default/resourceclaimtemplates/gpu", []string{"NAME", "AGE"}, []any{"gpu", recent}},
			{"/apis/resource.k8s.io/v1/resourceslices/node-2-gpu", []string{"NAME", "NODE", "DRIVER", "POOL", "AGE"}, []any{"node-2-gpu", "node-2", "gpu.example.com", "node-2", recent}},
		} {
			t.Run(strings.ReplaceAll(c.path, "/", "_"), func(t *testing.T) { checkTable(t, getTable(t, e, c.path), c.headers, c.row) })
		}
	})
}
