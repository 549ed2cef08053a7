package authz

import (
	"context"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"bonsai.dev/bonsai/apiserver/authn"
)

// GroupNodes is the group every kubelet's identity is in.
const GroupNodes = "system:nodes"

// NodeName is the node a kubelet identity (system:node:<name> in
// system:nodes) acts for; ok is false for every other user.
func NodeName(u *authn.User) (string, bool) {
	if u == nil || !strings.HasPrefix(u.Name, "system:node:") || !hasGroup(u, GroupNodes) {
		return "", false
	}
	name := strings.TrimPrefix(u.Name, "system:node:")
	return name, name != ""
}

// Node is Kubernetes' Node authorizer: a kubelet may read the secrets,
// configmaps, persistent volume claims and volumes, and make tokens for
// the service accounts, of the pods bound to its node, and nothing of
// other nodes' pods; its other requests are checked against the rules of
// the system:node role. It answers only for node identities. What a node
// may write (its own Node, Lease and pods) is NodeRestriction admission's
// job, in the API server.
type Node struct {
	mu     sync.RWMutex
	pods   map[nsName]*podRefs
	byNode map[string]map[nsName]*podRefs
	// claims maps a claim to the volume bound to it.
	claims map[nsName]string
}

type podRefs struct {
	node                        string
	serviceAccount              string
	secrets, configMaps, claims map[string]bool
	// resourceClaims are the pod's ResourceClaims (named, or made from
	// a template and recorded in status).
	resourceClaims map[string]bool
}

// NewNode is a Node authorizer that knows no pods yet.
func NewNode() *Node {
	n := &Node{}
	n.Reset()
	return n
}

// Reset forgets every pod and claim (before a re-list).
func (n *Node) Reset() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.pods = map[nsName]*podRefs{}
	n.byNode = map[string]map[nsName]*podRefs{}
	n.claims = map[nsName]string{}
}

// SetPod records what a pod bound to a node references.
func (n *Node) SetPod(p *corev1.Pod) {
	key := nsName{p.Namespace, p.Name}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.deletePodLocked(key)
	if p.Spec.NodeName == "" {
		return
	}
	r := &podRefs{node: p.Spec.NodeName, serviceAccount: p.Spec.ServiceAccountName, secrets: map[string]bool{}, configMaps: map[string]bool{}, claims: map[string]bool{}, resourceClaims: map[string]bool{}}
	podReferences(p, r)
	n.pods[key] = r
	m := n.byNode[r.node]
	if m == nil {
		m = map[nsName]*podRefs{}
		n.byNode[r.node] = m
	}
	m[key] = r
}

func (n *Node) DeletePod(ns, name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.deletePodLocked(nsName{ns, name})
}

func (n *Node) deletePodLocked(key nsName) {
	old := n.pods[key]
	if old == nil {
		return
	}
	delete(n.pods, key)
	if m := n.byNode[old.node]; m != nil {
		delete(m, key)
		if len(m) == 0 {
			delete(n.byNode, old.node)
		}
	}
}

// SetClaim records the volume a claim is bound to.
func (n *Node) SetClaim(c *corev1.PersistentVolumeClaim) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.claims[nsName{c.Namespace, c.Name}] = c.Spec.VolumeName
}

func (n *Node) DeleteClaim(ns, name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.claims, nsName{ns, name})
}

func podReferences(p *corev1.Pod, r *podRefs) {
	for _, c := range p.Spec.ResourceClaims {
		if c.ResourceClaimName != nil {
			r.resourceClaims[*c.ResourceClaimName] = true
		}
	}
	for _, s := range p.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			r.resourceClaims[*s.ResourceClaimName] = true
		}
	}
	for _, s := range p.Spec.ImagePullSecrets {
		r.secrets[s.Name] = true
	}
	for _, v := range p.Spec.Volumes {
		switch {
		case v.Secret != nil:
			r.secrets[v.Secret.SecretName] = true
		case v.ConfigMap != nil:
			r.configMaps[v.ConfigMap.Name] = true
		case v.PersistentVolumeClaim != nil:
			r.claims[v.PersistentVolumeClaim.ClaimName] = true
		case v.Ephemeral != nil:
			// The claim of a generic ephemeral volume is <pod>-<volume>.
			r.claims[p.Name+"-"+v.Name] = true
		case v.Projected != nil:
			for _, src := range v.Projected.Sources {
				if src.Secret != nil {
					r.secrets[src.Secret.Name] = true
				}
				if src.ConfigMap != nil {
					r.configMaps[src.ConfigMap.Name] = true
				}
			}
		}
		// Volume plugins that carry a secret reference.
		if v.CSI != nil && v.CSI.NodePublishSecretRef != nil {
			r.secrets[v.CSI.NodePublishSecretRef.Name] = true
		}
	}
	containers := func(cs []corev1.Container) {
		for _, c := range cs {
			for _, e := range c.EnvFrom {
				if e.SecretRef != nil {
					r.secrets[e.SecretRef.Name] = true
				}
				if e.ConfigMapRef != nil {
					r.configMaps[e.ConfigMapRef.Name] = true
				}
			}
			for _, e := range c.Env {
				if e.ValueFrom == nil {
					continue
				}
				if e.ValueFrom.SecretKeyRef != nil {
					r.secrets[e.ValueFrom.SecretKeyRef.Name] = true
				}
				if e.ValueFrom.ConfigMapKeyRef != nil {
					r.configMaps[e.ValueFrom.ConfigMapKeyRef.Name] = true
				}
			}
		}
	}
	containers(p.Spec.InitContainers)
	containers(p.Spec.Containers)
	for _, ec := range p.Spec.EphemeralContainers {
		containers([]corev1.Container{corev1.Container(ec.EphemeralContainerCommon)})
	}
}

