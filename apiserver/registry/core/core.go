package core

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"bonsai.dev/bonsai/apiserver/registry"
)

// Kinds are the core group's rows of the table of served kinds.
func Kinds() []registry.Kind {
	all := []string{"all"}
	return []registry.Kind{
		{GVR: registry.GVR("", "v1", "namespaces"), Kind: "Namespace", ShortNames: []string{"ns"}, Subresources: []string{"status", "finalize"},
			Strategy: namespaceStrategy{}, Defaulter: defaultNamespace, Printer: &namespacePrinter, Fields: fieldsNamespace},
		{GVR: registry.GVR("", "v1", "nodes"), Kind: "Node", ShortNames: []string{"no"}, Subresources: []string{"status"},
			Strategy: nodeStrategy{}, Printer: &nodePrinter, Fields: fieldsNode},
		{GVR: registry.GVR("", "v1", "pods"), Kind: "Pod", Namespaced: true, ShortNames: []string{"po"}, Categories: all,
			Subresources: []string{"status", "binding", "eviction", "ephemeralcontainers", "log", "exec", "attach", "portforward"},
			Strategy:     podStrategy{}, Defaulter: defaultPod, Printer: &podPrinter, ReturnDeleted: true, Fields: fieldsPod},
		{GVR: registry.GVR("", "v1", "services"), Kind: "Service", Namespaced: true, ShortNames: []string{"svc"}, Categories: all, Subresources: []string{"status"},
			Strategy: serviceStrategy{}, Defaulter: defaultServiceObject, Printer: &servicePrinter, NoCollection: true},
		{GVR: registry.GVR("", "v1", "endpoints"), Kind: "Endpoints", ListKind: "EndpointsList", Singular: "endpoints", Namespaced: true, ShortNames: []string{"ep"},
			Defaulter: defaultEndpoints, Printer: &endpointsPrinter, AllowCreateOnUpdate: true},
		{GVR: registry.GVR("", "v1", "configmaps"), Kind: "ConfigMap", Namespaced: true, ShortNames: []string{"cm"}, Strategy: configMapStrategy{}, Printer: &configMapPrinter},
		{GVR: registry.GVR("", "v1", "secrets"), Kind: "Secret", Namespaced: true, Strategy: secretStrategy{}, Defaulter: defaultSecret, Printer: &secretPrinter, Fields: fieldsSecret},
		{GVR: registry.GVR("", "v1", "serviceaccounts"), Kind: "ServiceAccount", Namespaced: true, ShortNames: []string{"sa"}, Subresources: []string{"token"}, Printer: &serviceAccountPrinter},
		{GVR: registry.GVR("", "v1", "events"), Kind: "Event", Namespaced: true, ShortNames: []string{"ev"}, Printer: &coreEventPrinter, Fields: fieldsEvent},
		// Upstream has no columns of its own for LimitRanges.
		{GVR: registry.GVR("", "v1", "limitranges"), Kind: "LimitRange", Namespaced: true, ShortNames: []string{"limits"}, Defaulter: defaultLimitRangeObject, Printer: registry.DefaultPrinter},
		{GVR: registry.GVR("", "v1", "resourcequotas"), Kind: "ResourceQuota", Namespaced: true, ShortNames: []string{"quota"}, Subresources: []string{"status"}, Printer: &resourceQuotaPrinter},
		{GVR: registry.GVR("", "v1", "podtemplates"), Kind: "PodTemplate", Namespaced: true, Defaulter: defaultPodTemplate, Printer: &podTemplatePrinter},
		{GVR: registry.GVR("", "v1", "persistentvolumes"), Kind: "PersistentVolume", ShortNames: []string{"pv"}, Subresources: []string{"status"},
			Strategy: persistentVolumeStrategy{}, Defaulter: defaultPersistentVolume, Printer: &persistentVolumePrinter},
		{GVR: registry.GVR("", "v1", "persistentvolumeclaims"), Kind: "PersistentVolumeClaim", Namespaced: true, ShortNames: []string{"pvc"}, Subresources: []string{"status"},
			Strategy: claimStrategy{}, Defaulter: defaultPersistentVolumeClaim, Printer: &persistentVolumeClaimPrinter},
		{GVR: registry.GVR("", "v1", "replicationcontrollers"), Kind: "ReplicationController", Namespaced: true, ShortNames: []string{"rc"}, Categories: all, Subresources: []string{"status", "scale"},
			Defaulter: defaultReplicationController, Printer: &replicationControllerPrinter},
	}
}

// ---- namespaces

type namespaceStrategy struct{ registry.DefaultStrategy }

// NamespaceNameLabel is the label every namespace carries with its name.
const NamespaceNameLabel = "kubernetes.io/metadata.name"

func (namespaceStrategy) PrepareForCreate(w *registry.WriteCtx, obj runtime.Object) error {
	ns := obj.(*corev1.Namespace)
	ns.Status = corev1.NamespaceStatus{Phase: corev1.NamespaceActive}
	ns.Spec.Finalizers = []corev1.FinalizerName{corev1.FinalizerKubernetes}
	setNamespaceNameLabel(ns)
	return nil
}

func (namespaceStrategy) PrepareForUpdate(w *registry.WriteCtx, obj, old runtime.Object) error {
	ns, o := obj.(*corev1.Namespace), old.(*corev1.Namespace)
	ns.Status = o.Status
	ns.Spec.Finalizers = o.Spec.Finalizers
	setNamespaceNameLabel(ns)
	return nil
}

func setNamespaceNameLabel(ns *corev1.Namespace) {
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	ns.Labels[NamespaceNameLabel] = ns.Name
}

func (namespaceStrategy) BlocksDeletion(obj runtime.Object) bool {
	return len(obj.(*corev1.Namespace).Spec.Finalizers) > 0
}

func (namespaceStrategy) MarkDeleting(obj runtime.Object) {
	obj.(*corev1.Namespace).Status.Phase = corev1.NamespaceTerminating
}

// ---- nodes

type nodeStrategy struct{ registry.DefaultStrategy }

// The kubelet registers its node with status; keep it.
func (nodeStrategy) PrepareForCreate(w *registry.WriteCtx, obj runtime.Object) error { return nil }

func (nodeStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	n, o := obj.(*corev1.Node), old.(*corev1.Node)
	var errs field.ErrorList
	if o.Spec.PodCIDR != "" && n.Spec.PodCIDR != o.Spec.PodCIDR {
		errs = append(errs, field.Forbidden(field.NewPath("spec", "podCIDR"), "node updates may not change podCIDR except from \"\" to valid"))
	}
	return errs
}

// ---- pods

type podStrategy struct{ registry.GenerationStrategy }

func (podStrategy) PrepareForCreate(w *registry.WriteCtx, obj runtime.Object) error {
	p := obj.(*corev1.Pod)
	p.Status = corev1.PodStatus{Phase: corev1.PodPending, QOSClass: qosClass(p)}
	// The deprecated field mirrors the account (ServiceAccount
	// admission's, which ran before), as v1 conversion keeps it. The
	// default tolerations and the priority are admission's, which runs
	// after (admission_chain.go).
	p.Spec.DeprecatedServiceAccount = p.Spec.ServiceAccountName
	return nil
}

func qosClass(p *corev1.Pod) corev1.PodQOSClass {
	requests, limits := corev1.ResourceList{}, corev1.ResourceList{}
	guaranteed := true
	all := append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...)
	for _, c := range all {
		for k, v := range c.Resources.Requests {
			if k == corev1.ResourceCPU || k == corev1.ResourceMemory {
				if !v.IsZero() {
					requests[k] = v
				}
			}
		}
		has := 0
		for k, v := range c.Resources.Limits {
			if k == corev1.ResourceCPU || k == corev1.ResourceMemory {
				if !v.IsZero() {
					limits[k] = v
					has++
				}
			}
		}
		if has < 2 {
			guaranteed = false
		}
		for _, k := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, okR := c.Resources.Requests[k]
			lim, okL := c.Resources.Limits[k]
			if okR && okL && req.Cmp(lim) != 0 {
				guaranteed = false
			}
		}
	}
	switch {
	case len(requests) == 0 && len(limits) == 0:
		return corev1.PodQOSBestEffort
	case guaranteed:
		return corev1.PodQOSGuaranteed
	}
	return corev1.PodQOSBurstable
}

func (podStrategy) PrepareForUpdate(w *registry.WriteCtx, obj, old runtime.Object) error {
	obj.(*corev1.Pod).Status = old.(*corev1.Pod).Status
	return nil
}

// gracePeriod: an unscheduled or finished pod goes at once; a running one
// waits for its kubelet, as long as the client or the pod spec says.
func (podStrategy) GracePeriod(obj runtime.Object, requested *int64) int64 {
	p := obj.(*corev1.Pod)
	if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return 0
	}
	if requested != nil {
		return *requested
	}
	if p.Spec.TerminationGracePeriodSeconds != nil {
		return *p.Spec.TerminationGracePeriodSeconds
	}
	return corev1.DefaultTerminationGracePeriodSeconds
}

