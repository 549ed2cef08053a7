package apiserver

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-helpers/auth/rbac/validation"
	kubeletapis "k8s.io/kubelet/pkg/apis"

	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/apiserver/authz"
)

// admitRBAC lets a user write a role only with rules it holds itself (or
// the escalate verb on it), and a binding only to a role whose rules it
// holds (or the bind verb on that role), as Kubernetes does.
func (s *Server) admitRBAC(ctx context.Context, u *authn.User, res *resource, obj, old runtime.Object) error {
	if isPrivileged(u) {
		return nil
	}
	m, _ := metaOf(obj)
	ns, name := m.GetNamespace(), m.GetName()
	gr := qualified(res)
	switch o := obj.(type) {
	case *rbacv1.Role, *rbacv1.ClusterRole:
		if s.authorize(ctx, authz.Attributes{User: u, Verb: "escalate", ResourceRequest: true, APIGroup: rbacv1.GroupName, APIVersion: "*", Resource: res.gvr.Resource, Namespace: ns, Name: name}) {
			return nil
		}
		var rules []rbacv1.PolicyRule
		var aggregation bool
		if r, ok := o.(*rbacv1.Role); ok {
			rules = r.Rules
		} else {
			cr := o.(*rbacv1.ClusterRole)
			rules, aggregation = cr.Rules, cr.AggregationRule != nil
		}
		if err := s.confirmNoEscalation(u, ns, rules); err != nil {
			return apierrors.NewForbidden(gr, name, err)
		}
		if aggregation {
			full := []rbacv1.PolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}}, {Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}}
			if s.confirmNoEscalation(u, "", full) != nil {
				return apierrors.NewForbidden(gr, name, errors.New("must have cluster-admin privileges to use the aggregationRule"))
			}
		}
		return nil
	case *rbacv1.RoleBinding, *rbacv1.ClusterRoleBinding:
		var ref rbacv1.RoleRef
		if b, ok := o.(*rbacv1.RoleBinding); ok {
			ref = b.RoleRef
		} else {
			ref = o.(*rbacv1.ClusterRoleBinding).RoleRef
		}
		if old != nil && onlyFinalizersOrOwnersChanged(obj, old) {
			return nil
		}
		roleResource := "clusterroles"
		if ref.Kind == "Role" {
			roleResource = "roles"
		}
		if s.authorize(ctx, authz.Attributes{User: u, Verb: "bind", ResourceRequest: true, APIGroup: rbacv1.GroupName, APIVersion: "*", Resource: roleResource, Namespace: ns, Name: ref.Name}) {
			return nil
		}
		rules, err := s.roleRefRules(ctx, ref, ns)
		if err != nil {
			return err
		}
		if err := s.confirmNoEscalation(u, ns, rules); err != nil {
			return apierrors.NewForbidden(gr, name, err)
		}
	}
	return nil
}

func isPrivileged(u *authn.User) bool {
	for _, g := range u.Groups {
		if g == authn.GroupMasters {
			return true
		}
	}
	return false
}

// onlyFinalizersOrOwnersChanged: an update the garbage collector makes
// to a binding (finalizers, owners) grants nothing.
func onlyFinalizersOrOwnersChanged(obj, old runtime.Object) bool {
	a, b := obj.DeepCopyObject(), old.DeepCopyObject()
	ma, _ := metaOf(a)
	mb, _ := metaOf(b)
	ma.SetFinalizers(nil)
	mb.SetFinalizers(nil)
	ma.SetOwnerReferences(nil)
	mb.SetOwnerReferences(nil)
	ma.SetResourceVersion("")
	mb.SetResourceVersion("")
	ma.SetManagedFields(nil)
	mb.SetManagedFields(nil)
	return apiequality.Semantic.DeepEqual(a, b)
}

// roleRefRules reads the rules of the role a binding refers to.
func (s *Server) roleRefRules(ctx context.Context, ref rbacv1.RoleRef, ns string) ([]rbacv1.PolicyRule, error) {
	switch ref.Kind {
	case "ClusterRole":
		obj, _, err := s.getObject(ctx, s.reg.byGVR[gvr(rbacv1.GroupName, "v1", "clusterroles")], "", ref.Name)
		if err != nil {
			return nil, err
		}
		return obj.(*rbacv1.ClusterRole).Rules, nil
	case "Role":
		obj, _, err := s.getObject(ctx, s.reg.byGVR[gvr(rbacv1.GroupName, "v1", "roles")], ns, ref.Name)
		if err != nil {
			return nil, err
		}
		return obj.(*rbacv1.Role).Rules, nil
	}
	return nil, apierrors.NewBadRequest(fmt.Sprintf("unknown roleRef kind %q", ref.Kind))
}

