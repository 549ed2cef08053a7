package apiserver

import (
	"context"
	"errors"
	"fmt"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"

	"bonsai.dev/bonsai/apiserver/registry/networking"
	"bonsai.dev/bonsai/store"
)

// systemNamespaces exist from the start, as on every Kubernetes cluster.
var systemNamespaces = []string{"default", "kube-system", "kube-public", "kube-node-lease"}

// bootstrap creates what a cluster has before anyone writes: the system
// namespaces with their default ServiceAccounts, the built-in priority classes, and the kubernetes Service
// with its Endpoints and EndpointSlice pointing at this API server.
func (s *Server) bootstrap(ctx context.Context) error {
	for _, ns := range systemNamespaces {
		if err := s.ensure(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, gvr("", "v1", "namespaces")); err != nil {
			return err
		}
		// Pod admission needs the default account; the serviceaccount
		// controller makes it in every namespace, but the system ones
		// should not wait for a controller (nor a server run without
		// controllers, as in tests) to take pods.
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: defaultServiceAccountName, Namespace: ns}}
		if err := s.ensure(ctx, sa, gvr("", "v1", "serviceaccounts")); err != nil {
			return err
		}
	}
	for name, value := range map[string]int32{"system-node-critical": 2000001000, "system-cluster-critical": 2000000000} {
		pc := &schedulingv1.PriorityClass{
			ObjectMeta:  metav1.ObjectMeta{Name: name},
			Value:       value,
			Description: "Used for system critical pods that must not be moved from their current node.",
		}
		if name == "system-cluster-critical" {
			pc.Description = "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary."
		}
		if err := s.ensure(ctx, pc, gvr("scheduling.k8s.io", "v1", "priorityclasses")); err != nil {
			return err
		}
	}
	if err := s.ensureServiceCIDR(ctx); err != nil {
		return err
	}
	if err := s.ensureDefaultPolicy(ctx); err != nil {
		return err
	}
	if err := s.ensureLocalAPIServices(ctx); err != nil {
		return err
	}
	if err := s.ensureExtensionAuthentication(ctx); err != nil {
		return err
	}
	if err := s.ensureFlowControl(ctx); err != nil {
		return err
	}
	return s.ensureKubernetesService(ctx)
}

// kubernetesServiceInterval is how often the kubernetes Service, its
// endpoints and the system namespaces are checked, as kube-apiserver's
// bootstrap controller does: deleted, they come back.
var kubernetesServiceInterval = 10 * time.Second

// keepKubernetesService puts back, until ctx ends, the system namespaces
// and the kubernetes Service and endpoints when someone deletes them (a
// deletecollection of Services takes it too).
func (s *Server) keepKubernetesService(ctx context.Context) {
	t := time.NewTicker(kubernetesServiceInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, ns := range systemNamespaces {
			if err := s.ensure(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, gvr("", "v1", "namespaces")); err != nil && ctx.Err() == nil {
				s.log.Warn("system namespace", "namespace", ns, "err", err)
			}
		}
		if err := s.ensureKubernetesService(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("kubernetes Service", "err", err)
		}
		if err := s.updateDanglingFlowSchemas(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("flowschema status", "err", err)
		}
		if err := s.runStorageMigrations(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("storage version migrations", "err", err)
		}
	}
}

// ensureKubernetesService makes the default/kubernetes Service, its
// Endpoints and EndpointSlice point at this server.
func (s *Server) ensureKubernetesService(ctx context.Context) error {
	if !s.cfg.AdvertiseAddress.IsValid() || s.cfg.SecurePort == 0 {
		return nil
	}
	first := newServiceIPRange(s.cfg.ServiceCIDR).addr(1)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default", Labels: map[string]string{"component": "apiserver", "provider": "kubernetes"}},
		Spec: corev1.ServiceSpec{
			ClusterIP: first.String(),
			Ports:     []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(int32(s.cfg.SecurePort))}},
		},
	}
	if err := s.ensureCurrent(ctx, svc, gvr("", "v1", "services"), func(old runtime.Object) bool {
		o := old.(*corev1.Service)
		if len(o.Spec.Ports) == 1 && o.Spec.Ports[0].TargetPort == svc.Spec.Ports[0].TargetPort {
			return false
		}
		o.Spec.Ports = svc.Spec.Ports
		return true
	}); err != nil {
		return err
	}
	addr := s.cfg.AdvertiseAddress.String()
	port := int32(s.cfg.SecurePort)
	ep := &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default", Labels: map[string]string{"endpointslice.kubernetes.io/skip-mirror": "true"}},
		Subsets: []corev1.EndpointSubset{{
			Addresses: []corev1.EndpointAddress{{IP: addr}},
			Ports:     []corev1.EndpointPort{{Name: "https", Port: port, Protocol: corev1.ProtocolTCP}},
		}},
	}
	if err := s.ensureCurrent(ctx, ep, gvr("", "v1", "endpoints"), func(old runtime.Object) bool {
		o := old.(*corev1.Endpoints)
		if apiequality.Semantic.DeepEqual(o.Subsets, ep.Subsets) {
			return false
		}
		o.Subsets = ep.Subsets
		return true
	}); err != nil {
		return err
	}
	family := discoveryv1.AddressTypeIPv4
	if s.cfg.AdvertiseAddress.Is6() {
		family = discoveryv1.AddressTypeIPv6
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "kubernetes", Namespace: "default", Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"}},
		AddressType: family,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptrTo("https"), Port: &port, Protocol: ptrTo(corev1.ProtocolTCP)}},
	}
	return s.ensureCurrent(ctx, slice, gvr("discovery.k8s.io", "v1", "endpointslices"), func(old runtime.Object) bool {
		o := old.(*discoveryv1.EndpointSlice)
		if o.AddressType == slice.AddressType && apiequality.Semantic.DeepEqual(o.Endpoints, slice.Endpoints) && apiequality.Semantic.DeepEqual(o.Ports, slice.Ports) {
			return false
		}
		if o.AddressType != slice.AddressType {
			// Immutable: a server whose address changed family keeps the
			// old slice (the Endpoints above are right).
			return false
		}
		o.Endpoints, o.Ports = slice.Endpoints, slice.Ports
		return true
	})
}

