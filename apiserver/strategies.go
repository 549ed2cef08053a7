package apiserver

import (
	"fmt"
	"reflect"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"bonsai.dev/bonsai/apiserver/registry"
	"bonsai.dev/bonsai/apiserver/registry/core"
)

// ---- namespaces

type namespaceStrategy struct{ registry.DefaultStrategy }

const namespaceNameLabel = "kubernetes.io/metadata.name"

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
	ns.Labels[namespaceNameLabel] = ns.Name
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
	return append(core.ValidatePodSpec(spec, p), core.ValidateHostPorts(spec, w.Env.ReservedHostPorts, p)...)
}

// validateUpdate allows only the fields Kubernetes lets change on a pod.
func (podStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	p, o := obj.(*corev1.Pod), old.(*corev1.Pod)
	errs := core.ValidatePodSpec(&p.Spec, field.NewPath("spec"))
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

// ---- workloads

// validateWorkload checks what Deployments, ReplicaSets and StatefulSets
// share: a selector matching the template, replicas, the pod template.
func validateWorkload(sel *metav1.LabelSelector, tmpl *corev1.PodTemplateSpec, replicas *int32) field.ErrorList {
	p := field.NewPath("spec")
	errs := core.ValidateSelector(sel, tmpl.Labels, p)
	errs = append(errs, core.ValidateReplicas(replicas, p)...)
	return append(errs, core.ValidatePodSpec(&tmpl.Spec, p.Child("template", "spec"))...)
}

type deploymentStrategy struct{ registry.GenerationStrategy }

func (deploymentStrategy) Validate(w *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	return validateDeploymentSpec(&obj.(*appsv1.Deployment).Spec)
}

func (st deploymentStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	errs := st.Validate(w, obj)
	return append(errs, core.ValidateSelectorImmutable(obj.(*appsv1.Deployment).Spec.Selector, old.(*appsv1.Deployment).Spec.Selector, field.NewPath("spec"))...)
}

type replicaSetStrategy struct{ registry.GenerationStrategy }

func (replicaSetStrategy) Validate(w *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	return validateReplicaSetSpec(&obj.(*appsv1.ReplicaSet).Spec)
}

func (st replicaSetStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	errs := st.Validate(w, obj)
	return append(errs, core.ValidateSelectorImmutable(obj.(*appsv1.ReplicaSet).Spec.Selector, old.(*appsv1.ReplicaSet).Spec.Selector, field.NewPath("spec"))...)
}

type statefulSetStrategy struct{ registry.GenerationStrategy }

func (statefulSetStrategy) Validate(w *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	s := obj.(*appsv1.StatefulSet)
	// Containers mount the claims of volumeClaimTemplates by name: the
	// controller adds those volumes to each pod, so the template is
	// checked as if it had them.
	tmpl := s.Spec.Template.DeepCopy()
	for _, c := range s.Spec.VolumeClaimTemplates {
		tmpl.Spec.Volumes = append(tmpl.Spec.Volumes, corev1.Volume{Name: c.Name,
			VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.Name}}})
	}
	errs := validateWorkload(s.Spec.Selector, tmpl, s.Spec.Replicas)
	return append(errs, validateStatefulSetSpec(&s.Spec, field.NewPath("spec"))...)
}

func (st statefulSetStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	errs := st.Validate(w, obj)
	s, o := obj.(*appsv1.StatefulSet), old.(*appsv1.StatefulSet)
	p := field.NewPath("spec")
	errs = append(errs, core.ValidateSelectorImmutable(s.Spec.Selector, o.Spec.Selector, p)...)
	if s.Spec.ServiceName != o.Spec.ServiceName || s.Spec.PodManagementPolicy != o.Spec.PodManagementPolicy || !apiequality.Semantic.DeepEqual(s.Spec.VolumeClaimTemplates, o.Spec.VolumeClaimTemplates) {
		errs = append(errs, field.Forbidden(p, "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"))
	}
	return errs
}

type daemonSetStrategy struct{ registry.GenerationStrategy }

// A DaemonSet's template generation, which the daemonset controller
// labels its pods with (pod-template-generation): apps/v1 has no field
// for it, so kube-apiserver keeps it in this annotation, starting at 1 and
// counting template changes; clients cannot set it.
const daemonSetTemplateGeneration = appsv1.DeprecatedTemplateGeneration

func (daemonSetStrategy) PrepareForCreate(w *registry.WriteCtx, obj runtime.Object) error {
	d := obj.(*appsv1.DaemonSet)
	d.Status = appsv1.DaemonSetStatus{}
	gen, err := templateGeneration(d)
	if err != nil {
		return err
	}
	setTemplateGeneration(d, max(gen, 1))
	return nil
}

func (daemonSetStrategy) PrepareForUpdate(w *registry.WriteCtx, obj, old runtime.Object) error {
	d, o := obj.(*appsv1.DaemonSet), old.(*appsv1.DaemonSet)
	d.Status = o.Status
	if _, err := templateGeneration(d); err != nil {
		return err
	}
	gen, err := templateGeneration(o)
	if err != nil {
		return err
	}
	if !apiequality.Semantic.DeepEqual(d.Spec.Template, o.Spec.Template) {
		gen++
	}
	setTemplateGeneration(d, gen)
	return nil
}

// templateGeneration reads the annotation; 0 when absent. A value that is
// not a number is refused, as kube-apiserver's conversion refuses it.
func templateGeneration(d *appsv1.DaemonSet) (int64, error) {
	v, ok := d.Annotations[daemonSetTemplateGeneration]
	if !ok {
		return 0, nil
	}
	gen, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, apierrors.NewBadRequest(fmt.Sprintf("annotation %s: %q is not an integer", daemonSetTemplateGeneration, v))
	}
	return gen, nil
}

func setTemplateGeneration(d *appsv1.DaemonSet, gen int64) {
	if d.Annotations == nil {
		d.Annotations = map[string]string{}
	}
	d.Annotations[daemonSetTemplateGeneration] = strconv.FormatInt(gen, 10)
}

func (daemonSetStrategy) Validate(w *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	d := obj.(*appsv1.DaemonSet)
	p := field.NewPath("spec")
	errs := core.ValidateSelector(d.Spec.Selector, d.Spec.Template.Labels, p)
	if d.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		errs = append(errs, field.NotSupported(p.Child("template", "spec", "restartPolicy"), d.Spec.Template.Spec.RestartPolicy, []string{"Always"}))
	}
	errs = append(errs, validateDaemonSetSpec(&d.Spec, p)...)
	return append(errs, core.ValidatePodSpec(&d.Spec.Template.Spec, p.Child("template", "spec"))...)
}

func (st daemonSetStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	errs := st.Validate(w, obj)
	return append(errs, core.ValidateSelectorImmutable(obj.(*appsv1.DaemonSet).Spec.Selector, old.(*appsv1.DaemonSet).Spec.Selector, field.NewPath("spec"))...)
}

// A Deployment's and a ReplicaSet's status writes may change annotations,
// as upstream's status strategies allow (they reset spec, and a
// Deployment's labels, only): the Deployment controller records the
// rollout's revision on the Deployment through its status.
func (deploymentStrategy) StatusWritesAnnotations() {}
func (replicaSetStrategy) StatusWritesAnnotations() {}