// confirmNoEscalation fails unless u holds every rule in rules in ns,
// with Kubernetes' message listing what it lacks.
func (s *Server) confirmNoEscalation(u *authn.User, ns string, rules []rbacv1.PolicyRule) error {
	owner, resolutionErrs := s.rbac.RulesFor(u, ns)
	if node, ok := authz.NodeName(u); ok && node != "" {
		owner = append(owner, authz.NodeRules()...)
	}
	covered, missing := validation.Covers(owner, rules)
	if covered {
		return nil
	}
	seen := map[string]bool{}
	var lines []string
	for _, r := range compactRules(missing) {
		if c := compactString(r); !seen[c] {
			seen[c] = true
			lines = append(lines, c)
		}
	}
	sort.Strings(lines)
	msg := fmt.Sprintf("user %q (groups=%q) is attempting to grant RBAC permissions not currently held:\n%s", u.Name, u.Groups, strings.Join(lines, "\n"))
	if len(resolutionErrs) > 0 {
		msg += fmt.Sprintf("; resolution errors: %v", resolutionErrs)
	}
	return errors.New(msg)
}

// compactRules merges the one-verb rules Covers reports that differ only
// in their verb.
func compactRules(rules []rbacv1.PolicyRule) []rbacv1.PolicyRule {
	var out []rbacv1.PolicyRule
	index := map[string]int{}
	for _, r := range rules {
		if len(r.NonResourceURLs) > 0 {
			out = append(out, r)
			continue
		}
		key := strings.Join(r.APIGroups, ",") + "|" + strings.Join(r.Resources, ",") + "|" + strings.Join(r.ResourceNames, ",")
		if i, ok := index[key]; ok {
			out[i].Verbs = append(out[i].Verbs, r.Verbs...)
			continue
		}
		index[key] = len(out)
		out = append(out, *r.DeepCopy())
	}
	return out
}

// compactString is how Kubernetes prints a rule in escalation errors.
func compactString(r rbacv1.PolicyRule) string {
	var parts []string
	var args []any
	for _, f := range []struct {
		name string
		v    []string
	}{{"APIGroups", r.APIGroups}, {"Resources", r.Resources}, {"NonResourceURLs", r.NonResourceURLs}, {"ResourceNames", r.ResourceNames}, {"Verbs", r.Verbs}} {
		if len(f.v) > 0 {
			parts = append(parts, f.name+":%q")
			args = append(args, f.v)
		}
	}
	return fmt.Sprintf("{"+strings.Join(parts, ", ")+"}", args...)
}

// admitNode is the NodeRestriction admission plugin: a kubelet writes
// only its own Node and Lease, mirror pods bound to itself, and the
// status of pods bound to itself.
func admitNode(node string, nodeUID func() (types.UID, error), res *resource, subresource string, obj, old runtime.Object) error {
	gr := qualified(res)
	m, _ := metaOf(obj)
	switch res.gvr {
	case gvr("", "v1", "pods"):
		pod := obj.(*corev1.Pod)
		if old == nil {
			if err := admitNodeMirrorPod(node, nodeUID, pod); err != nil {
				return apierrors.NewForbidden(gr, m.GetName(), err)
			}
			return nil
		}
		if old.(*corev1.Pod).Spec.NodeName != node {
			if subresource == "status" {
				return apierrors.NewForbidden(gr, m.GetName(), fmt.Errorf("node %q can only update pod status for pods with spec.nodeName set to itself", node))
			}
			return apierrors.NewForbidden(gr, m.GetName(), fmt.Errorf("node %q can only update pods with spec.nodeName set to itself", node))
		}
	case gvr("", "v1", "nodes"):
		if m.GetName() != node {
			return apierrors.NewForbidden(gr, m.GetName(), fmt.Errorf("node %q is not allowed to modify node %q", node, m.GetName()))
		}
		if subresource == "" || subresource == "status" {
			if err := admitOwnNode(node, obj.(*corev1.Node), old); err != nil {
				return apierrors.NewForbidden(gr, m.GetName(), err)
			}
		}
	case gvr("coordination.k8s.io", "v1", "leases"):
		return admitNodeLease(node, gr, obj.(*coordinationv1.Lease).Namespace, m.GetName())
	case gvr("storage.k8s.io", "v1", "csinodes"):
		// The kubelet writes the CSINode of its own node only.
		if m.GetName() != node {
			return apierrors.NewForbidden(gr, m.GetName(), fmt.Errorf("node %q is not allowed to modify CSINode %q", node, m.GetName()))
		}
	case gvr("resource.k8s.io", "v1", "resourceslices"):
		// A node's DRA drivers publish only its own devices.
		if err := admitNodeSlice(node, gr, obj); err != nil {
			return err
		}
		if old != nil {
			return admitNodeSlice(node, gr, old)
		}
	}
	return nil
}