func (podStrategy) Validate(w *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	spec, p := &obj.(*corev1.Pod).Spec, field.NewPath("spec")
	return append(ValidatePodSpec(spec, p), ValidateHostPorts(spec, w.Env.ReservedHostPorts, p)...)
}

// validateUpdate allows only the fields Kubernetes lets change on a pod.
func (podStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	p, o := obj.(*corev1.Pod), old.(*corev1.Pod)
	errs := ValidatePodSpec(&p.Spec, field.NewPath("spec"))
	mutable := p.Spec.DeepCopy()
	for i := range mutable.Containers {
		if i < len(o.Spec.Containers) {
			mutable.Containers[i].Image = o.Spec.Containers[i].Image
		}
	}
	for i := range mutable.InitContainers {
		if i < len(o.Spec.InitContainers) {
			mutable.InitContainers[i].Image = o.Spec.InitContainers[i].Image
		}
	}
	mutable.ActiveDeadlineSeconds = o.Spec.ActiveDeadlineSeconds
	mutable.TerminationGracePeriodSeconds = o.Spec.TerminationGracePeriodSeconds
	if len(mutable.Tolerations) >= len(o.Spec.Tolerations) && apiequality.Semantic.DeepEqual(mutable.Tolerations[:len(o.Spec.Tolerations)], o.Spec.Tolerations) {
		mutable.Tolerations = o.Spec.Tolerations
	}
	// The scheduler's binding and the kubelet's ephemeral containers are
	// set through their own subresources.
	mutable.EphemeralContainers = o.Spec.EphemeralContainers
	if o.Spec.NodeName == "" {
		mutable.NodeName = ""
		cp := o.Spec.DeepCopy()
		cp.NodeName = ""
		if !apiequality.Semantic.DeepEqual(mutable, cp) {
			errs = append(errs, podUpdateForbidden())
		}
		return errs
	}
	if !apiequality.Semantic.DeepEqual(mutable, &o.Spec) {
		errs = append(errs, podUpdateForbidden())
	}
	return errs
}

func podUpdateForbidden() *field.Error {
	return field.Forbidden(field.NewPath("spec"), "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)")
}

// ---- secrets

type secretStrategy struct{ registry.DefaultStrategy }

func (secretStrategy) PrepareForCreate(w *registry.WriteCtx, obj runtime.Object) error {
	foldStringData(obj.(*corev1.Secret))
	return nil
}

func (secretStrategy) PrepareForUpdate(w *registry.WriteCtx, obj, old runtime.Object) error {
	foldStringData(obj.(*corev1.Secret))
	return nil
}

// foldStringData moves stringData into data, as the API does on write.
func foldStringData(s *corev1.Secret) {
	if len(s.StringData) == 0 {
		return
	}
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	for k, v := range s.StringData {
		s.Data[k] = []byte(v)
	}
	s.StringData = nil
}

func (secretStrategy) Validate(w *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	errs, total := validateDataKeys(obj.(*corev1.Secret).Data, field.NewPath("data"))
	if total > corev1.MaxSecretSize {
		errs = append(errs, field.TooLong(field.NewPath("data"), "", corev1.MaxSecretSize))
	}
	return errs
}

// validateDataKeys checks ConfigMap and Secret keys as Kubernetes does and
// returns the size of the values.
func validateDataKeys[V string | []byte](data map[string]V, path *field.Path) (field.ErrorList, int) {
	var errs field.ErrorList
	total := 0
	for k, v := range data {
		for _, msg := range validation.IsConfigMapKey(k) {
			errs = append(errs, field.Invalid(path.Key(k), k, msg))
		}
		total += len(v)
	}
	return errs, total
}

func (st secretStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	s, o := obj.(*corev1.Secret), old.(*corev1.Secret)
	errs := st.Validate(w, obj)
	if s.Type != o.Type {
		errs = append(errs, field.Invalid(field.NewPath("type"), s.Type, "field is immutable"))
	}
	if o.Immutable != nil && *o.Immutable {
		if s.Immutable == nil || !*s.Immutable || !reflect.DeepEqual(s.Data, o.Data) {
			errs = append(errs, field.Forbidden(field.NewPath("data"), "field is immutable when `immutable` is set"))
		}
	}
	return errs
}

// persistentVolumeStrategy and claimStrategy start volumes and claims in
// the Pending phase, as Kubernetes does, whatever status the client sent.
// The protection finalizers and the default StorageClass are admission's
// (StorageObjectInUseProtection, DefaultStorageClass).
type persistentVolumeStrategy struct{ registry.DefaultStrategy }

func (persistentVolumeStrategy) PrepareForCreate(w *registry.WriteCtx, obj runtime.Object) error {
	pv := obj.(*corev1.PersistentVolume)
	pv.Status = corev1.PersistentVolumeStatus{Phase: corev1.VolumePending}
	return nil
}

type claimStrategy struct{ registry.DefaultStrategy }

func (claimStrategy) PrepareForCreate(w *registry.WriteCtx, obj runtime.Object) error {
	pvc := obj.(*corev1.PersistentVolumeClaim)
	pvc.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}
	return nil
}

// configMapStrategy validates ConfigMap keys and size as Kubernetes does.
type configMapStrategy struct{ registry.DefaultStrategy }

func (configMapStrategy) Validate(w *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	c := obj.(*corev1.ConfigMap)
	errs, total := validateDataKeys(c.Data, field.NewPath("data"))
	binErrs, binTotal := validateDataKeys(c.BinaryData, field.NewPath("binaryData"))
	errs, total = append(errs, binErrs...), total+binTotal
	for k := range c.Data {
		if _, dup := c.BinaryData[k]; dup {
			errs = append(errs, field.Invalid(field.NewPath("data").Key(k), k, "duplicate of key present in binaryData"))
		}
	}
	if total > corev1.MaxSecretSize {
		errs = append(errs, field.TooLong(field.NewPath(""), "", corev1.MaxSecretSize))
	}
	return errs
}

func (st configMapStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	errs := st.Validate(w, obj)
	c, o := obj.(*corev1.ConfigMap), old.(*corev1.ConfigMap)
	if o.Immutable != nil && *o.Immutable {
		if c.Immutable == nil || !*c.Immutable {
			errs = append(errs, field.Forbidden(field.NewPath("immutable"), "field is immutable when `immutable` is set"))
		}
		if !equalStringMaps(c.Data, o.Data) || len(c.BinaryData) != len(o.BinaryData) {
			errs = append(errs, field.Forbidden(field.NewPath("data"), "field is immutable when `immutable` is set"))
		}
	}
	return errs
}

func equalStringMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

// serviceStrategy allocates cluster IPs and node ports and validates
// Services as kube-apiserver does.
type serviceStrategy struct{ registry.DefaultStrategy }

func (serviceStrategy) PrepareForCreate(w *registry.WriteCtx, obj runtime.Object) error {
	svc := obj.(*corev1.Service)
	svc.Status = corev1.ServiceStatus{}
	// clusterIP and clusterIPs[0] are one field, whichever the client set.
	if len(svc.Spec.ClusterIPs) == 0 && svc.Spec.ClusterIP != "" {
		svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}
	} else if svc.Spec.ClusterIP == "" && len(svc.Spec.ClusterIPs) > 0 {
		svc.Spec.ClusterIP = svc.Spec.ClusterIPs[0]
	}
	errs := validateServiceSpec(w, svc)
	errs = append(errs, initIPFamilies(w, svc)...)
	if len(errs) > 0 {
		return w.Invalid(svc.Name, errs)
	}
	return allocateService(context.Background(), w, svc, nil)
}

