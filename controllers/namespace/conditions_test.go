package namespace

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
)

// The failure conditions an integration test cannot easily provoke, with
// upstream's reasons and messages.
func TestConditionMessages(t *testing.T) {
	fine := func(t corev1.NamespaceConditionType) corev1.NamespaceCondition {
		return corev1.NamespaceCondition{Type: t, Status: corev1.ConditionFalse, Reason: okConditions[t].reason, Message: okConditions[t].message}
	}
	for _, tc := range []struct {
		name string
		fill func(*conditions)
		want []corev1.NamespaceCondition
	}{{
		name: "partial discovery, a bad group version, two resources failing, content left",
		fill: func(c *conditions) {
			c.discoveryFailed(&discovery.ErrGroupDiscoveryFailed{Groups: map[schema.GroupVersion]error{{Group: "example.com", Version: "v1"}: errors.New("boom")}})
			c.groupVersionFailed(errors.New("unexpected GroupVersion string: a/b/c"))
			c.contentFailed(errors.New("list widgets: boom"))
			c.contentFailed(errors.New("deletecollection of gadgets: bang"))
			c.remaining(map[schema.GroupVersionResource]remaining{
				{Version: "v1", Resource: "pods"}:                       {count: 2, finalizers: map[string]int{"example.com/a": 2}},
				{Group: "apps", Version: "v1", Resource: "replicasets"}: {count: 1, finalizers: map[string]int{"example.com/a": 1, "example.com/b": 1}},
			})
		},
		want: []corev1.NamespaceCondition{
			{Type: corev1.NamespaceDeletionDiscoveryFailure, Status: corev1.ConditionTrue, Reason: "DiscoveryFailed",
				Message: "Discovery failed for some groups, 1 failing: unable to retrieve the complete list of server APIs: example.com/v1: boom"},
			{Type: corev1.NamespaceDeletionGVParsingFailure, Status: corev1.ConditionTrue, Reason: "GroupVersionParsingFailed", Message: "unexpected GroupVersion string: a/b/c"},
			{Type: corev1.NamespaceDeletionContentFailure, Status: corev1.ConditionTrue, Reason: "ContentDeletionFailed",
				Message: "Failed to delete all resource types, 2 remaining: deletecollection of gadgets: bang, list widgets: boom"},
			{Type: corev1.NamespaceContentRemaining, Status: corev1.ConditionTrue, Reason: "SomeResourcesRemain",
				Message: "Some resources are remaining: pods. has 2 resource instances, replicasets.apps has 1 resource instances"},
			{Type: corev1.NamespaceFinalizersRemaining, Status: corev1.ConditionTrue, Reason: "SomeFinalizersRemain",
				Message: "Some content in the namespace has finalizers remaining: example.com/a in 3 resource instances, example.com/b in 1 resource instances"},
		},
	}, {
		name: "all clear",
		fill: func(c *conditions) { c.remaining(nil) },
		want: []corev1.NamespaceCondition{
			fine(corev1.NamespaceDeletionDiscoveryFailure), fine(corev1.NamespaceDeletionGVParsingFailure),
			fine(corev1.NamespaceDeletionContentFailure), fine(corev1.NamespaceContentRemaining), fine(corev1.NamespaceFinalizersRemaining),
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var c conditions
			tc.fill(&c)
			ns := &corev1.Namespace{}
			if !c.apply(ns) {
				t.Error("apply to a namespace without conditions reported no change")
			}
			if d := cmp.Diff(tc.want, ns.Status.Conditions, cmpopts.IgnoreFields(corev1.NamespaceCondition{}, "LastTransitionTime")); d != "" {
				t.Errorf("conditions (-want +got):\n%s", d)
			}
			if c.apply(ns) {
				t.Error("applying the same conditions again reported a change")
			}
		})
	}
}

// A condition's transition time moves when its status does, not when
// only its message does.
func TestConditionTransitionTime(t *testing.T) {
	old := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	ns := &corev1.Namespace{Status: corev1.NamespaceStatus{Conditions: []corev1.NamespaceCondition{
		{Type: corev1.NamespaceContentRemaining, Status: corev1.ConditionTrue, Reason: "SomeResourcesRemain", Message: "Some resources are remaining: pods. has 2 resource instances", LastTransitionTime: old},
		{Type: corev1.NamespaceFinalizersRemaining, Status: corev1.ConditionTrue, Reason: "SomeFinalizersRemain", Message: "x", LastTransitionTime: old},
	}}}
	var c conditions
	c.remaining(map[schema.GroupVersionResource]remaining{{Version: "v1", Resource: "pods"}: {count: 1}})
	if !c.apply(ns) {
		t.Fatal("no change reported")
	}
	for _, cond := range ns.Status.Conditions {
		switch cond.Type {
		case corev1.NamespaceContentRemaining:
			if !cond.LastTransitionTime.Equal(&old) || cond.Message != "Some resources are remaining: pods. has 1 resource instances" {
				t.Errorf("content remaining: %+v", cond)
			}
		case corev1.NamespaceFinalizersRemaining:
			if cond.LastTransitionTime.Equal(&old) || cond.Status != corev1.ConditionFalse {
				t.Errorf("finalizers remaining: %+v", cond)
			}
		}
	}
}
