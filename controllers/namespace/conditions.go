package namespace

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
)

// The deletion conditions the controller keeps on a namespace, with
// upstream's reasons and messages for when all is well.
var conditionTypes = []corev1.NamespaceConditionType{
	corev1.NamespaceDeletionDiscoveryFailure,
	corev1.NamespaceDeletionGVParsingFailure,
	corev1.NamespaceDeletionContentFailure,
	corev1.NamespaceContentRemaining,
	corev1.NamespaceFinalizersRemaining,
}

var okConditions = map[corev1.NamespaceConditionType]struct{ reason, message string }{
	corev1.NamespaceDeletionDiscoveryFailure: {"ResourcesDiscovered", "All resources successfully discovered"},
	corev1.NamespaceDeletionGVParsingFailure: {"ParsedGroupVersions", "All legacy kube types successfully parsed"},
	corev1.NamespaceDeletionContentFailure:   {"ContentDeleted", "All content successfully deleted, may be waiting on finalization"},
	corev1.NamespaceContentRemaining:         {"ContentRemoved", "All content successfully removed"},
	corev1.NamespaceFinalizersRemaining:      {"ContentHasNoFinalizers", "All content-preserving finalizers finished"},
}

// conditions collects the failing conditions of one deletion pass; the
// types not collected are reported as fine.
type conditions struct {
	failing       []corev1.NamespaceCondition
	contentErrors []string
}

func (c *conditions) add(t corev1.NamespaceConditionType, reason, message string) {
	c.failing = append(c.failing, corev1.NamespaceCondition{Type: t, Status: corev1.ConditionTrue, Reason: reason, Message: message})
}

func (c *conditions) discoveryFailed(err error) {
	msg := err.Error()
	var failed *discovery.ErrGroupDiscoveryFailed
	if errors.As(err, &failed) {
		msg = fmt.Sprintf("Discovery failed for some groups, %d failing: %v", len(failed.Groups), err)
	}
	c.add(corev1.NamespaceDeletionDiscoveryFailure, "DiscoveryFailed", msg)
}

func (c *conditions) groupVersionFailed(err error) {
	c.add(corev1.NamespaceDeletionGVParsingFailure, "GroupVersionParsingFailed", err.Error())
}

func (c *conditions) contentFailed(err error) {
	c.contentErrors = append(c.contentErrors, err.Error())
}

// remaining reports what a pass left, by resource and by finalizer.
func (c *conditions) remaining(left map[schema.GroupVersionResource]remaining) {
	if len(c.contentErrors) > 0 {
		sort.Strings(c.contentErrors)
		c.add(corev1.NamespaceDeletionContentFailure, "ContentDeletionFailed",
			fmt.Sprintf("Failed to delete all resource types, %d remaining: %v", len(c.contentErrors), strings.Join(c.contentErrors, ", ")))
	}
	if len(left) == 0 {
		return
	}
	var resources, finalizers []string
	byFinalizer := map[string]int{}
	for gvr, r := range left {
		resources = append(resources, fmt.Sprintf("%s.%s has %d resource instances", gvr.Resource, gvr.Group, r.count))
		for f, n := range r.finalizers {
			byFinalizer[f] += n
		}
	}
	sort.Strings(resources)
	c.add(corev1.NamespaceContentRemaining, "SomeResourcesRemain", "Some resources are remaining: "+strings.Join(resources, ", "))
	if len(byFinalizer) == 0 {
		return
	}
	for f, n := range byFinalizer {
		finalizers = append(finalizers, fmt.Sprintf("%s in %d resource instances", f, n))
	}
	sort.Strings(finalizers)
	c.add(corev1.NamespaceFinalizersRemaining, "SomeFinalizersRemain", "Some content in the namespace has finalizers remaining: "+strings.Join(finalizers, ", "))
}

// apply sets every deletion condition on ns; false when none changed.
// A condition's transition time moves only when its status does.
func (c *conditions) apply(ns *corev1.Namespace) bool {
	changed := false
	now := metav1.Now()
	for _, t := range conditionTypes {
		want := corev1.NamespaceCondition{Type: t, Status: corev1.ConditionFalse, Reason: okConditions[t].reason, Message: okConditions[t].message}
		for _, f := range c.failing {
			if f.Type == t {
				want = f
			}
		}
		i := indexOf(ns.Status.Conditions, t)
		if i < 0 {
			want.LastTransitionTime = now
			ns.Status.Conditions = append(ns.Status.Conditions, want)
			changed = true
			continue
		}
		cur := &ns.Status.Conditions[i]
		if cur.Status == want.Status && cur.Reason == want.Reason && cur.Message == want.Message {
			continue
		}
		if cur.Status != want.Status {
			cur.LastTransitionTime = now
		}
		cur.Status, cur.Reason, cur.Message = want.Status, want.Reason, want.Message
		changed = true
	}
	return changed
}

func indexOf(conds []corev1.NamespaceCondition, t corev1.NamespaceConditionType) int {
	for i := range conds {
		if conds[i].Type == t {
			return i
		}
	}
	return -1
}