func (serviceStrategy) PrepareForUpdate(w *registry.WriteCtx, obj, old runtime.Object) error {
	svc, o := obj.(*corev1.Service), old.(*corev1.Service)
	svc.Status = o.Status
	// What the server allocated stays when the client leaves it out, as
	// kube-apiserver's patchAllocatedValues does.
	if svc.Spec.ClusterIP == "" && svc.Spec.Type != corev1.ServiceTypeExternalName {
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = o.Spec.ClusterIP, o.Spec.ClusterIPs
	}
	// A client that sets only clusterIP (an old one) means clusterIPs[0]
	// to follow it, as kube-apiserver's normalizeClusterIPs reads it.
	switch {
	case len(svc.Spec.ClusterIPs) == 0 && svc.Spec.ClusterIP == o.Spec.ClusterIP:
		svc.Spec.ClusterIPs = o.Spec.ClusterIPs
	case svc.Spec.ClusterIP != o.Spec.ClusterIP && (len(svc.Spec.ClusterIPs) == 0 || slices.Equal(svc.Spec.ClusterIPs, o.Spec.ClusterIPs)):
		svc.Spec.ClusterIPs = nil
		if svc.Spec.ClusterIP != "" {
			svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}
		}
	}
	if svc.Spec.IPFamilyPolicy == nil {
		svc.Spec.IPFamilyPolicy = o.Spec.IPFamilyPolicy
	}
	if len(svc.Spec.IPFamilies) == 0 {
		svc.Spec.IPFamilies = o.Spec.IPFamilies
	}
	if needsNodePorts(svc) && needsNodePorts(o) {
		for i := range svc.Spec.Ports {
			if svc.Spec.Ports[i].NodePort != 0 {
				continue
			}
			for _, op := range o.Spec.Ports {
				if op.Port == svc.Spec.Ports[i].Port && op.Protocol == svc.Spec.Ports[i].Protocol {
					svc.Spec.Ports[i].NodePort = op.NodePort
				}
			}
		}
	}
	// The health check port follows its need: kept while the Service
	// still needs it, dropped with the need unless the client changed it.
	switch hc := &svc.Spec.HealthCheckNodePort; {
	case *hc == 0 && needsHealthCheck(svc) && needsHealthCheck(o):
		*hc = o.Spec.HealthCheckNodePort
	case *hc == o.Spec.HealthCheckNodePort && !needsHealthCheck(svc) && needsHealthCheck(o):
		*hc = 0
	}
	errs := validateServiceSpec(w, svc)
	errs = append(errs, initIPFamilies(w, svc)...)
	if len(errs) > 0 {
		return w.Invalid(svc.Name, errs)
	}
	return allocateService(context.Background(), w, svc, o)
}

func (serviceStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	svc, o := obj.(*corev1.Service), old.(*corev1.Service)
	var errs field.ErrorList
	if o.Spec.ClusterIP != "" && svc.Spec.Type != corev1.ServiceTypeExternalName && o.Spec.Type != corev1.ServiceTypeExternalName && svc.Spec.ClusterIP != o.Spec.ClusterIP {
		errs = append(errs, field.Invalid(field.NewPath("spec", "clusterIPs").Index(0), svc.Spec.ClusterIP, "may not change once set"))
	}
	return errs
}

func needsNodePorts(s *corev1.Service) bool {
	return s.Spec.Type == corev1.ServiceTypeNodePort ||
		(s.Spec.Type == corev1.ServiceTypeLoadBalancer && (s.Spec.AllocateLoadBalancerNodePorts == nil || *s.Spec.AllocateLoadBalancerNodePorts))
}

// needsHealthCheck: a LoadBalancer that keeps traffic on the node gets a
// node port for the load balancer's health checks.
func needsHealthCheck(s *corev1.Service) bool {
	return s.Spec.Type == corev1.ServiceTypeLoadBalancer && s.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
}

func validateServiceSpec(w *registry.WriteCtx, svc *corev1.Service) field.ErrorList {
	p := field.NewPath("spec")
	var errs field.ErrorList
	if hc := svc.Spec.HealthCheckNodePort; hc != 0 {
		r := w.Env.NodePortRange
		if !needsHealthCheck(svc) {
			errs = append(errs, field.Forbidden(p.Child("healthCheckNodePort"), "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'"))
		} else if int(hc) < r.Base || int(hc) > r.Max {
			errs = append(errs, field.Invalid(p.Child("healthCheckNodePort"), hc, fmt.Sprintf("provided port is not in the valid range. The range of valid ports is %d-%d", r.Base, r.Max)))
		}
	}
	switch svc.Spec.Type {
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
		if len(svc.Spec.Ports) == 0 && svc.Spec.ClusterIP != corev1.ClusterIPNone {
			errs = append(errs, field.Required(p.Child("ports"), ""))
		}
	case corev1.ServiceTypeExternalName:
		if svc.Spec.ExternalName == "" {
			errs = append(errs, field.Required(p.Child("externalName"), ""))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("type"), svc.Spec.Type, []string{"ClusterIP", "ExternalName", "LoadBalancer", "NodePort"}))
	}
	errs = append(errs, validateSessionAffinity(svc)...)
	if svc.Spec.Type == corev1.ServiceTypeNodePort && svc.Spec.ClusterIP == corev1.ClusterIPNone {
		errs = append(errs, field.Invalid(p.Child("clusterIPs").Index(0), svc.Spec.ClusterIP, "may not be set to 'None' for NodePort services"))
	}
	seen := map[string]bool{}
	names := map[string]bool{}
	nodePorts := map[corev1.ServicePort]bool{}
	for i, port := range svc.Spec.Ports {
		pp := p.Child("ports").Index(i)
		for _, msg := range validation.IsValidPortNum(int(port.Port)) {
			errs = append(errs, field.Invalid(pp.Child("port"), port.Port, msg))
		}
		if len(svc.Spec.Ports) > 1 && port.Name == "" {
			errs = append(errs, field.Required(pp.Child("name"), ""))
		}
		if port.Name != "" {
			for _, msg := range validation.IsDNS1123Label(port.Name) {
				errs = append(errs, field.Invalid(pp.Child("name"), port.Name, msg))
			}
			if names[port.Name] {
				errs = append(errs, field.Duplicate(pp.Child("name"), port.Name))
			}
			names[port.Name] = true
		}
		switch port.Protocol {
		case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
		default:
			errs = append(errs, field.NotSupported(pp.Child("protocol"), port.Protocol, []string{"SCTP", "TCP", "UDP"}))
		}
		key := fmt.Sprintf("%d/%s", port.Port, port.Protocol)
		if seen[key] {
			errs = append(errs, field.Duplicate(pp, key))
		}
		seen[key] = true
		if port.NodePort != 0 {
			r := w.Env.NodePortRange
			np := corev1.ServicePort{NodePort: port.NodePort, Protocol: port.Protocol}
			if nodePorts[np] {
				errs = append(errs, field.Duplicate(pp.Child("nodePort"), port.NodePort))
			}
			nodePorts[np] = true
			if svc.Spec.Type == corev1.ServiceTypeClusterIP {
				errs = append(errs, field.Forbidden(pp.Child("nodePort"), "may not be used when `type` is 'ClusterIP'"))
			} else if int(port.NodePort) < r.Base || int(port.NodePort) > r.Max {
				errs = append(errs, field.Invalid(pp.Child("nodePort"), port.NodePort, fmt.Sprintf("provided port is not in the valid range. The range of valid ports is %d-%d", r.Base, r.Max)))
			}
		}
		if port.TargetPort.IntValue() == 0 && port.TargetPort.StrVal == "" {
			errs = append(errs, field.Required(pp.Child("targetPort"), ""))
		}
	}
	ips := svc.Spec.ClusterIPs
	if len(ips) > 0 && svc.Spec.ClusterIP != "" && ips[0] != svc.Spec.ClusterIP {
		errs = append(errs, field.Invalid(p.Child("clusterIPs"), ips, "first value must match `clusterIP`"))
	}
	// The service range has one family: a second IP has nowhere to be.
	if len(ips) > 1 && ips[0] != corev1.ClusterIPNone {
		first, err1 := netip.ParseAddr(ips[0])
		second, err2 := netip.ParseAddr(ips[1])
		switch {
		case err1 != nil || err2 != nil:
			errs = append(errs, field.Invalid(p.Child("clusterIPs").Index(1), ips[1], "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"))
		case first.Is4() == second.Is4():
			errs = append(errs, field.Invalid(p.Child("clusterIPs").Index(1), ips[1], "may specify no more than one IP for each IP family"))
		default:
			errs = append(errs, field.Invalid(p.Child("clusterIPs").Index(1), ips, fmt.Sprintf("%s is not configured on this cluster", ipFamilyOf(second))))
		}
	}
	if ip := svc.Spec.ClusterIP; ip != "" && ip != corev1.ClusterIPNone {
		addr, err := netip.ParseAddr(ip)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(p.Child("clusterIPs").Index(0), ip, "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"))
		case !w.Env.ServiceCIDR.Contains(addr):
			errs = append(errs, field.Invalid(p.Child("clusterIPs").Index(0), ip, fmt.Sprintf("failed to allocate IP %s: the provided network does not match the current range", ip)))
		}
	}
	return errs
}

// maxClientIPServiceAffinitySeconds caps ClientIP affinity at a day, as
// Kubernetes does.
const maxClientIPServiceAffinitySeconds = 86400

func validateSessionAffinity(svc *corev1.Service) field.ErrorList {
	p := field.NewPath("spec")
	cfg := svc.Spec.SessionAffinityConfig
	switch svc.Spec.SessionAffinity {
	case corev1.ServiceAffinityNone:
		if cfg != nil {
			return field.ErrorList{field.Invalid(p.Child("sessionAffinityConfig"), cfg, "must not be set when session affinity is None")}
		}
	case corev1.ServiceAffinityClientIP:
		t := cfg.ClientIP.TimeoutSeconds // defaulted
		if *t <= 0 || *t > maxClientIPServiceAffinitySeconds {
			return field.ErrorList{field.Invalid(p.Child("sessionAffinityConfig", "clientIP", "timeoutSeconds"), *t, fmt.Sprintf("must be greater than 0 and less than %d", maxClientIPServiceAffinitySeconds))}
		}
	default:
		return field.ErrorList{field.NotSupported(p.Child("sessionAffinity"), svc.Spec.SessionAffinity, []string{"ClientIP", "None"})}
	}
	return nil
}

