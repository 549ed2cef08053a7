package apiserver

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"bonsai.dev/bonsai/apiserver/admission"
	"bonsai.dev/bonsai/apiserver/authz"
)

// newAdmissionChain is admission: kube-apiserver's plugins that bonsai
// has, under upstream's names and in upstream's order (its
// AllOrderedPlugins), one list. Every create, update, delete and connect
// goes through it (admit); the mutating plugins run in this order, then
// the validating ones in this order.
//
// Where bonsai differs from kube-apiserver, the list says so:
//
//   - kube-apiserver prepares an object with its kind's strategy after the
//     whole mutating phase. bonsai prepares a new object after
//     NodeRestriction, so LimitRanger's defaults, the plugins that follow
//     and the mutating webhooks see what the strategy set (a Service's
//     allocated cluster IP, a pod's status); an update is prepared after
//     the mutating webhooks, as upstream, which therefore see the
//     request's object. A delete checks its preconditions where a create
//     is prepared.
//   - RBAC's escalation check is no admission plugin upstream (the RBAC
//     storage does it); bonsai runs it beside NodeRestriction. Both judge
//     an update once the strategy merged it, before its validation.
//   - the kind's validation runs first in the validating phase, as
//     upstream's storage validates before its validating admission.
func (s *Server) newAdmissionChain() *admission.Chain {
	return admission.NewChain(
		namespaceLifecycle{s},
		serviceAccount{s},
		rbacEscalation{s},
		nodeRestriction{s},
		admission.PrepareStep(admission.Create, admission.Delete),
		admission.ValidateStep(admission.Create, admission.Update),
		limitRanger{s},
		admission.Priority{},
		admission.DefaultTolerationSeconds{},
		admission.DefaultStorageClass{StorageClasses: s.storageClasses},
		admission.StorageObjectInUseProtection{},
		admission.RuntimeClass{RuntimeClasses: listAll[*nodev1.RuntimeClass](s, gvr("node.k8s.io", "v1", "runtimeclasses"))},
		certificateApproval{s},
		certificateSigning{s},
		certificateSubjectRestriction{},
		clusterTrustBundleAttest{s},
		admission.DefaultIngressClass{IngressClasses: listAll[*networkingv1.IngressClass](s, gvr("networking.k8s.io", "v1", "ingressclasses"))},
		podSecurity{s},
		mutatingWebhook{s},
		admission.PrepareStep(admission.Update),
		validatingAdmissionPolicy{s},
		validatingWebhook{s},
		resourceQuota{s},
	)
}

// admit runs admission on a, with steps (the kind's own handling) at the
// places the chain marks.
func (s *Server) admit(ctx context.Context, a *admissionAttrs, steps admission.Steps) error {
	return s.admission.Run(ctx, a, steps)
}

// newAdmissionAttrs describes a write (or a connect) under admission.
func newAdmissionAttrs(ctx context.Context, wc *writeCtx, op admission.Operation, subresource, namespace, name string, obj, old runtime.Object) admissionAttrs {
	u := requestUser(ctx)
	admitted := ctx.Value(subresourceAdmittedKey{}) != nil
	return admissionAttrs{
		op: op, res: wc.res, wc: wc, subresource: subresource, namespace: namespace, name: name,
		obj: obj, old: old, dryRun: wc.DryRun, user: u, authorizer: wc.s.authorizer,
		subresourceAdmitted: admitted,
		hooked:              u != nil && !admitted && !exemptFromAdmission(wc.res),
	}
}

// admissionAttrs are admission.Attributes.
var _ admission.Attributes = (*admissionAttrs)(nil)

func (a *admissionAttrs) GetOperation() admission.Operation        { return a.op }
func (a *admissionAttrs) GetResource() schema.GroupVersionResource { return a.res.gvr }
func (a *admissionAttrs) GetSubresource() string                   { return a.subresource }
func (a *admissionAttrs) GetNamespace() string                     { return a.namespace }
func (a *admissionAttrs) GetName() string                          { return a.name }
func (a *admissionAttrs) GetObject() runtime.Object                { return a.obj }
func (a *admissionAttrs) GetOldObject() runtime.Object             { return a.old }
func (a *admissionAttrs) IsDryRun() bool                           { return a.dryRun }

// attrs is the server's own attributes behind a.
func attrs(a admission.Attributes) *admissionAttrs { return a.(*admissionAttrs) }

// storageClasses lists the StorageClasses, for DefaultStorageClass.
func (s *Server) storageClasses(ctx context.Context) ([]*storagev1.StorageClass, error) {
	res := s.reg.byGVR[gvr("storage.k8s.io", "v1", "storageclasses")]
	items, _, err := s.listObjects(ctx, res, "", listOptions{labels: labels.Everything(), fields: fields.Everything()})
	if err != nil {
		return nil, err
	}
	out := make([]*storagev1.StorageClass, len(items))
	for i, o := range items {
		out[i] = o.(*storagev1.StorageClass)
	}
	return out, nil
}

