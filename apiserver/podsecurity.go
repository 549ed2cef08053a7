package apiserver

import (
	"context"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psaapi "k8s.io/pod-security-admission/api"

	"bonsai.dev/bonsai/apiserver/admission/podsecurity"
	"bonsai.dev/bonsai/apiserver/audit"
)

// newPodSecurity builds the PodSecurity admission over this server's
// namespaces (the namespace cache, else the store) and pods (the store).
func (s *Server) newPodSecurity(cfg *podsecurity.Configuration) (*podsecurity.Plugin, error) {
	return podsecurity.New(cfg, psaNamespaces{s}, psaPods{s}, servedMinor())
}

// servedMinor is the Kubernetes minor bonsai serves, for the plugin's
// metrics.
func servedMinor() psaapi.Version {
	parts := strings.SplitN(strings.TrimPrefix(KubernetesVersion(), "v"), ".", 3)
	if len(parts) >= 2 {
		major, err1 := strconv.Atoi(parts[0])
		minor, err2 := strconv.Atoi(parts[1])
		if err1 == nil && err2 == nil {
			return psaapi.MajorMinorVersion(major, minor)
		}
	}
	return psaapi.LatestVersion()
}

// admitPodSecurity runs the PodSecurity plugin on a create or update,
// after the strategy's validation and before the admission policies and
// validating webhooks: kube-apiserver's PodSecurity is a validating plugin
// ordered before them. Its warnings go to the response, its annotations
// to the audit event. The server's own writes (no user) and the writes a
// subresource makes on its parent are not admitted, as for webhooks.
func (s *Server) admitPodSecurity(ctx context.Context, a *admissionAttrs) error {
	res, obj, old := a.res, a.obj, a.old
	if s.podSecurity == nil || res.custom != nil || !s.podSecurity.Handles(res.gvr.GroupResource()) {
		return nil
	}
	u := a.user
	if u == nil || a.subresourceAdmitted {
		return nil
	}
	m, err := metaOf(obj)
	if err != nil {
		return nil
	}
	r := &podsecurity.Request{
		Operation: a.op, Resource: res.gvr, Subresource: a.subresource, Kind: res.gvk(),
		Namespace: m.GetNamespace(), Name: m.GetName(), UserName: u.Name,
		Object: obj, OldObject: old,
	}
	if res.gvr.Group == "" && res.gvr.Resource == "namespaces" {
		// A namespace's attributes carry its own name as their
		// namespace, as kube-apiserver's handlers set them.
		r.Namespace = m.GetName()
	}
	d := s.podSecurity.Validate(ctx, r)
	for _, w := range d.Warnings {
		addWarningTo(ctx, w)
	}
	for k, v := range d.AuditAnnotations {
		addAdmissionAnnotation(ctx, audit.LevelMetadata, k, v)
	}
	return d.Err
}

// psaNamespaces reads namespaces for PodSecurity: their labels from the
// namespace cache when it is current, else the namespace from the store.
type psaNamespaces struct{ s *Server }

func (n psaNamespaces) GetNamespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	if e, ok := n.s.nsCache.entry(name); ok {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: e.podSecurity}}, nil
	}
	obj, _, err := n.s.getObject(ctx, n.s.reg.byGVR[gvr("", "v1", "namespaces")], "", name)
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.Namespace), nil
}

// psaPods lists a namespace's pods from the store, for the dry run of a
// tighter enforce level.
type psaPods struct{ s *Server }

func (p psaPods) ListPods(ctx context.Context, namespace string) ([]*corev1.Pod, error) {
	items, _, err := p.s.listObjects(ctx, p.s.reg.byGVR[gvr("", "v1", "pods")], namespace, listOptions{})
	if err != nil {
		return nil, err
	}
	pods := make([]*corev1.Pod, 0, len(items))
	for _, it := range items {
		if pod, ok := it.(*corev1.Pod); ok {
			pods = append(pods, pod)
		}
	}
	return pods, nil
}