// initIPFamilies defaults ipFamilyPolicy and ipFamilies and refuses what
// the cluster cannot give, as kube-apiserver does: bonsai's service range
// has one family, so a Service may not require two.
func initIPFamilies(w *registry.WriteCtx, svc *corev1.Service) field.ErrorList {
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	family := corev1.IPv4Protocol
	if w.Env.ServiceCIDR.Addr().Is6() {
		family = corev1.IPv6Protocol
	}
	other := map[corev1.IPFamily]corev1.IPFamily{corev1.IPv4Protocol: corev1.IPv6Protocol, corev1.IPv6Protocol: corev1.IPv4Protocol}
	headlessNoSelector := svc.Spec.ClusterIP == corev1.ClusterIPNone && len(svc.Spec.Selector) == 0
	if svc.Spec.IPFamilyPolicy == nil {
		svc.Spec.IPFamilyPolicy = ptrTo(corev1.IPFamilyPolicySingleStack)
		if headlessNoSelector {
			svc.Spec.IPFamilyPolicy = ptrTo(corev1.IPFamilyPolicyRequireDualStack)
		}
	}
	p := field.NewPath("spec")
	policy := *svc.Spec.IPFamilyPolicy
	var errs field.ErrorList
	switch policy {
	case corev1.IPFamilyPolicySingleStack, corev1.IPFamilyPolicyPreferDualStack, corev1.IPFamilyPolicyRequireDualStack:
	default:
		return field.ErrorList{field.NotSupported(p.Child("ipFamilyPolicy"), policy, []string{"PreferDualStack", "RequireDualStack", "SingleStack"})}
	}
	if policy == corev1.IPFamilyPolicySingleStack && len(svc.Spec.ClusterIPs) > 1 {
		errs = append(errs, field.Invalid(p.Child("ipFamilyPolicy"), policy, "must be 'RequireDualStack' or 'PreferDualStack' when multiple cluster IPs are specified"))
	}
	if policy == corev1.IPFamilyPolicySingleStack && len(svc.Spec.IPFamilies) > 1 {
		errs = append(errs, field.Invalid(p.Child("ipFamilyPolicy"), policy, "must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified"))
	}
	for i, f := range svc.Spec.IPFamilies {
		if f != corev1.IPv4Protocol && f != corev1.IPv6Protocol {
			errs = append(errs, field.NotSupported(p.Child("ipFamilies").Index(i), f, []string{"IPv4", "IPv6"}))
		}
	}
	if len(errs) > 0 {
		return errs
	}
	if headlessNoSelector {
		// A headless Service without selector may name families the
		// cluster lacks: its endpoints are the user's.
		if len(svc.Spec.IPFamilies) == 0 {
			svc.Spec.IPFamilies = []corev1.IPFamily{family}
		}
		if len(svc.Spec.IPFamilies) == 1 && policy != corev1.IPFamilyPolicySingleStack {
			svc.Spec.IPFamilies = append(svc.Spec.IPFamilies, other[svc.Spec.IPFamilies[0]])
		}
		return nil
	}
	if policy == corev1.IPFamilyPolicyRequireDualStack {
		errs = append(errs, field.Invalid(p.Child("ipFamilyPolicy"), policy, "this cluster is not configured for dual-stack services"))
	}
	for i, f := range svc.Spec.IPFamilies {
		if f != family {
			errs = append(errs, field.Invalid(p.Child("ipFamilies").Index(i), f, "not configured on this cluster"))
		}
	}
	if len(svc.Spec.IPFamilies) == 0 {
		svc.Spec.IPFamilies = []corev1.IPFamily{family}
	}
	return errs
}

// allocateService takes in the store the cluster IP and node ports svc
// needs and old (nil on create) does not hold, and arranges with w that
// they are given back if the write fails and that what old held and svc
// no longer does is given back once the write is stored.
func allocateService(ctx context.Context, w *registry.WriteCtx, svc, old *corev1.Service) error {
	s := w.Env.Services
	ctx = context.WithoutCancel(ctx)
	var oldIPs []netip.Addr
	var oldPorts []int32
	if old != nil {
		oldIPs, oldPorts = ServiceIPs(old), ServiceNodePorts(old)
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "", nil
		svc.Spec.IPFamilies, svc.Spec.IPFamilyPolicy = nil, nil
	} else if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
		switch {
		case svc.Spec.ClusterIP == "":
			if ip, err = s.TakeNextIP(ctx, svc, w.DryRun); err != nil {
				return apierrors.NewInternalError(fmt.Errorf("failed to allocate a serviceIP: %w", err))
			}
			w.OnFailure(func() error { return s.ReleaseIP(ctx, ip, svc.Namespace, svc.Name) })
		case err != nil || slices.Contains(oldIPs, ip):
			// Validation has refused a malformed IP; a held one stays.
		default:
			if err := s.TakeIP(ctx, ip, svc, w.DryRun); err != nil {
				if errors.Is(err, registry.ErrIPAllocated) {
					return w.Invalid(svc.Name, field.ErrorList{field.Invalid(field.NewPath("spec", "clusterIPs"), svc.Spec.ClusterIPs, fmt.Sprintf("failed to allocate IP %s: %v", ip, err))})
				}
				return apierrors.NewInternalError(err)
			}
			w.OnFailure(func() error { return s.ReleaseIP(ctx, ip, svc.Namespace, svc.Name) })
		}
		svc.Spec.ClusterIP = ip.String()
		svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}
	} else {
		// Headless: nothing to allocate.
		svc.Spec.ClusterIPs = []string{corev1.ClusterIPNone}
	}
	kept, err := allocateNodePorts(ctx, w, svc, oldPorts)
	if err != nil {
		return err
	}
	if old == nil {
		return nil
	}
	// What the stored Service no longer holds goes once it is stored.
	newIPs := ServiceIPs(svc)
	for _, ip := range oldIPs {
		if !slices.Contains(newIPs, ip) {
			w.OnSuccess(func() error { return s.ReleaseIP(ctx, ip, old.Namespace, old.Name) })
		}
	}
	for _, p := range oldPorts {
		if !slices.Contains(kept, p) {
			w.OnSuccess(func() error { return s.ReleaseNodePort(ctx, p, old) })
		}
	}
	return nil
}

// allocateNodePorts records the node ports svc asks for, then gives the
// ports that lack one a free port (a port number served over several
// protocols shares one node port, as upstream). It returns the node ports
// svc holds after the write.
func allocateNodePorts(ctx context.Context, w *registry.WriteCtx, svc *corev1.Service, oldPorts []int32) ([]int32, error) {
	s := w.Env.Services
	if svc.Spec.Type != corev1.ServiceTypeNodePort && svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		for i := range svc.Spec.Ports {
			svc.Spec.Ports[i].NodePort = 0
		}
		return nil, nil
	}
	var held []int32
	for i, sp := range svc.Spec.Ports {
		if sp.NodePort == 0 || slices.Contains(held, sp.NodePort) {
			continue
		}
		if !slices.Contains(oldPorts, sp.NodePort) {
			if err := s.RecordNodePort(ctx, sp.NodePort, svc, w.DryRun); err != nil {
				if errors.Is(err, registry.ErrPortAllocated) {
					return nil, w.Invalid(svc.Name, field.ErrorList{field.Invalid(field.NewPath("spec", "ports").Index(i).Child("nodePort"), sp.NodePort, err.Error())})
				}
				return nil, apierrors.NewInternalError(err)
			}
			p := sp.NodePort
			w.OnFailure(func() error { return s.ReleaseNodePort(ctx, p, svc) })
		}
		held = append(held, sp.NodePort)
	}
	if needsNodePorts(svc) {
		var err error
		if held, err = allocateMissingNodePorts(ctx, w, svc, held); err != nil {
			return nil, err
		}
	}
	if !needsHealthCheck(svc) {
		return held, nil
	}
	hc := &svc.Spec.HealthCheckNodePort
	switch {
	case *hc == 0:
		p, err := s.TakeNextNodePort(ctx, svc, held, w.DryRun)
		if err != nil {
			return nil, apierrors.NewInternalError(fmt.Errorf("failed to allocate a HealthCheck NodePort %d: %w", p, err))
		}
		w.OnFailure(func() error { return s.ReleaseNodePort(ctx, p, svc) })
		*hc = p
	case !slices.Contains(oldPorts, *hc):
		if err := s.RecordNodePort(ctx, *hc, svc, w.DryRun); err != nil {
			return nil, apierrors.NewInternalError(fmt.Errorf("failed to allocate requested HealthCheck NodePort %d: %w", *hc, err))
		}
		p := *hc
		w.OnFailure(func() error { return s.ReleaseNodePort(ctx, p, svc) })
	}
	return append(held, *hc), nil
}