// listAll lists every object of a resource, for plugins that look at
// the cluster's classes (DefaultIngressClass).
func listAll[T runtime.Object](s *Server, r schema.GroupVersionResource) func(context.Context) ([]T, error) {
	return func(ctx context.Context) ([]T, error) {
		items, _, err := s.listObjects(ctx, s.reg.byGVR[r], "", listOptions{labels: labels.Everything(), fields: fields.Everything()})
		if err != nil {
			return nil, err
		}
		out := make([]T, len(items))
		for i, o := range items {
			out[i] = o.(T)
		}
		return out, nil
	}
}

// ---- NamespaceLifecycle

// immortalNamespaces may not be deleted, as kube-apiserver's
// NamespaceLifecycle admission refuses it.
var immortalNamespaces = map[string]bool{"default": true, "kube-system": true, "kube-public": true}

// namespaceLifecycle is NamespaceLifecycle: creating into a missing
// namespace is 404, into a terminating one 403; the namespaces the
// cluster needs may not be deleted. The server's own creates (no user:
// bootstrap, the service repair's events) are not checked.
type namespaceLifecycle struct{ s *Server }

func (namespaceLifecycle) Name() string { return "NamespaceLifecycle" }
func (namespaceLifecycle) Handles(op admission.Operation) bool {
	return op == admission.Create || op == admission.Delete
}

func (p namespaceLifecycle) Admit(ctx context.Context, aa admission.Attributes) error {
	a := attrs(aa)
	if a.op == admission.Delete {
		if a.res.gvr.Group == "" && a.res.gvr.Resource == "namespaces" && immortalNamespaces[a.name] {
			return apierrors.NewForbidden(qualified(a.res), a.name, fmt.Errorf("this namespace may not be deleted"))
		}
		return nil
	}
	if !a.res.namespaced || a.user == nil {
		return nil
	}
	ns := a.namespace
	terminating, known := p.s.nsCache.lookup(ns)
	if !known {
		nsRes := p.s.reg.byGVR[gvr("", "v1", "namespaces")]
		obj, _, err := p.s.getObject(ctx, nsRes, "", ns)
		if err != nil {
			return err
		}
		n := obj.(*corev1.Namespace)
		terminating = n.DeletionTimestamp != nil || n.Status.Phase == corev1.NamespaceTerminating
	}
	if terminating {
		// A generated name is not made yet as far as the client knows.
		name := a.name
		if a.wc.GeneratedName {
			name = ""
		}
		err := apierrors.NewForbidden(qualified(a.res), name, fmt.Errorf("unable to create new content in namespace %s because it is being terminated", ns))
		// Controllers recognise this refusal by its cause.
		err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{
			Type: corev1.NamespaceTerminatingCause, Message: fmt.Sprintf("namespace %s is being terminated", ns), Field: "metadata.namespace",
		})
		return err
	}
	return nil
}

// ---- ServiceAccount

// serviceAccount is ServiceAccount, for pods being created
// (admitPodServiceAccount).
type serviceAccount struct{ s *Server }

func (serviceAccount) Name() string                        { return "ServiceAccount" }
func (serviceAccount) Handles(op admission.Operation) bool { return op == admission.Create }
func (p serviceAccount) Admit(ctx context.Context, aa admission.Attributes) error {
	a := attrs(aa)
	if pod, ok := a.obj.(*corev1.Pod); ok && a.res.gvr == gvr("", "v1", "pods") {
		return p.s.admitPodServiceAccount(ctx, pod, a.wc.GeneratedName)
	}
	return nil
}

// ---- RBAC escalation and NodeRestriction

// rbacEscalation lets a user write a role or binding only with rules it
// holds itself (admitRBAC). It checks a create in the mutating phase and
// an update, once prepared, in the validating phase. The server's own
// writes (no user) pass.
type rbacEscalation struct{ s *Server }

func (rbacEscalation) Name() string { return "(RBAC escalation check)" }
func (rbacEscalation) Handles(op admission.Operation) bool {
	return op == admission.Create || op == admission.Update
}

func (p rbacEscalation) check(ctx context.Context, a *admissionAttrs) error {
	if a.user == nil || p.s.rbac == nil || a.res.gvr.Group != rbacv1.GroupName {
		return nil
	}
	return p.s.admitRBAC(ctx, a.user, a.res, a.obj, a.old)
}

func (p rbacEscalation) Admit(ctx context.Context, aa admission.Attributes) error {
	if a := attrs(aa); a.op == admission.Create {
		return p.check(ctx, a)
	}
	return nil
}

func (p rbacEscalation) Validate(ctx context.Context, aa admission.Attributes) error {
	if a := attrs(aa); a.op == admission.Update {
		return p.check(ctx, a)
	}
	return nil
}

// nodeRestriction is NodeRestriction: a kubelet writes only its own Node
// and Lease, mirror pods bound to itself and the status of pods bound to
// itself, and deletes only those. It checks a create or delete in the
// mutating phase and an update, once prepared, in the validating phase.
type nodeRestriction struct{ s *Server }

