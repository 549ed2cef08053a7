package core

import (
	"reflect"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"bonsai.dev/bonsai/apiserver/registry"
)

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