// allocateMissingNodePorts gives each port without a node port one,
// returning held with the ports it took.
func allocateMissingNodePorts(ctx context.Context, w *registry.WriteCtx, svc *corev1.Service, held []int32) ([]int32, error) {
	s := w.Env.Services
	byPort := map[int32]int32{}
	for _, sp := range svc.Spec.Ports {
		if sp.NodePort != 0 {
			byPort[sp.Port] = sp.NodePort
		}
	}
	for i := range svc.Spec.Ports {
		sp := &svc.Spec.Ports[i]
		if sp.NodePort != 0 {
			continue
		}
		if np, ok := byPort[sp.Port]; ok {
			sp.NodePort = np
			continue
		}
		p, err := s.TakeNextNodePort(ctx, svc, held, w.DryRun)
		if err != nil {
			return nil, apierrors.NewInternalError(fmt.Errorf("failed to allocate a nodePort: %w", err))
		}
		w.OnFailure(func() error { return s.ReleaseNodePort(ctx, p, svc) })
		sp.NodePort, byPort[sp.Port] = p, p
		held = append(held, p)
	}
	return held, nil
}

func ipFamilyOf(ip netip.Addr) corev1.IPFamily {
	if ip.Is6() {
		return corev1.IPv6Protocol
	}
	return corev1.IPv4Protocol
}

// ServiceIPs are the cluster IPs a Service holds ("None" and "" hold none).
func ServiceIPs(svc *corev1.Service) []netip.Addr {
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	var out []netip.Addr
	for _, ip := range append([]string{svc.Spec.ClusterIP}, svc.Spec.ClusterIPs...) {
		if a, err := netip.ParseAddr(ip); err == nil && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// ServiceNodePorts are the node ports a Service holds, its health check
// port included: one port number may serve several protocols of one
// Service, as upstream allows.
func ServiceNodePorts(svc *corev1.Service) []int32 {
	var out []int32
	for _, p := range svc.Spec.Ports {
		if p.NodePort != 0 && !slices.Contains(out, p.NodePort) {
			out = append(out, p.NodePort)
		}
	}
	if hc := svc.Spec.HealthCheckNodePort; hc != 0 && !slices.Contains(out, hc) {
		out = append(out, hc)
	}
	return out
}

func defaultPod(obj runtime.Object) {
	o := obj.(*corev1.Pod)
	DefaultPodSpec(&o.Spec)
	defaultRequestsToLimits(o)
}

func defaultPodTemplate(obj runtime.Object) {
	o := obj.(*corev1.PodTemplate)
	DefaultPodSpec(&o.Template.Spec)
}

func defaultReplicationController(obj runtime.Object) {
	o := obj.(*corev1.ReplicationController)
	if o.Spec.Replicas == nil {
		o.Spec.Replicas = ptrTo[int32](1)
	}
	if o.Spec.Template != nil {
		DefaultPodSpec(&o.Spec.Template.Spec)
		if len(o.Spec.Selector) == 0 {
			o.Spec.Selector = o.Spec.Template.Labels
		}
	}
}

func defaultServiceObject(obj runtime.Object) {
	o := obj.(*corev1.Service)
	defaultService(o)
}

func defaultSecret(obj runtime.Object) {
	o := obj.(*corev1.Secret)
	if o.Type == "" {
		o.Type = corev1.SecretTypeOpaque
	}
}

func defaultNamespace(obj runtime.Object) {
	o := obj.(*corev1.Namespace)
	if o.Status.Phase == "" {
		o.Status.Phase = corev1.NamespaceActive
	}
}

func defaultPersistentVolumeClaim(obj runtime.Object) {
	o := obj.(*corev1.PersistentVolumeClaim)
	if o.Spec.VolumeMode == nil {
		o.Spec.VolumeMode = ptrTo(corev1.PersistentVolumeFilesystem)
	}
}

func defaultPersistentVolume(obj runtime.Object) {
	o := obj.(*corev1.PersistentVolume)
	if o.Spec.PersistentVolumeReclaimPolicy == "" {
		o.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimRetain
	}
	if o.Spec.VolumeMode == nil {
		o.Spec.VolumeMode = ptrTo(corev1.PersistentVolumeFilesystem)
	}
	if o.Spec.HostPath != nil && o.Spec.HostPath.Type == nil {
		o.Spec.HostPath.Type = ptrTo(corev1.HostPathUnset)
	}
}

func defaultEndpoints(obj runtime.Object) {
	o := obj.(*corev1.Endpoints)
	for i := range o.Subsets {
		for j := range o.Subsets[i].Ports {
			if o.Subsets[i].Ports[j].Protocol == "" {
				o.Subsets[i].Ports[j].Protocol = corev1.ProtocolTCP
			}
		}
	}
}

func defaultLimitRangeObject(obj runtime.Object) {
	o := obj.(*corev1.LimitRange)
	defaultLimitRange(o)
}

func defaultService(s *corev1.Service) {
	if s.Spec.Type == "" {
		s.Spec.Type = corev1.ServiceTypeClusterIP
	}
	if s.Spec.SessionAffinity == "" {
		s.Spec.SessionAffinity = corev1.ServiceAffinityNone
	}
	if s.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		if s.Spec.SessionAffinityConfig == nil {
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{}
		}
		if s.Spec.SessionAffinityConfig.ClientIP == nil {
			s.Spec.SessionAffinityConfig.ClientIP = &corev1.ClientIPConfig{}
		}
		if s.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds == nil {
			s.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds = ptrTo[int32](corev1.DefaultClientIPServiceAffinitySeconds)
		}
	}
	for i := range s.Spec.Ports {
		p := &s.Spec.Ports[i]
		if p.Protocol == "" {
			p.Protocol = corev1.ProtocolTCP
		}
		if p.TargetPort == (intstr.IntOrString{}) {
			p.TargetPort = intstr.FromInt32(p.Port)
		}
	}
	if s.Spec.Type != corev1.ServiceTypeExternalName && s.Spec.InternalTrafficPolicy == nil {
		s.Spec.InternalTrafficPolicy = ptrTo(corev1.ServiceInternalTrafficPolicyCluster)
	}
	if (s.Spec.Type == corev1.ServiceTypeNodePort || s.Spec.Type == corev1.ServiceTypeLoadBalancer) && s.Spec.ExternalTrafficPolicy == "" {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	}
	if s.Spec.Type == corev1.ServiceTypeLoadBalancer && s.Spec.AllocateLoadBalancerNodePorts == nil {
		s.Spec.AllocateLoadBalancerNodePorts = ptrTo(true)
	}
}

// defaultRequestsToLimits gives a pod's containers that set a limit and
// no request the limit as request, as Kubernetes does for pods (not for
// pod templates, so a LimitRange default request still applies to the
// pods made from them).
func defaultRequestsToLimits(p *corev1.Pod) {
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			r := &cs[i].Resources
			for k, v := range r.Limits {
				if _, ok := r.Requests[k]; !ok {
					if r.Requests == nil {
						r.Requests = corev1.ResourceList{}
					}
					r.Requests[k] = v.DeepCopy()
				}
			}
		}
	}
}

// defaultLimitRange fills a Container item's defaults as Kubernetes
// does: the default limit is the max, the default request the default
// limit or else the min.
func defaultLimitRange(lr *corev1.LimitRange) {
	for i := range lr.Spec.Limits {
		item := &lr.Spec.Limits[i]
		if item.Type != corev1.LimitTypeContainer {
			continue
		}
		for k, v := range item.Max {
			if _, ok := item.Default[k]; !ok {
				if item.Default == nil {
					item.Default = corev1.ResourceList{}
				}
				item.Default[k] = v.DeepCopy()
			}
		}
		for k, v := range item.Default {
			if _, ok := item.DefaultRequest[k]; !ok {
				if item.DefaultRequest == nil {
					item.DefaultRequest = corev1.ResourceList{}
				}
				item.DefaultRequest[k] = v.DeepCopy()
			}
		}
		for k, v := range item.Min {
			if _, ok := item.DefaultRequest[k]; !ok {
				if item.DefaultRequest == nil {
					item.DefaultRequest = corev1.ResourceList{}
				}
				item.DefaultRequest[k] = v.DeepCopy()
			}
		}
	}
}

