// Package resource holds the kinds of resource.k8s.io/v1, dynamic
// resource allocation: DeviceClasses, ResourceClaims (with status),
// ResourceClaimTemplates, ResourceSlices and DeviceTaintRules (with
// status), with v1's defaults, kube-apiserver's validation — device
// selectors are CEL expressions, compiled and cost-limited by upstream's
// own compiler — and kubectl get columns.
package resource

import (
	"strings"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"bonsai.dev/bonsai/apiserver/registry"
)

// Group is the API group's name.
const Group = "resource.k8s.io"

// Kinds are the group's rows of the table of served kinds.
func Kinds() []registry.Kind {
	return []registry.Kind{
		{GVR: registry.GVR(Group, "v1", "deviceclasses"), Kind: "DeviceClass",
			Strategy: deviceClassStrategy{}, Printer: &nameAgePrinter},
		{GVR: registry.GVR(Group, "v1", "devicetaintrules"), Kind: "DeviceTaintRule", Subresources: []string{"status"},
			Strategy: deviceTaintRuleStrategy{}, Defaulter: defaultDeviceTaintRule, Printer: &deviceTaintRulePrinter},
		{GVR: registry.GVR(Group, "v1", "resourceclaims"), Kind: "ResourceClaim", Namespaced: true, Subresources: []string{"status"},
			Strategy: claimStrategy{}, Defaulter: defaultClaim, Printer: &claimPrinter},
		{GVR: registry.GVR(Group, "v1", "resourceclaimtemplates"), Kind: "ResourceClaimTemplate", Namespaced: true,
			Strategy: claimTemplateStrategy{}, Defaulter: defaultClaimTemplate, Printer: &nameAgePrinter},
		{GVR: registry.GVR(Group, "v1", "resourceslices"), Kind: "ResourceSlice",
			Strategy: sliceStrategy{}, Printer: &slicePrinter, Fields: sliceFields},
	}
}

// sliceFields are ResourceSlices' field selectors, as kube-apiserver's:
// a driver lists its node's slices by spec.nodeName and spec.driver.
var sliceFields = map[string]func(runtime.Object) string{
	resourcev1.ResourceSliceSelectorNodeName: func(o runtime.Object) string {
		return registry.StrOr(o.(*resourcev1.ResourceSlice).Spec.NodeName, "")
	},
	resourcev1.ResourceSliceSelectorDriver: func(o runtime.Object) string { return o.(*resourcev1.ResourceSlice).Spec.Driver },
	"spec.pool.name":                       func(o runtime.Object) string { return o.(*resourcev1.ResourceSlice).Spec.Pool.Name },
}

// defaultDeviceRequests applies v1's defaults to a claim spec's
// requests: exactly count 1 unless allocationMode is All.
func defaultDeviceRequests(spec *resourcev1.ResourceClaimSpec) {
	for i := range spec.Devices.Requests {
		r := &spec.Devices.Requests[i]
		if e := r.Exactly; e != nil {
			defaultMode(&e.AllocationMode, &e.Count)
			defaultTolerations(e.Tolerations)
		}
		for j := range r.FirstAvailable {
			s := &r.FirstAvailable[j]
			defaultMode(&s.AllocationMode, &s.Count)
			defaultTolerations(s.Tolerations)
		}
	}
}

func defaultMode(mode *resourcev1.DeviceAllocationMode, count *int64) {
	if *mode == "" {
		*mode = resourcev1.DeviceAllocationModeExactCount
	}
	if *mode == resourcev1.DeviceAllocationModeExactCount && *count == 0 {
		*count = 1
	}
}

func defaultTolerations(ts []resourcev1.DeviceToleration) {
	for i := range ts {
		if ts[i].Operator == "" {
			ts[i].Operator = resourcev1.DeviceTolerationOpEqual
		}
	}
}

func defaultClaim(obj runtime.Object) {
	defaultDeviceRequests(&obj.(*resourcev1.ResourceClaim).Spec)
}

func defaultClaimTemplate(obj runtime.Object) {
	defaultDeviceRequests(&obj.(*resourcev1.ResourceClaimTemplate).Spec.Spec)
}

// defaultDeviceTaintRule: a taint is added now unless it says when.
func defaultDeviceTaintRule(obj runtime.Object) {
	t := &obj.(*resourcev1.DeviceTaintRule).Spec.Taint
	if t.TimeAdded == nil {
		t.TimeAdded = &metav1.Time{Time: time.Now().Truncate(time.Second)}
	}
}

// nameAgePrinter: upstream prints DeviceClasses and
// ResourceClaimTemplates by name and age only.
var nameAgePrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol, registry.AgeCol),
	Cells: func(o runtime.Object) []any {
		m := o.(metav1.Object)
		return []any{m.GetName(), registry.Age(m)}
	},
}

var claimPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("State", registry.TString, "A summary of the current state (allocated, pending, reserved, etc.)."),
		registry.AgeCol),
	Cells: func(o runtime.Object) []any {
		c := o.(*resourcev1.ResourceClaim)
		return []any{c.Name, ClaimState(c), registry.Age(c)}
	},
}

// ClaimState is the State column of a claim: deleted, pending,
// allocated, reserved, comma-separated as kubectl shows them.
func ClaimState(c *resourcev1.ResourceClaim) string {
	var states []string
	if c.DeletionTimestamp != nil {
		states = append(states, "deleted")
	}
	if c.Status.Allocation == nil {
		if c.DeletionTimestamp == nil {
			states = append(states, "pending")
		}
	} else {
		states = append(states, "allocated")
		if len(c.Status.ReservedFor) > 0 {
			states = append(states, "reserved")
		}
	}
	return strings.Join(states, ",")
}

var slicePrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Node", registry.TString, resourcev1.ResourceSliceSpec{}.SwaggerDoc()["nodeName"]),
		registry.Col("Driver", registry.TString, resourcev1.ResourceSliceSpec{}.SwaggerDoc()["driver"]),
		registry.Col("Pool", registry.TString, resourcev1.ResourcePool{}.SwaggerDoc()["name"]),
		registry.AgeCol),
	Cells: func(o runtime.Object) []any {
		s := o.(*resourcev1.ResourceSlice)
		return []any{s.Name, registry.StrOr(s.Spec.NodeName, ""), s.Spec.Driver, s.Spec.Pool.Name, registry.Age(s)}
	},
}

var deviceTaintRulePrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Key", registry.TString, resourcev1.DeviceTaint{}.SwaggerDoc()["key"]),
		registry.Col("Value", registry.TString, resourcev1.DeviceTaint{}.SwaggerDoc()["value"]),
		registry.Col("Effect", registry.TString, resourcev1.DeviceTaint{}.SwaggerDoc()["effect"]),
		registry.Col("TimeAdded", registry.TString, resourcev1.DeviceTaint{}.SwaggerDoc()["timeAdded"]),
		registry.AgeCol),
	Cells: func(o runtime.Object) []any {
		r := o.(*resourcev1.DeviceTaintRule)
		t := r.Spec.Taint
		added := ""
		if t.TimeAdded != nil {
			added = registry.Since(t.TimeAdded.Time)
		}
		return []any{r.Name, t.Key, t.Value, string(t.Effect), added, registry.Age(r)}
	},
}