func (nodeRestriction) Name() string { return "NodeRestriction" }
func (nodeRestriction) Handles(op admission.Operation) bool {
	return op == admission.Create || op == admission.Update || op == admission.Delete
}

func (p nodeRestriction) check(ctx context.Context, a *admissionAttrs) error {
	if a.user == nil || p.s.rbac == nil || a.res.gvr.Group == rbacv1.GroupName {
		return nil
	}
	node, ok := authz.NodeName(a.user)
	if !ok {
		return nil
	}
	if a.op == admission.Delete {
		return p.s.admitNodeDelete(ctx, a.res, a.old, "delete")
	}
	return admitNode(node, p.s.nodeUIDOf(ctx, node), a.res, a.subresource, a.obj, a.old)
}

func (p nodeRestriction) Admit(ctx context.Context, aa admission.Attributes) error {
	if a := attrs(aa); a.op != admission.Update {
		return p.check(ctx, a)
	}
	return nil
}

func (p nodeRestriction) Validate(ctx context.Context, aa admission.Attributes) error {
	if a := attrs(aa); a.op == admission.Update {
		return p.check(ctx, a)
	}
	return nil
}

// ---- LimitRanger

// limitRanger is LimitRanger, for new pods and claims: its defaults in
// the mutating phase, its limits in the validating phase.
type limitRanger struct{ s *Server }

func (limitRanger) Name() string                        { return "LimitRanger" }
func (limitRanger) Handles(op admission.Operation) bool { return op == admission.Create }

func (p limitRanger) Admit(ctx context.Context, aa admission.Attributes) error {
	a := attrs(aa)
	return p.s.limitRangeDefaults(ctx, a.res, a.obj)
}

func (p limitRanger) Validate(ctx context.Context, aa admission.Attributes) error {
	a := attrs(aa)
	return p.s.limitRangeValidate(ctx, a.res, a.obj)
}

// ---- PodSecurity

// podSecurity is PodSecurity (admitPodSecurity).
type podSecurity struct{ s *Server }

func (podSecurity) Name() string { return "PodSecurity" }
func (podSecurity) Handles(op admission.Operation) bool {
	return op == admission.Create || op == admission.Update
}

func (p podSecurity) Validate(ctx context.Context, aa admission.Attributes) error {
	return p.s.admitPodSecurity(ctx, attrs(aa))
}

// ---- webhooks and policies

// mutatingWebhook is MutatingAdmissionWebhook. Like the policies and the
// validating webhooks it sees only the requests of users
// (admissionAttrs.hooked).
type mutatingWebhook struct{ s *Server }

func (mutatingWebhook) Name() string                     { return "MutatingAdmissionWebhook" }
func (mutatingWebhook) Handles(admission.Operation) bool { return true }
func (p mutatingWebhook) Admit(ctx context.Context, aa admission.Attributes) error {
	a := attrs(aa)
	if !a.hooked {
		return nil
	}
	if a.op == admission.Create || a.op == admission.Update {
		return p.s.admitMutating(ctx, a)
	}
	return p.s.runMutating(ctx, a)
}

// validatingAdmissionPolicy is ValidatingAdmissionPolicy.
type validatingAdmissionPolicy struct{ s *Server }

func (validatingAdmissionPolicy) Name() string                     { return "ValidatingAdmissionPolicy" }
func (validatingAdmissionPolicy) Handles(admission.Operation) bool { return true }
func (p validatingAdmissionPolicy) Validate(ctx context.Context, aa admission.Attributes) error {
	a := attrs(aa)
	if !a.hooked {
		return nil
	}
	return p.s.admitPolicies(ctx, a)
}

// validatingWebhook is ValidatingAdmissionWebhook.
type validatingWebhook struct{ s *Server }

func (validatingWebhook) Name() string                     { return "ValidatingAdmissionWebhook" }
func (validatingWebhook) Handles(admission.Operation) bool { return true }
func (p validatingWebhook) Validate(ctx context.Context, aa admission.Attributes) error {
	a := attrs(aa)
	if !a.hooked {
		return nil
	}
	return p.s.runValidatingWebhooks(ctx, a)
}

// ---- ResourceQuota

// resourceQuota is ResourceQuota (admitQuota). Of the updates, only those
// of claims (a bigger request), services (a new type) and pods can use
// more, and not once the object is being deleted.
type resourceQuota struct{ s *Server }

func (resourceQuota) Name() string { return "ResourceQuota" }
func (resourceQuota) Handles(op admission.Operation) bool {
	return op == admission.Create || op == admission.Update
}

func (p resourceQuota) Validate(ctx context.Context, aa admission.Attributes) error {
	a := attrs(aa)
	if a.op == admission.Update {
		m, _ := metaOf(a.obj)
		if a.subresource != "" || m.GetDeletionTimestamp() != nil || !growsOnUpdate(a.res) {
			return nil
		}
	}
	return p.s.admitQuota(ctx, a.res, a.obj, a.old, a.dryRun)
}