// Field selector labels each kind supports beyond metadata.name and
// metadata.namespace, as kube-apiserver's per-kind GetAttrs define them.
var (
	fieldsPod = map[string]func(runtime.Object) string{
		"spec.nodeName":           func(o runtime.Object) string { return o.(*corev1.Pod).Spec.NodeName },
		"spec.restartPolicy":      func(o runtime.Object) string { return string(o.(*corev1.Pod).Spec.RestartPolicy) },
		"spec.schedulerName":      func(o runtime.Object) string { return o.(*corev1.Pod).Spec.SchedulerName },
		"spec.serviceAccountName": func(o runtime.Object) string { return o.(*corev1.Pod).Spec.ServiceAccountName },
		"spec.hostNetwork":        func(o runtime.Object) string { return strconv.FormatBool(o.(*corev1.Pod).Spec.HostNetwork) },
		"status.phase":            func(o runtime.Object) string { return string(o.(*corev1.Pod).Status.Phase) },
		"status.podIP":            func(o runtime.Object) string { return o.(*corev1.Pod).Status.PodIP },
		"status.nominatedNodeName": func(o runtime.Object) string {
			return o.(*corev1.Pod).Status.NominatedNodeName
		},
	}
	fieldsEvent = map[string]func(runtime.Object) string{
		"involvedObject.kind":            func(o runtime.Object) string { return o.(*corev1.Event).InvolvedObject.Kind },
		"involvedObject.namespace":       func(o runtime.Object) string { return o.(*corev1.Event).InvolvedObject.Namespace },
		"involvedObject.name":            func(o runtime.Object) string { return o.(*corev1.Event).InvolvedObject.Name },
		"involvedObject.uid":             func(o runtime.Object) string { return string(o.(*corev1.Event).InvolvedObject.UID) },
		"involvedObject.apiVersion":      func(o runtime.Object) string { return o.(*corev1.Event).InvolvedObject.APIVersion },
		"involvedObject.resourceVersion": func(o runtime.Object) string { return o.(*corev1.Event).InvolvedObject.ResourceVersion },
		"involvedObject.fieldPath":       func(o runtime.Object) string { return o.(*corev1.Event).InvolvedObject.FieldPath },
		"reason":                         func(o runtime.Object) string { return o.(*corev1.Event).Reason },
		"reportingComponent":             func(o runtime.Object) string { return o.(*corev1.Event).ReportingController },
		"source":                         func(o runtime.Object) string { return o.(*corev1.Event).Source.Component },
		"type":                           func(o runtime.Object) string { return o.(*corev1.Event).Type },
	}
	fieldsSecret = map[string]func(runtime.Object) string{
		"type": func(o runtime.Object) string { return string(o.(*corev1.Secret).Type) },
	}
	fieldsNode = map[string]func(runtime.Object) string{
		"spec.unschedulable": func(o runtime.Object) string { return strconv.FormatBool(o.(*corev1.Node).Spec.Unschedulable) },
	}
	fieldsNamespace = map[string]func(runtime.Object) string{
		"status.phase": func(o runtime.Object) string { return string(o.(*corev1.Namespace).Status.Phase) },
	}
)

var podPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Ready", registry.TString, "The aggregate readiness state of this pod for accepting traffic."),
		registry.Col("Status", registry.TString, "The aggregate status of the containers in this pod."),
		registry.Col("Restarts", registry.TString, "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."),
		registry.AgeCol,
		registry.Wide(registry.Col("IP", registry.TString, corev1.PodStatus{}.SwaggerDoc()["podIP"])),
		registry.Wide(registry.Col("Node", registry.TString, corev1.PodSpec{}.SwaggerDoc()["nodeName"])),
		registry.Wide(registry.Col("Nominated Node", registry.TString, corev1.PodStatus{}.SwaggerDoc()["nominatedNodeName"])),
		registry.Wide(registry.Col("Readiness Gates", registry.TString, corev1.PodSpec{}.SwaggerDoc()["readinessGates"])),
	),
	Cells: func(o runtime.Object) []any {
		p := o.(*corev1.Pod)
		s := summarizePod(p)
		ip := p.Status.PodIP
		if len(p.Status.PodIPs) > 0 {
			ip = p.Status.PodIPs[0].IP
		}
		return []any{p.Name, fmt.Sprintf("%d/%d", s.ready, s.total), s.reason, s.restarts, registry.Age(p),
			registry.OrNone(ip), registry.OrNone(p.Spec.NodeName), registry.OrNone(p.Status.NominatedNodeName), readinessGates(p)}
	},
	Conditions: func(o runtime.Object) []metav1.TableRowCondition {
		switch o.(*corev1.Pod).Status.Phase {
		case corev1.PodSucceeded:
			return []metav1.TableRowCondition{{Type: metav1.RowCompleted, Status: metav1.ConditionTrue, Reason: string(corev1.PodSucceeded), Message: "The pod has completed successfully."}}
		case corev1.PodFailed:
			return []metav1.TableRowCondition{{Type: metav1.RowCompleted, Status: metav1.ConditionTrue, Reason: string(corev1.PodFailed), Message: "The pod failed."}}
		}
		return nil
	},
}

type podSummary struct {
	ready, total int
	reason       string
	restarts     string
}

// summarizePod computes READY, STATUS and RESTARTS the way kubectl users
// know them: init progress (Init:1/2, Init:CrashLoopBackOff), the last
// container's waiting or terminated reason (CrashLoopBackOff, Completed,
// Error), Terminating, and when the last restart was.
func summarizePod(p *corev1.Pod) podSummary {
	reason := registry.OrDefault(p.Status.Reason, string(p.Status.Phase))
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonSchedulingGated {
			reason = corev1.PodReasonSchedulingGated
		}
	}
	// Sidecars (restartable init containers) count as the pod's
	// containers, and their restarts count after initialization.
	total := len(p.Spec.Containers)
	sidecar := map[string]bool{}
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sidecar[c.Name] = true
			total++
		}
	}
	ready, restarts, sidecarRestarts := 0, 0, 0
	var lastRestart, lastSidecarRestart time.Time
	initializing := false
	for i, cs := range p.Status.InitContainerStatuses {
		restarts += int(cs.RestartCount)
		lastRestart = laterRestart(lastRestart, cs)
		if sidecar[cs.Name] {
			sidecarRestarts += int(cs.RestartCount)
			lastSidecarRestart = laterRestart(lastSidecarRestart, cs)
		}
		if t := cs.State.Terminated; t != nil && t.ExitCode == 0 {
			continue
		}
		if sidecar[cs.Name] && cs.Started != nil && *cs.Started {
			if cs.Ready {
				ready++
			}
			continue
		}
		initializing = true
		switch t, w := cs.State.Terminated, cs.State.Waiting; {
		case t != nil && t.Reason != "":
			reason = "Init:" + t.Reason
		case t != nil && t.Signal != 0:
			reason = fmt.Sprintf("Init:Signal:%d", t.Signal)
		case t != nil:
			reason = fmt.Sprintf("Init:ExitCode:%d", t.ExitCode)
		case w != nil && w.Reason != "" && w.Reason != "PodInitializing":
			reason = "Init:" + w.Reason
		default:
			reason = fmt.Sprintf("Init:%d/%d", i, len(p.Spec.InitContainers))
		}
		break
	}
	if !initializing || podCondition(p, corev1.PodInitialized) {
		restarts, lastRestart = sidecarRestarts, lastSidecarRestart
		running := false
		for i := len(p.Status.ContainerStatuses) - 1; i >= 0; i-- {
			cs := p.Status.ContainerStatuses[i]
			restarts += int(cs.RestartCount)
			lastRestart = laterRestart(lastRestart, cs)
			switch t, w := cs.State.Terminated, cs.State.Waiting; {
			case w != nil && w.Reason != "":
				reason = w.Reason
			case t != nil && t.Reason != "":
				reason = t.Reason
			case t != nil && t.Signal != 0:
				reason = fmt.Sprintf("Signal:%d", t.Signal)
			case t != nil:
				reason = fmt.Sprintf("ExitCode:%d", t.ExitCode)
			case cs.Ready && cs.State.Running != nil:
				running = true
				ready++
			}
		}
		// A pod whose last container completed while others still run is
		// not complete.
		if reason == "Completed" && running {
			reason = "NotReady"
			if podCondition(p, corev1.PodReady) {
				reason = "Running"
			}
		}
	}
	terminal := p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	switch {
	case p.DeletionTimestamp != nil && p.Status.Reason == "NodeLost":
		reason = "Unknown"
	case p.DeletionTimestamp != nil && !terminal:
		reason = "Terminating"
	}
	rs := strconv.Itoa(restarts)
	if restarts != 0 && !lastRestart.IsZero() {
		rs = fmt.Sprintf("%d (%s ago)", restarts, registry.Since(lastRestart))
	}
	return podSummary{ready: ready, total: total, reason: reason, restarts: rs}
}

func laterRestart(t time.Time, cs corev1.ContainerStatus) time.Time {
	if lt := cs.LastTerminationState.Terminated; lt != nil && t.Before(lt.FinishedAt.Time) {
		return lt.FinishedAt.Time
	}
	return t
}