// admitNodeSlice: a kubelet writes only ResourceSlices of its own node.
func admitNodeSlice(node string, gr schema.GroupResource, obj runtime.Object) error {
	s := obj.(*resourcev1.ResourceSlice)
	if s.Spec.NodeName == nil || *s.Spec.NodeName != node {
		return apierrors.NewForbidden(gr, s.Name, fmt.Errorf("node %q can only write ResourceSlices with spec.nodeName set to itself", node))
	}
	return nil
}

// admitNodeMirrorPod: a kubelet creates only mirror pods of its static
// pods, bound to itself and owned by its Node, that reference no other
// API object: a mirror pod naming a Secret or ConfigMap would make the
// Node authorizer let that kubelet read it.
func admitNodeMirrorPod(node string, nodeUID func() (types.UID, error), pod *corev1.Pod) error {
	if _, ok := pod.Annotations[mirrorPodAnnotation]; !ok {
		return fmt.Errorf("pod does not have %q annotation, node %q can only create mirror pods", mirrorPodAnnotation, node)
	}
	if pod.Spec.NodeName != node {
		return fmt.Errorf("node %q can only create pods with spec.nodeName set to itself", node)
	}
	switch refs := pod.OwnerReferences; {
	case len(refs) > 1:
		return fmt.Errorf("node %q can only create pods with a single owner reference set to itself", node)
	case len(refs) == 0:
		return fmt.Errorf("node %q can only create pods with an owner reference set to itself", node)
	case refs[0].APIVersion != "v1" || refs[0].Kind != "Node" || refs[0].Name != node:
		return fmt.Errorf("node %q can only create pods with an owner reference set to itself", node)
	case refs[0].Controller == nil || !*refs[0].Controller:
		return fmt.Errorf("node %q can only create pods with a controller owner reference set to itself", node)
	case refs[0].BlockOwnerDeletion != nil && *refs[0].BlockOwnerDeletion:
		return fmt.Errorf("node %q must not set blockOwnerDeletion on an owner reference", node)
	}
	uid, err := nodeUID()
	if err != nil {
		return err
	}
	if pod.OwnerReferences[0].UID != uid {
		return fmt.Errorf("node %s UID mismatch: expected %s got %s", node, pod.OwnerReferences[0].UID, uid)
	}
	if pod.Spec.ServiceAccountName != "" {
		return fmt.Errorf("node %q can not create pods that reference a service account", node)
	}
	if podReferencesSecrets(pod) {
		return fmt.Errorf("node %q can not create pods that reference secrets", node)
	}
	if podReferencesConfigMaps(pod) {
		return fmt.Errorf("node %q can not create pods that reference configmaps", node)
	}
	for _, v := range pod.Spec.Volumes {
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				if src.ClusterTrustBundle != nil {
					return fmt.Errorf("node %q can not create pods that use clustertrustbundles", node)
				}
			}
		}
		if v.PersistentVolumeClaim != nil {
			return fmt.Errorf("node %q can not create pods that reference persistentvolumeclaims", node)
		}
	}
	if len(pod.Spec.ResourceClaims) > 0 {
		return fmt.Errorf("node %q can not create pods that reference resourceclaims", node)
	}
	return nil
}

// admitOwnNode: a kubelet may not give its own Node labels that steer
// workloads to it (node-restriction.kubernetes.io/, or kubernetes.io/
// and k8s.io/ labels that are not the kubelet's own), nor change its
// taints, nor register with a config source, as NodeRestriction.
func admitOwnNode(node string, n *corev1.Node, old runtime.Object) error {
	var oldLabels map[string]string
	if old != nil {
		o := old.(*corev1.Node)
		oldLabels = o.Labels
		if !apiequality.Semantic.DeepEqual(n.Spec.Taints, o.Spec.Taints) {
			return fmt.Errorf("node %q is not allowed to modify taints", node)
		}
	} else if n.Spec.ConfigSource != nil {
		return errors.New("is not allowed to create pods with a non-nil configSource")
	}
	var forbidden []string
	for k := range modifiedLabels(n.Labels, oldLabels) {
		ns, _, _ := strings.Cut(k, "/")
		if !strings.Contains(k, "/") {
			ns = ""
		}
		restricted := ns == corev1.LabelNamespaceNodeRestriction || strings.HasSuffix(ns, "."+corev1.LabelNamespaceNodeRestriction)
		k8s := ns == "kubernetes.io" || strings.HasSuffix(ns, ".kubernetes.io") || ns == "k8s.io" || strings.HasSuffix(ns, ".k8s.io")
		if restricted || (k8s && !kubeletapis.IsKubeletLabel(k)) {
			forbidden = append(forbidden, k)
		}
	}
	if len(forbidden) == 0 {
		return nil
	}
	sort.Strings(forbidden)
	if old == nil {
		return fmt.Errorf("is not allowed to set the following labels: %s", strings.Join(forbidden, ", "))
	}
	return fmt.Errorf("is not allowed to modify labels: %s", strings.Join(forbidden, ", "))
}