// Authorize answers for node identities only.
func (n *Node) Authorize(_ context.Context, a Attributes) (Decision, string, error) {
	node, ok := NodeName(a.User)
	if !ok {
		if a.User != nil && hasGroup(a.User, GroupNodes) {
			return NoOpinion, "unknown node", nil
		}
		return NoOpinion, "", nil
	}
	if a.ResourceRequest && a.APIGroup == "" {
		switch {
		case a.Resource == "secrets" && a.Subresource == "":
			return n.readRelated(a, node, func(r *podRefs) bool { return r.secrets[a.Name] })
		case a.Resource == "configmaps" && a.Subresource == "":
			return n.readRelated(a, node, func(r *podRefs) bool { return r.configMaps[a.Name] })
		case a.Resource == "persistentvolumeclaims" && (a.Subresource == "" || a.Subresource == "status"):
			if a.Subresource == "status" && (a.Verb == "update" || a.Verb == "patch") {
				// Online volume expansion reports through the claim's
				// status.
				return n.related(a, node, func(r *podRefs) bool { return r.claims[a.Name] })
			}
			return n.readRelated(a, node, func(r *podRefs) bool { return r.claims[a.Name] })
		case a.Resource == "persistentvolumes" && a.Subresource == "":
			return n.readPersistentVolume(a, node)
		case a.Resource == "serviceaccounts" && a.Subresource == "token":
			if a.Verb != "create" {
				return NoOpinion, "can only create tokens for individual service accounts", nil
			}
			return n.related(a, node, func(r *podRefs) bool { return r.serviceAccount == a.Name })
		}
	}
	if a.ResourceRequest && a.APIGroup == "resource.k8s.io" && a.Resource == "resourceclaims" && a.Subresource == "" {
		// The kubelet reads the claims of its pods to prepare them, as
		// kube-apiserver's Node authorizer allows.
		if a.Verb != "get" {
			return NoOpinion, "can only get individual resources of this type", nil
		}
		return n.readRelated(a, node, func(r *podRefs) bool { return r.resourceClaims[a.Name] })
	}
	for i := range nodeRules {
		if RuleAllows(a, &nodeRules[i]) {
			return Allow, "", nil
		}
	}
	return NoOpinion, "", nil
}

func (n *Node) readRelated(a Attributes, node string, rel func(*podRefs) bool) (Decision, string, error) {
	switch a.Verb {
	case "get", "list", "watch":
	default:
		return NoOpinion, "can only read resources of this type", nil
	}
	if a.Name == "" {
		return NoOpinion, "No Object name found", nil
	}
	return n.related(a, node, rel)
}

func (n *Node) related(a Attributes, node string, rel func(*podRefs) bool) (Decision, string, error) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	for key, r := range n.byNode[node] {
		if key.ns == a.Namespace && rel(r) {
			return Allow, "", nil
		}
	}
	return NoOpinion, fmt.Sprintf("no relationship found between node '%s' and this object", node), nil
}

func (n *Node) readPersistentVolume(a Attributes, node string) (Decision, string, error) {
	if a.Verb != "get" {
		return NoOpinion, "can only get individual resources of this type", nil
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	for key, r := range n.byNode[node] {
		for claim := range r.claims {
			if v := n.claims[nsName{key.ns, claim}]; v != "" && v == a.Name {
				return Allow, "", nil
			}
		}
	}
	return NoOpinion, fmt.Sprintf("no relationship found between node '%s' and this object", node), nil
}

// nodeRules are what the system:node ClusterRole grants; the Node
// authorizer applies them to every node, and NodeRestriction admission
// narrows the writes to the node's own objects.
var nodeRules = []rbacv1.PolicyRule{
	{Verbs: []string{"create"}, APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}},
	{Verbs: []string{"create"}, APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews", "localsubjectaccessreviews"}},
	{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{""}, Resources: []string{"services"}},
	{Verbs: []string{"create", "get", "list", "watch", "delete", "patch", "update"}, APIGroups: []string{""}, Resources: []string{"nodes"}},
	{Verbs: []string{"patch", "update"}, APIGroups: []string{""}, Resources: []string{"nodes/status"}},
	{Verbs: []string{"create", "update", "patch"}, APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}},
	{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{""}, Resources: []string{"pods"}},
	{Verbs: []string{"create", "delete"}, APIGroups: []string{""}, Resources: []string{"pods"}},
	{Verbs: []string{"update", "patch"}, APIGroups: []string{""}, Resources: []string{"pods/status"}},
	{Verbs: []string{"create"}, APIGroups: []string{""}, Resources: []string{"pods/eviction"}},
	{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}},
	{Verbs: []string{"create", "get", "list", "watch"}, APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests"}},
	{Verbs: []string{"get", "create", "update", "patch", "delete"}, APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}},
	{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{"storage.k8s.io"}, Resources: []string{"volumeattachments", "csidrivers", "csinodes", "storageclasses"}},
	// The kubelet keeps its node's CSINode (NodeRestriction: its own only).
	{Verbs: []string{"create", "delete", "get", "patch", "update"}, APIGroups: []string{"storage.k8s.io"}, Resources: []string{"csinodes"}},
	{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{"node.k8s.io"}, Resources: []string{"runtimeclasses"}},
	// DRA drivers on the node publish its devices (NodeRestriction: only
	// slices of the node itself).
	{Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}, APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}},
}

// NodeRules is a copy of the rules the system:node role grants.
func NodeRules() []rbacv1.PolicyRule {
	out := make([]rbacv1.PolicyRule, len(nodeRules))
	for i := range nodeRules {
		out[i] = *nodeRules[i].DeepCopy()
	}
	return out
}