func podCondition(p *corev1.Pod, typ corev1.PodConditionType) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == typ {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func readinessGates(p *corev1.Pod) string {
	if len(p.Spec.ReadinessGates) == 0 {
		return "<none>"
	}
	ok := 0
	for _, g := range p.Spec.ReadinessGates {
		for _, c := range p.Status.Conditions {
			if c.Type == g.ConditionType {
				if c.Status == corev1.ConditionTrue {
					ok++
				}
				break
			}
		}
	}
	return fmt.Sprintf("%d/%d", ok, len(p.Spec.ReadinessGates))
}

var namespacePrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol, registry.Col("Status", registry.TString, "The status of the namespace"), registry.AgeCol),
	Cells: func(o runtime.Object) []any {
		n := o.(*corev1.Namespace)
		return []any{n.Name, string(n.Status.Phase), registry.Age(n)}
	},
}

var nodePrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Status", registry.TString, "The status of the node"),
		registry.Col("Roles", registry.TString, "The roles of the node"),
		registry.AgeCol,
		registry.Col("Version", registry.TString, corev1.NodeSystemInfo{}.SwaggerDoc()["kubeletVersion"]),
		registry.Wide(registry.Col("Internal-IP", registry.TString, corev1.NodeStatus{}.SwaggerDoc()["addresses"])),
		registry.Wide(registry.Col("External-IP", registry.TString, corev1.NodeStatus{}.SwaggerDoc()["addresses"])),
		registry.Wide(registry.Col("OS-Image", registry.TString, corev1.NodeSystemInfo{}.SwaggerDoc()["osImage"])),
		registry.Wide(registry.Col("Kernel-Version", registry.TString, corev1.NodeSystemInfo{}.SwaggerDoc()["kernelVersion"])),
		registry.Wide(registry.Col("Container-Runtime", registry.TString, corev1.NodeSystemInfo{}.SwaggerDoc()["containerRuntimeVersion"])),
	),
	Cells: func(o runtime.Object) []any {
		n := o.(*corev1.Node)
		status := "Unknown"
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				status = "NotReady"
				if c.Status == corev1.ConditionTrue {
					status = "Ready"
				}
			}
		}
		if n.Spec.Unschedulable {
			status += ",SchedulingDisabled"
		}
		ni := n.Status.NodeInfo
		return []any{n.Name, status, registry.OrNone(strings.Join(nodeRoles(n), ",")), registry.Age(n), ni.KubeletVersion,
			nodeAddress(n, corev1.NodeInternalIP), nodeAddress(n, corev1.NodeExternalIP),
			registry.OrDefault(ni.OSImage, "<unknown>"), registry.OrDefault(ni.KernelVersion, "<unknown>"), registry.OrDefault(ni.ContainerRuntimeVersion, "<unknown>")}
	},
}

// nodeRoles reads both role label conventions: node-role.kubernetes.io/<role>
// and the older kubernetes.io/role=<role>.
func nodeRoles(n *corev1.Node) []string {
	set := map[string]bool{}
	for k, v := range n.Labels {
		if r, ok := strings.CutPrefix(k, "node-role.kubernetes.io/"); ok && r != "" {
			set[r] = true
		} else if k == "kubernetes.io/role" && v != "" {
			set[v] = true
		}
	}
	roles := make([]string, 0, len(set))
	for r := range set {
		roles = append(roles, r)
	}
	sort.Strings(roles)
	return roles
}

// nodeAddress is the node's first address of a type: kubectl shows one.
func nodeAddress(n *corev1.Node, typ corev1.NodeAddressType) string {
	for _, a := range n.Status.Addresses {
		if a.Type == typ {
			return a.Address
		}
	}
	return "<none>"
}

var servicePrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Type", registry.TString, corev1.ServiceSpec{}.SwaggerDoc()["type"]),
		registry.Col("Cluster-IP", registry.TString, corev1.ServiceSpec{}.SwaggerDoc()["clusterIP"]),
		registry.Col("External-IP", registry.TString, corev1.ServiceSpec{}.SwaggerDoc()["externalIPs"]),
		registry.Col("Port(s)", registry.TString, corev1.ServiceSpec{}.SwaggerDoc()["ports"]),
		registry.AgeCol,
		registry.Wide(registry.Col("Selector", registry.TString, corev1.ServiceSpec{}.SwaggerDoc()["selector"])),
	),
	Cells: func(o runtime.Object) []any {
		s := o.(*corev1.Service)
		cip := "<none>"
		if len(s.Spec.ClusterIPs) > 0 {
			cip = s.Spec.ClusterIPs[0]
		}
		ports := make([]string, len(s.Spec.Ports))
		for i, p := range s.Spec.Ports {
			if p.NodePort > 0 {
				ports[i] = fmt.Sprintf("%d:%d/%s", p.Port, p.NodePort, p.Protocol)
			} else {
				ports[i] = fmt.Sprintf("%d/%s", p.Port, p.Protocol)
			}
		}
		return []any{s.Name, string(s.Spec.Type), cip, serviceExternalIP(s), registry.OrNone(strings.Join(ports, ",")), registry.Age(s), labels.FormatLabels(s.Spec.Selector)}
	},
}

func serviceExternalIP(s *corev1.Service) string {
	switch s.Spec.Type {
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort:
		return registry.OrNone(strings.Join(s.Spec.ExternalIPs, ","))
	case corev1.ServiceTypeLoadBalancer:
		var lb []string
		for _, in := range s.Status.LoadBalancer.Ingress {
			lb = append(lb, registry.OrDefault(in.IP, in.Hostname))
		}
		all := append(registry.UniqueSorted(lb), s.Spec.ExternalIPs...)
		if len(all) == 0 {
			return "<pending>"
		}
		return strings.Join(all, ",")
	case corev1.ServiceTypeExternalName:
		return s.Spec.ExternalName
	}
	return "<unknown>"
}

var endpointsPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol, registry.Col("Endpoints", registry.TString, corev1.Endpoints{}.SwaggerDoc()["subsets"]), registry.AgeCol),
	Cells: func(o runtime.Object) []any {
		e := o.(*corev1.Endpoints)
		return []any{e.Name, formatEndpoints(e), registry.Age(e)}
	},
}

// formatEndpoints lists ip:port for every port of every subset (bare IPs
// for headless subsets without ports), three at most.
func formatEndpoints(e *corev1.Endpoints) string {
	if len(e.Subsets) == 0 {
		return "<none>"
	}
	var list []string
	total := 0
	add := func(s string) {
		if len(list) < 3 {
			list = append(list, s)
		}
		total++
	}
	for _, ss := range e.Subsets {
		if len(ss.Ports) == 0 {
			for _, a := range ss.Addresses {
				add(a.IP)
			}
			continue
		}
		for _, p := range ss.Ports {
			for _, a := range ss.Addresses {
				add(net.JoinHostPort(a.IP, strconv.Itoa(int(p.Port))))
			}
		}
	}
	return registry.MoreList(list, total, "")
}

var configMapPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol, registry.Col("Data", registry.TInteger, corev1.ConfigMap{}.SwaggerDoc()["data"]), registry.AgeCol),
	Cells: func(o runtime.Object) []any {
		c := o.(*corev1.ConfigMap)
		return []any{c.Name, int64(len(c.Data) + len(c.BinaryData)), registry.Age(c)}
	},
}

var secretPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol, registry.Col("Type", registry.TString, corev1.Secret{}.SwaggerDoc()["type"]), registry.Col("Data", registry.TInteger, corev1.Secret{}.SwaggerDoc()["data"]), registry.AgeCol),
	Cells: func(o runtime.Object) []any {
		s := o.(*corev1.Secret)
		return []any{s.Name, string(s.Type), int64(len(s.Data)), registry.Age(s)}
	},
}

var serviceAccountPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol, registry.Col("Secrets", registry.TInteger, corev1.ServiceAccount{}.SwaggerDoc()["secrets"]), registry.AgeCol),
	Cells: func(o runtime.Object) []any {
		s := o.(*corev1.ServiceAccount)
		return []any{s.Name, int64(len(s.Secrets)), registry.Age(s)}
	},
}

// Both event APIs print alike, as kube-apiserver stores them as one type.
var EventColumns = registry.Cols(
	registry.Col("Last Seen", registry.TString, corev1.Event{}.SwaggerDoc()["lastTimestamp"]),
	registry.Col("Type", registry.TString, corev1.Event{}.SwaggerDoc()["type"]),
	registry.Col("Reason", registry.TString, corev1.Event{}.SwaggerDoc()["reason"]),
	registry.Col("Object", registry.TString, corev1.Event{}.SwaggerDoc()["involvedObject"]),
	registry.Wide(registry.Col("Subobject", registry.TString, corev1.ObjectReference{}.SwaggerDoc()["fieldPath"])),
	registry.Wide(registry.Col("Source", registry.TString, corev1.Event{}.SwaggerDoc()["source"])),
	registry.Col("Message", registry.TString, corev1.Event{}.SwaggerDoc()["message"]),
	registry.Wide(registry.Col("First Seen", registry.TString, corev1.Event{}.SwaggerDoc()["firstTimestamp"])),
	registry.Wide(registry.Col("Count", registry.TInteger, corev1.Event{}.SwaggerDoc()["count"])),
	registry.Wide(registry.Col("Name", registry.TString, registry.ObjectMetaDoc["name"])),
)