// modifiedLabels are the keys added, removed or changed from b to a.
func modifiedLabels(a, b map[string]string) map[string]bool {
	out := map[string]bool{}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			out[k] = true
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out[k] = true
		}
	}
	return out
}

// admitNodeToken is NodeRestriction for serviceaccounts/token: a kubelet
// gets tokens only bound to a pod that runs on it.
func (s *Server) admitNodeToken(ctx context.Context, gr schema.GroupResource, namespace, name string, ref *authenticationv1.BoundObjectReference) error {
	node, ok := authz.NodeName(requestUser(ctx))
	if !ok || s.rbac == nil {
		return nil
	}
	switch {
	case ref == nil:
		return apierrors.NewForbidden(gr, name, errors.New("node requested token not bound to a pod"))
	case ref.Kind != "Pod":
		return apierrors.NewForbidden(gr, name, fmt.Errorf("node requested token bound to a %s", ref.Kind))
	}
	obj, _, err := s.getObject(ctx, s.reg.byGVR[gvr("", "v1", "pods")], namespace, ref.Name)
	if err != nil {
		return err
	}
	pod := obj.(*corev1.Pod)
	if ref.UID != pod.UID {
		return apierrors.NewForbidden(gr, name, fmt.Errorf("the UID in the bound object reference (%s) does not match the UID in record. The object might have been deleted and then recreated", ref.UID))
	}
	if pod.Spec.NodeName != node {
		return apierrors.NewForbidden(gr, name, errors.New("node requested token bound to a pod scheduled on a different node"))
	}
	return nil
}

// nodeUIDOf reads the node's uid when a rule needs it.
func (s *Server) nodeUIDOf(ctx context.Context, node string) func() (types.UID, error) {
	return func() (types.UID, error) {
		obj, _, err := s.getObject(ctx, s.reg.byGVR[gvr("", "v1", "nodes")], "", node)
		if err != nil {
			return "", err
		}
		return obj.(*corev1.Node).UID, nil
	}
}

func admitNodeLease(node string, gr schema.GroupResource, ns, name string) error {
	if ns != corev1.NamespaceNodeLease {
		return apierrors.NewForbidden(gr, name, fmt.Errorf("can only access leases in the %q system namespace", corev1.NamespaceNodeLease))
	}
	if name != node {
		return apierrors.NewForbidden(gr, name, errors.New("can only access node lease with the same name as the requesting node"))
	}
	return nil
}

// admitNodeDelete is NodeRestriction for deletes and evictions: a kubelet
// removes only pods bound to itself, its own Node and its own Lease.
func (s *Server) admitNodeDelete(ctx context.Context, res *resource, obj runtime.Object, verb string) error {
	node, ok := authz.NodeName(requestUser(ctx))
	if !ok || s.rbac == nil {
		return nil
	}
	gr := qualified(res)
	m, _ := metaOf(obj)
	switch res.gvr {
	case gvr("", "v1", "pods"):
		if obj.(*corev1.Pod).Spec.NodeName != node {
			return apierrors.NewForbidden(gr, m.GetName(), fmt.Errorf("node %q can only %s pods with spec.nodeName set to itself", node, verb))
		}
	case gvr("", "v1", "nodes"):
		if m.GetName() != node {
			return apierrors.NewForbidden(gr, m.GetName(), fmt.Errorf("node %q is not allowed to delete node %q", node, m.GetName()))
		}
	case gvr("coordination.k8s.io", "v1", "leases"):
		return admitNodeLease(node, gr, m.GetNamespace(), m.GetName())
	case gvr("storage.k8s.io", "v1", "csinodes"):
		if m.GetName() != node {
			return apierrors.NewForbidden(gr, m.GetName(), fmt.Errorf("node %q is not allowed to modify CSINode %q", node, m.GetName()))
		}
	case gvr("resource.k8s.io", "v1", "resourceslices"):
		return admitNodeSlice(node, gr, obj)
	}
	return nil
}