// ensureCurrent creates obj if it does not exist and otherwise lets
// update bring the stored object up to date (reporting whether it changed
// it), as kube-apiserver's reconciler of the kubernetes Service does: a
// restart on another port or address must not leave clients pointed at
// the old one.
func (s *Server) ensureCurrent(ctx context.Context, obj runtime.Object, g schema.GroupVersionResource, update func(old runtime.Object) bool) error {
	res := s.reg.byGVR[g]
	m, _ := metaOf(obj)
	old, rev, err := s.getObject(ctx, res, m.GetNamespace(), m.GetName())
	if apierrors.IsNotFound(err) {
		return s.ensure(ctx, obj, g)
	}
	if err != nil {
		return err
	}
	cur := old.DeepCopyObject()
	if !update(cur) {
		return nil
	}
	wc := s.newWriteCtx(res, false)
	if _, err := s.updateObject(ctx, wc, requestInfo{namespace: m.GetNamespace(), name: m.GetName()}, cur, old, rev, "bonsai", false, false); err != nil {
		return fmt.Errorf("bootstrap %s %s: %w", res.gvr.Resource, m.GetName(), err)
	}
	return nil
}

// ensure creates obj unless an object of that name exists; an existing
// one is left as it is (a restart must not undo an admin's change).
func (s *Server) ensure(ctx context.Context, obj runtime.Object, g schema.GroupVersionResource) error {
	res := s.reg.byGVR[g]
	m, _ := metaOf(obj)
	if _, _, err := s.getObject(ctx, res, m.GetNamespace(), m.GetName()); err == nil {
		return nil
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	obj.GetObjectKind().SetGroupVersionKind(res.gvk())
	wc := s.newWriteCtx(res, false)
	if _, err := s.createObject(ctx, wc, obj, "bonsai", false); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("bootstrap %s %s: %w", res.gvr.Resource, m.GetName(), err)
	}
	return nil
}

// ensureServiceCIDR creates the "kubernetes" ServiceCIDR showing
// --service-cidr, Ready, as kube-apiserver's default ServiceCIDR
// controller does. A create clears status, so the status goes in after.
func (s *Server) ensureServiceCIDR(ctx context.Context) error {
	res := s.reg.byGVR[gvr("networking.k8s.io", "v1", "servicecidrs")]
	want := s.defaultServiceCIDR()
	if err := s.ensure(ctx, want.DeepCopy(), res.gvr); err != nil {
		return err
	}
	obj, rev, err := s.getObject(ctx, res, "", want.Name)
	if err != nil {
		return err
	}
	got := obj.(*networkingv1.ServiceCIDR)
	// A single-stack cluster restarted dual-stack: the ServiceCIDR gains
	// the secondary range, as kube-apiserver's default ServiceCIDR
	// controller upgrades it (the only change its validation allows).
	grows := len(got.Spec.CIDRs) == 1 && len(want.Spec.CIDRs) == 2 && got.Spec.CIDRs[0] == want.Spec.CIDRs[0]
	if len(got.Status.Conditions) > 0 && !grows {
		return nil
	}
	if grows {
		got.Spec.CIDRs = want.Spec.CIDRs
	}
	if len(got.Status.Conditions) == 0 {
		got.Status = want.Status
	}
	data, err := encodeForStore(res, got)
	if err != nil {
		return err
	}
	if _, err := s.cfg.Store.Update(ctx, res.key("", got.Name), data, rev); err != nil && !errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("bootstrap servicecidrs status: %w", err)
	}
	return nil
}

// defaultServiceCIDR is the ServiceCIDR that shows --service-cidr, Ready
// as kube-apiserver's default ServiceCIDR controller reports it.
func (s *Server) defaultServiceCIDR() *networkingv1.ServiceCIDR {
	var cidrs []string
	for _, p := range s.cfg.ServiceCIDRs {
		cidrs = append(cidrs, p.Masked().String())
	}
	return &networkingv1.ServiceCIDR{
		ObjectMeta: metav1.ObjectMeta{Name: networking.DefaultServiceCIDRName},
		Spec:       networkingv1.ServiceCIDRSpec{CIDRs: cidrs},
		Status: networkingv1.ServiceCIDRStatus{Conditions: []metav1.Condition{{
			Type: networkingv1.ServiceCIDRConditionReady, Status: metav1.ConditionTrue,
			Message: "Kubernetes Service CIDR is ready", LastTransitionTime: storedNow(),
		}}},
	}
}