var coreEventPrinter = registry.Printer{
	Columns: EventColumns,
	Cells:   func(o runtime.Object) []any { return EventCells(o.(*corev1.Event)) },
}

func EventCells(e *corev1.Event) []any {
	first := registry.Since(e.FirstTimestamp.Time)
	if e.FirstTimestamp.IsZero() {
		first = registry.Since(e.EventTime.Time)
	}
	last := registry.Since(e.LastTimestamp.Time)
	if e.LastTimestamp.IsZero() {
		last = first
	}
	count := e.Count
	if e.Series != nil {
		last, count = registry.Since(e.Series.LastObservedTime.Time), e.Series.Count
	} else if count == 0 {
		// Events of the new API that happened once carry no count.
		count = 1
	}
	target := strings.ToLower(e.InvolvedObject.Kind)
	if e.InvolvedObject.Name != "" {
		target += "/" + e.InvolvedObject.Name
	}
	component := registry.OrDefault(e.Source.Component, e.ReportingController)
	source := component
	if host := registry.OrDefault(e.Source.Host, e.ReportingInstance); host != "" {
		source += ", " + host
	}
	return []any{last, e.Type, e.Reason, target, e.InvolvedObject.FieldPath, source, strings.TrimSpace(e.Message), first, int64(count), e.Name}
}

// resourceQuotaPrinter has Age last, as since Kubernetes 1.33.
var resourceQuotaPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Request", registry.TString, "Request represents a minimum amount of cpu/memory that a container may consume."),
		registry.Col("Limit", registry.TString, "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node."),
		registry.AgeCol,
	),
	Cells: func(o runtime.Object) []any {
		q := o.(*corev1.ResourceQuota)
		names := make([]string, 0, len(q.Status.Hard))
		for n := range q.Status.Hard {
			names = append(names, string(n))
		}
		sort.Strings(names)
		var req, lim []string
		for _, n := range names {
			used, hard := q.Status.Used[corev1.ResourceName(n)], q.Status.Hard[corev1.ResourceName(n)]
			s := fmt.Sprintf("%s: %s/%s", n, used.String(), hard.String())
			if strings.HasPrefix(n, "limits.") {
				lim = append(lim, s)
			} else {
				req = append(req, s)
			}
		}
		return []any{q.Name, strings.Join(req, ", "), strings.Join(lim, ", "), registry.Age(q)}
	},
}

var podTemplatePrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Containers", registry.TString, "Names of each container in the template."),
		registry.Col("Images", registry.TString, "Images referenced by each container in the template."),
		registry.Col("Pod Labels", registry.TString, "The labels for the pod template."),
	),
	Cells: func(o runtime.Object) []any {
		t := o.(*corev1.PodTemplate)
		return append(registry.WithContainers([]any{t.Name}, t.Template.Spec.Containers), labels.FormatLabels(t.Template.Labels))
	},
}

var persistentVolumePrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Capacity", registry.TString, corev1.PersistentVolumeSpec{}.SwaggerDoc()["capacity"]),
		registry.Col("Access Modes", registry.TString, corev1.PersistentVolumeSpec{}.SwaggerDoc()["accessModes"]),
		registry.Col("Reclaim Policy", registry.TString, corev1.PersistentVolumeSpec{}.SwaggerDoc()["persistentVolumeReclaimPolicy"]),
		registry.Col("Status", registry.TString, corev1.PersistentVolumeStatus{}.SwaggerDoc()["phase"]),
		registry.Col("Claim", registry.TString, corev1.PersistentVolumeSpec{}.SwaggerDoc()["claimRef"]),
		registry.Col("StorageClass", registry.TString, "StorageClass of the pv"),
		registry.Col("VolumeAttributesClass", registry.TString, "VolumeAttributesClass of the pv"),
		registry.Col("Reason", registry.TString, corev1.PersistentVolumeStatus{}.SwaggerDoc()["reason"]),
		registry.AgeCol,
		registry.Wide(registry.Col("VolumeMode", registry.TString, corev1.PersistentVolumeSpec{}.SwaggerDoc()["volumeMode"])),
	),
	Cells: func(o runtime.Object) []any {
		pv := o.(*corev1.PersistentVolume)
		claim := ""
		if r := pv.Spec.ClaimRef; r != nil {
			claim = r.Namespace + "/" + r.Name
		}
		phase := string(pv.Status.Phase)
		if pv.DeletionTimestamp != nil {
			phase = "Terminating"
		}
		size := pv.Spec.Capacity[corev1.ResourceStorage]
		class := pv.Annotations[corev1.BetaStorageClassAnnotation]
		if class == "" {
			class = pv.Spec.StorageClassName
		}
		return []any{pv.Name, size.String(), accessModes(pv.Spec.AccessModes), string(pv.Spec.PersistentVolumeReclaimPolicy),
			phase, claim, class, registry.StrOr(pv.Spec.VolumeAttributesClassName, "<unset>"), pv.Status.Reason, registry.Age(pv), volumeMode(pv.Spec.VolumeMode)}
	},
}

var persistentVolumeClaimPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Status", registry.TString, corev1.PersistentVolumeClaimStatus{}.SwaggerDoc()["phase"]),
		registry.Col("Volume", registry.TString, corev1.PersistentVolumeClaimSpec{}.SwaggerDoc()["volumeName"]),
		registry.Col("Capacity", registry.TString, corev1.PersistentVolumeClaimStatus{}.SwaggerDoc()["capacity"]),
		registry.Col("Access Modes", registry.TString, corev1.PersistentVolumeClaimStatus{}.SwaggerDoc()["accessModes"]),
		registry.Col("StorageClass", registry.TString, "StorageClass of the pvc"),
		registry.Col("VolumeAttributesClass", registry.TString, "VolumeAttributesClass of the pvc"),
		registry.AgeCol,
		registry.Wide(registry.Col("VolumeMode", registry.TString, corev1.PersistentVolumeClaimSpec{}.SwaggerDoc()["volumeMode"])),
	),
	Cells: func(o runtime.Object) []any {
		c := o.(*corev1.PersistentVolumeClaim)
		phase := string(c.Status.Phase)
		if c.DeletionTimestamp != nil {
			phase = "Terminating"
		}
		// Capacity and modes are the bound volume's; unbound claims show
		// neither.
		capacity, modes := "", ""
		if c.Spec.VolumeName != "" {
			q := c.Status.Capacity[corev1.ResourceStorage]
			capacity, modes = q.String(), accessModes(c.Status.AccessModes)
		}
		class := c.Annotations[corev1.BetaStorageClassAnnotation]
		if class == "" {
			class = registry.StrOr(c.Spec.StorageClassName, "")
		}
		return []any{c.Name, phase, c.Spec.VolumeName, capacity, modes, class,
			registry.StrOr(c.Spec.VolumeAttributesClassName, "<unset>"), registry.Age(c), volumeMode(c.Spec.VolumeMode)}
	},
}

func volumeMode(m *corev1.PersistentVolumeMode) string {
	if m == nil {
		return "<unset>"
	}
	return string(*m)
}

// accessModes abbreviates access modes in a fixed order, once each.
func accessModes(modes []corev1.PersistentVolumeAccessMode) string {
	var out []string
	for _, m := range []struct {
		mode  corev1.PersistentVolumeAccessMode
		short string
	}{{corev1.ReadWriteOnce, "RWO"}, {corev1.ReadOnlyMany, "ROX"}, {corev1.ReadWriteMany, "RWX"}, {corev1.ReadWriteOncePod, "RWOP"}} {
		for _, x := range modes {
			if x == m.mode {
				out = append(out, m.short)
				break
			}
		}
	}
	return strings.Join(out, ",")
}

var replicationControllerPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Desired", registry.TInteger, corev1.ReplicationControllerSpec{}.SwaggerDoc()["replicas"]),
		registry.Col("Current", registry.TInteger, corev1.ReplicationControllerStatus{}.SwaggerDoc()["replicas"]),
		registry.Col("Ready", registry.TInteger, corev1.ReplicationControllerStatus{}.SwaggerDoc()["readyReplicas"]),
		registry.AgeCol, registry.ContainersCol, registry.ImagesCol,
		registry.Wide(registry.Col("Selector", registry.TString, corev1.ReplicationControllerSpec{}.SwaggerDoc()["selector"])),
	),
	Cells: func(o runtime.Object) []any {
		rc := o.(*corev1.ReplicationController)
		var cs []corev1.Container
		if rc.Spec.Template != nil {
			cs = rc.Spec.Template.Spec.Containers
		}
		cells := []any{rc.Name, registry.ReplicasOr1(rc.Spec.Replicas), int64(rc.Status.Replicas), int64(rc.Status.ReadyReplicas), registry.Age(rc)}
		return append(registry.WithContainers(cells, cs), labels.FormatLabels(rc.Spec.Selector))
	},
}

// --- apps/v1 ---

// --- batch/v1 ---

// --- other groups ---
