package apiserver

import (
	"encoding/json"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"

	"bonsai.dev/bonsai/apiserver/apiextensions"
	"bonsai.dev/bonsai/apiserver/registry"
	"bonsai.dev/bonsai/store"
)

// scaleOf reads the Scale of a workload or custom object.
func scaleOf(res *resource, obj runtime.Object) (*autoscalingv1.Scale, error) {
	sc := &autoscalingv1.Scale{TypeMeta: metav1.TypeMeta{Kind: "Scale", APIVersion: "autoscaling/v1"}}
	m, _ := metaOf(obj)
	sc.ObjectMeta = metav1.ObjectMeta{Name: m.GetName(), Namespace: m.GetNamespace(), UID: m.GetUID(), ResourceVersion: m.GetResourceVersion(), CreationTimestamp: m.GetCreationTimestamp()}
	var sel *metav1.LabelSelector
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		if res.custom == nil || res.custom.Scale() == nil {
			return nil, fmt.Errorf("%s has no scale", res.kind)
		}
		sc.Spec.Replicas, sc.Status.Replicas, sc.Status.Selector = apiextensions.ScaleOf(o, res.custom.Scale())
		return sc, nil
	case *appsv1.Deployment:
		sc.Spec.Replicas, sc.Status.Replicas, sel = deref(o.Spec.Replicas), o.Status.Replicas, o.Spec.Selector
	case *appsv1.ReplicaSet:
		sc.Spec.Replicas, sc.Status.Replicas, sel = deref(o.Spec.Replicas), o.Status.Replicas, o.Spec.Selector
	case *appsv1.StatefulSet:
		sc.Spec.Replicas, sc.Status.Replicas, sel = deref(o.Spec.Replicas), o.Status.Replicas, o.Spec.Selector
	case *corev1.ReplicationController:
		sc.Spec.Replicas, sc.Status.Replicas = deref(o.Spec.Replicas), o.Status.Replicas
		sc.Status.Selector = registry.SelectorString(o.Spec.Selector)
		return sc, nil
	default:
		return nil, fmt.Errorf("%T has no scale", obj)
	}
	if s, err := metav1.LabelSelectorAsSelector(sel); err == nil {
		sc.Status.Selector = s.String()
	}
	return sc, nil
}

func deref(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

func setReplicas(res *resource, obj runtime.Object, n int32) error {
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		return apiextensions.SetSpecReplicas(o, res.custom.Scale(), n)
	case *appsv1.Deployment:
		o.Spec.Replicas = &n
	case *appsv1.ReplicaSet:
		o.Spec.Replicas = &n
	case *appsv1.StatefulSet:
		o.Spec.Replicas = &n
	case *corev1.ReplicationController:
		o.Spec.Replicas = &n
	}
	return nil
}

// serveScale serves the scale subresource (get, update, patch) of
// workloads, so kubectl scale works.
func (s *Server) serveScale(w http.ResponseWriter, r *http.Request, ri requestInfo, res *resource) error {
	format, err := negotiate(r, res, false)
	if err != nil {
		return err
	}
	scaleRes := &resource{gvr: gvr("autoscaling", "v1", "scales"), kind: "Scale"}
	// The body is read once: a retry after a conflicting write (a
	// controller's status update) applies it again to the object read
	// afresh.
	var body []byte
	var opts writeOptions
	if ri.verb == "update" || ri.verb == "patch" {
		var pt types.PatchType
		if ri.verb == "patch" {
			if pt, err = patchType(r, res); err != nil {
				return err
			}
		} else if err := checkBodyMediaType(r, nil); err != nil {
			return err
		}
		if body, err = readBody(r); err != nil {
			return err
		}
		if opts, err = parseWriteOptions(r, pt); err != nil {
			return err
		}
	}
	for attempt := 0; ; attempt++ {
		obj, rev, err := s.getObject(r.Context(), res, ri.namespace, ri.name)
		if err != nil {
			return err
		}
		sc, err := scaleOf(res, obj)
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		switch ri.verb {
		case "get":
			writeObject(w, http.StatusOK, sc, format)
			return nil
		case "update", "patch":
		default:
			return methodNotSupported(res, ri.verb)
		}
		var next autoscalingv1.Scale
		if ri.verb == "patch" {
			cur, _ := json.Marshal(sc)
			patched, err := s.patchJSON(r, res, ri, cur, body, &autoscalingv1.Scale{})
			if err != nil {
				return err
			}
			if err := kjson.UnmarshalCaseSensitivePreserveInts(patched, &next); err != nil {
				return apierrors.NewBadRequest(err.Error())
			}
		} else if err := decodeRequest(nil, r, body, &next, validationIgnore); err != nil {
			return err
		}
		conditional := next.ResourceVersion != "" && next.ResourceVersion != sc.ResourceVersion
		if conditional {
			return apierrors.NewConflict(qualified(res), ri.name, fmt.Errorf(optimisticLockMsg))
		}
		dry := opts.dry
		// Admission sees the Scale (kind autoscaling/v1 Scale, the
		// workload's resource, subresource scale, operation UPDATE);
		// the workload's update that follows is not admitted again.
		ctx := r.Context()
		wc := s.newWriteCtx(res, dry)
		adm := s.admitSubresource(ctx, wc, admissionv1.Update, "scale", ri.namespace, ri.name, autoscalingv1.SchemeGroupVersion.WithKind("Scale"), &next, sc)
		if err := adm.mutate(ctx); err != nil {
			return err
		}
		if next.Spec.Replicas < 0 {
			return invalid(scaleRes, ri.name, field.ErrorList{field.Invalid(field.NewPath("spec", "replicas"), next.Spec.Replicas, "must be greater than or equal to 0")})
		}
		if err := adm.validate(ctx); err != nil {
			return err
		}
		updated := obj.DeepCopyObject()
		if err := setReplicas(res, updated, next.Spec.Replicas); err != nil {
			return apierrors.NewInternalError(err)
		}
		out, err := s.updateObject(adm.written(ctx), wc, requestInfo{namespace: ri.namespace, name: ri.name}, updated, obj, rev, opts.fieldManager(r), false, false)
		if apierrors.IsConflict(err) && attempt < maxUnconditionalRetries {
			if err := waitToRetry(r.Context(), attempt); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		sc, _ = scaleOf(res, out)
		writeObject(w, http.StatusOK, sc, format)
		return nil
	}
}

// createBinding binds a pod to a node (pods/binding), as the scheduler
// does: once only, and with the PodScheduled condition set.
func (s *Server) createBinding(w http.ResponseWriter, r *http.Request, ri requestInfo, res *resource) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	var b corev1.Binding
	if err := decodeRequest(nil, r, body, &b, validationIgnore); err != nil {
		return err
	}
	return s.bindPod(w, r, ri, res, &b)
}

var bindingsGVR = gvr("", "v1", "bindings")

// createTopLevelBinding serves POST /api/v1/namespaces/NS/bindings, the
// older form of pods/binding: the pod is the one the Binding names.
func (s *Server) createTopLevelBinding(w http.ResponseWriter, r *http.Request, ri requestInfo, res *resource) error {
	if ri.verb != "create" || ri.name != "" || ri.subresource != "" {
		return methodNotSupported(res, ri.verb)
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	var b corev1.Binding
	if err := decodeRequest(nil, r, body, &b, validationIgnore); err != nil {
		return err
	}
	if b.Name == "" {
		return invalid(res, "", field.ErrorList{field.Required(field.NewPath("metadata", "name"), "name or generateName is required")})
	}
	if b.Namespace != "" && b.Namespace != ri.namespace {
		return apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
	}
	ri.name, ri.subresource = b.Name, "binding"
	return s.bindPod(w, r, ri, s.reg.byGVR[gvr("", "v1", "pods")], &b)
}

// bindPod assigns the pod ri names to the node b targets.
func (s *Server) bindPod(w http.ResponseWriter, r *http.Request, ri requestInfo, res *resource, b *corev1.Binding) error {
	// Admission sees the Binding (kind v1 Binding, resource pods,
	// subresource binding, operation CREATE); a mutating webhook may
	// change it.
	adm, dry, err := s.admitSubresourceCreate(r, res, ri, corev1.SchemeGroupVersion.WithKind("Binding"), b)
	if err != nil {
		return err
	}
	ctx := r.Context()
	if b.Target.Kind != "" && b.Target.Kind != "Node" {
		return invalid(&resource{gvr: gvr("", "v1", "bindings"), kind: "Binding"}, ri.name, field.ErrorList{field.NotSupported(field.NewPath("target", "kind"), b.Target.Kind, []string{"Node", "<empty>"})})
	}
	if b.Target.Name == "" {
		return invalid(&resource{gvr: gvr("", "v1", "bindings"), kind: "Binding"}, ri.name, field.ErrorList{field.Required(field.NewPath("target", "name"), "")})
	}
	if err := adm.validate(ctx); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		obj, kv, err := s.getStored(ctx, res, ri.namespace, ri.name)
		if err != nil {
			return err
		}
		rev := kv.Revision
		pod := obj.(*corev1.Pod)
		if pod.DeletionTimestamp != nil {
			return apierrors.NewConflict(qualified(res), ri.name, fmt.Errorf("pod %s is being deleted, cannot be assigned to a host", ri.name))
		}
		if pod.Spec.NodeName != "" {
			return apierrors.NewConflict(qualified(res), ri.name, fmt.Errorf("pod %s is already assigned to node %q", ri.name, pod.Spec.NodeName))
		}
		if b.UID != "" && b.UID != pod.UID {
			return apierrors.NewConflict(qualified(res), ri.name, fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", b.UID, pod.UID))
		}
		pod.Spec.NodeName = b.Target.Name
		setPodCondition(&pod.Status, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: storedNow()})
		if dry {
			break
		}
		data, err := encodeForStore(res, pod)
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		done := s.events.offer(res, data, pod)
		newRev, err := store.Replace(ctx, s.cfg.Store, res.key(ri.namespace, ri.name), data, rev, kv.Value)
		done(newRev)
		if err != nil {
			if apierrors.IsConflict(storeError(err, res, ri.name)) && attempt < maxUnconditionalRetries {
				if err := waitToRetry(r.Context(), attempt); err != nil {
					return err
				}
				continue
			}
			return storeError(err, res, ri.name)
		}
		break
	}
	writeStatus(w, &metav1.Status{Code: http.StatusCreated})
	return nil
}

func setPodCondition(st *corev1.PodStatus, c corev1.PodCondition) {
	for i := range st.Conditions {
		if st.Conditions[i].Type == c.Type {
			if st.Conditions[i].Status == c.Status {
				return
			}
			st.Conditions[i] = c
			return
		}
	}
	st.Conditions = append(st.Conditions, c)
}
