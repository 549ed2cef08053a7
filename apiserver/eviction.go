package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
	pdbhelper "k8s.io/component-helpers/apps/poddisruptionbudget"
)

// createEviction serves pods/eviction as kube-apiserver does: the pod is
// deleted unless that would violate its PodDisruptionBudget, in which case
// the answer is 429 and nothing changes.
func (s *Server) createEviction(w http.ResponseWriter, r *http.Request, ri requestInfo, res *resource) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	var ev policyv1.Eviction
	if err := decodeRequest(nil, r, body, &ev, validationIgnore); err != nil {
		return err
	}
	// Admission sees the Eviction (kind policy/v1 Eviction, resource
	// pods, subresource eviction); the pod's deletion that follows is not
	// admitted again.
	adm, dry, err := s.admitSubresourceCreate(r, res, ri, policyv1.SchemeGroupVersion.WithKind("Eviction"), &ev)
	if err != nil {
		return err
	}
	ctx := r.Context()
	if ev.Name != "" && ev.Name != ri.name {
		return invalid(&resource{gvr: gvr("policy", "v1", "evictions"), kind: "Eviction"}, ev.Name,
			field.ErrorList{field.Invalid(field.NewPath("metadata", "name"), ev.Name, "name in URL does not match name in Eviction object")})
	}
	if err := adm.validate(ctx); err != nil {
		return err
	}
	ctx = adm.written(ctx)
	opts := ev.DeleteOptions
	if opts == nil {
		opts = &metav1.DeleteOptions{}
	}
	if dry {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	obj, _, err := s.getObject(ctx, res, ri.namespace, ri.name)
	if err != nil {
		return err
	}
	if err := s.admitNodeDelete(ctx, res, obj, "evict"); err != nil {
		return err
	}
	pod := obj.(*corev1.Pod)
	if opts.Preconditions == nil || opts.Preconditions.UID == nil {
		// Evict exactly the pod that was checked against its budget.
		uid := pod.UID
		if opts.Preconditions == nil {
			opts.Preconditions = &metav1.Preconditions{}
		}
		opts.Preconditions.UID = &uid
	}
	// A pod that is finished, not yet running or already going needs no
	// budget: its disruption has happened.
	if !canIgnoreBudget(pod) {
		pdb, err := s.podBudget(ctx, pod)
		if err != nil {
			return err
		}
		switch {
		case pdb == nil:
		case !podIsReady(pod) && unhealthyEvictable(pdb):
			// An unhealthy pod goes without spending the budget; the
			// resourceVersion precondition makes sure it did not turn
			// Ready meanwhile.
			if opts.Preconditions.ResourceVersion == nil {
				rv := pod.ResourceVersion
				opts.Preconditions.ResourceVersion = &rv
			}
		default:
			if err := s.takeDisruption(ctx, pod, pdb, len(opts.DryRun) > 0); err != nil {
				return err
			}
		}
	}
	if len(opts.DryRun) == 0 {
		if err := s.markDisruptionTarget(ctx, res, pod, opts); err != nil {
			return err
		}
	}
	if _, _, err := s.deleteObject(ctx, res, ri.namespace, ri.name, opts); err != nil {
		return err
	}
	writeStatus(w, &metav1.Status{Code: http.StatusCreated})
	return nil
}

// canIgnoreBudget: a pod already terminal, not yet running, or being
// deleted may be evicted whatever its budget says.
func canIgnoreBudget(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded ||
		pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodPending
}

func podIsReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// unhealthyEvictable applies the budget's unhealthyPodEvictionPolicy to
// a pod that is not Ready: AlwaysAllow lets it go; IfHealthyBudget (the
// default) only while the budget has the healthy pods it needs.
func unhealthyEvictable(pdb *policyv1.PodDisruptionBudget) bool {
	if p := pdb.Spec.UnhealthyPodEvictionPolicy; p != nil && *p == policyv1.AlwaysAllow {
		return true
	}
	return pdb.Status.CurrentHealthy >= pdb.Status.DesiredHealthy && pdb.Status.DesiredHealthy > 0
}

// podBudget is the one budget selecting the pod, nil when none does. In
// policy/v1 an empty selector selects every pod of the namespace.
func (s *Server) podBudget(ctx context.Context, pod *corev1.Pod) (*policyv1.PodDisruptionBudget, error) {
	pdbRes := s.reg.byGVR[gvr("policy", "v1", "poddisruptionbudgets")]
	items, _, err := s.listObjects(ctx, pdbRes, pod.Namespace, listOptions{labels: labels.Everything(), fields: fields.Everything()})
	if err != nil {
		return nil, err
	}
	var matching []*policyv1.PodDisruptionBudget
	for _, o := range items {
		pdb := o.(*policyv1.PodDisruptionBudget)
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(pod.Labels)) {
			continue
		}
		matching = append(matching, pdb)
	}
	switch len(matching) {
	case 0:
		return nil, nil
	case 1:
		return matching[0], nil
	}
	return nil, apierrors.NewInternalError(fmt.Errorf("This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."))
}

// maxDisruptedPods bounds a budget's disruptedPods, as upstream's: more
// means the disruption controller is not keeping up.
const maxDisruptedPods = 2000

// takeDisruption spends one allowed disruption of the pod's budget,
// recording the pod in disruptedPods as the disruption controller
// expects; it answers 429 when none is left.
func (s *Server) takeDisruption(ctx context.Context, pod *corev1.Pod, pdb *policyv1.PodDisruptionBudget, dry bool) error {
	pdbRes := s.reg.byGVR[gvr("policy", "v1", "poddisruptionbudgets")]
	for attempt := 0; ; attempt++ {
		if pdb.Status.ObservedGeneration < pdb.Generation {
			return budgetError(10, fmt.Sprintf("The disruption budget %s is still being processed by the server.", pdb.Name))
		}
		if pdb.Status.DisruptionsAllowed < 0 {
			return apierrors.NewForbidden(policyv1.Resource("poddisruptionbudget"), pdb.Name, fmt.Errorf("pdb disruptions allowed is negative"))
		}
		if len(pdb.Status.DisruptedPods) > maxDisruptedPods {
			return apierrors.NewForbidden(policyv1.Resource("poddisruptionbudget"), pdb.Name, fmt.Errorf("DisruptedPods map too big - too many evictions not confirmed by PDB controller"))
		}
		if pdb.Status.DisruptionsAllowed == 0 {
			return budgetError(0, fmt.Sprintf("The disruption budget %s needs %d healthy pods and has %d currently", pdb.Name, pdb.Status.DesiredHealthy, pdb.Status.CurrentHealthy))
		}
		if dry {
			return nil
		}
		pdb.Status.DisruptionsAllowed--
		if pdb.Status.DisruptionsAllowed == 0 {
			pdbhelper.UpdateDisruptionAllowedCondition(pdb)
		}
		if pdb.Status.DisruptedPods == nil {
			pdb.Status.DisruptedPods = map[string]metav1.Time{}
		}
		pdb.Status.DisruptedPods[pod.Name] = metav1.NewTime(time.Now())
		data, err := encodeForStore(pdbRes, pdb)
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		rev, err := parseRV(pdb.ResourceVersion)
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		_, err = s.cfg.Store.Update(ctx, pdbRes.key(pdb.Namespace, pdb.Name), data, rev)
		if err == nil {
			return nil
		}
		if err := storeError(err, pdbRes, pdb.Name); !apierrors.IsConflict(err) || attempt >= 10 {
			return err
		}
		// Someone else spent or refreshed the budget: judge again on
		// what is there now.
		if err := waitToRetry(ctx, attempt); err != nil {
			return err
		}
		obj, _, err := s.getObject(ctx, pdbRes, pdb.Namespace, pdb.Name)
		if err != nil {
			return err
		}
		pdb = obj.(*policyv1.PodDisruptionBudget)
	}
}

// budgetError is the eviction API's 429 with the DisruptionBudget cause.
func budgetError(retryAfter int, cause string) error {
	err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", retryAfter)
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{Type: policyv1.DisruptionBudgetCause, Message: cause})
	return err
}

// markDisruptionTarget sets the pod's DisruptionTarget condition before
// it is deleted, as kube-apiserver does, so the pod's owner (a Job's
// pod failure policy) can tell an eviction from a failure. A pod changed
// meanwhile is read again, unless opts hold it to a resourceVersion;
// that precondition then moves to the pod with the condition.
func (s *Server) markDisruptionTarget(ctx context.Context, res *resource, pod *corev1.Pod, opts *metav1.DeleteOptions) error {
	for attempt := 0; ; attempt++ {
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		upd := pod.DeepCopy()
		setDisruptionTarget(upd)
		rev, err := parseRV(pod.ResourceVersion)
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		wc := s.newWriteCtx(res, false)
		ri := requestInfo{verb: "update", gvr: res.gvr, namespace: pod.Namespace, name: pod.Name, subresource: "status"}
		out, err := s.updateObject(ctx, wc, ri, upd, pod, rev, "kube-apiserver", true, false)
		if err == nil {
			if p := opts.Preconditions; p.ResourceVersion != nil && *p.ResourceVersion == pod.ResourceVersion {
				rv := out.(*corev1.Pod).ResourceVersion
				p.ResourceVersion = &rv
			}
			return nil
		}
		if !apierrors.IsConflict(err) || opts.Preconditions.ResourceVersion != nil || attempt >= 10 {
			return err
		}
		if err := waitToRetry(ctx, attempt); err != nil {
			return err
		}
		obj, _, err := s.getObject(ctx, res, pod.Namespace, pod.Name)
		if err != nil {
			return err
		}
		if obj.(*corev1.Pod).UID != *opts.Preconditions.UID {
			return apierrors.NewConflict(qualified(res), pod.Name, fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", *opts.Preconditions.UID, obj.(*corev1.Pod).UID))
		}
		pod = obj.(*corev1.Pod)
	}
}

// setDisruptionTarget sets the pod's DisruptionTarget condition to
// True, in place when it has one (reset to False by the disruption
// controller after an eviction that did not happen).
func setDisruptionTarget(pod *corev1.Pod) {
	cond := corev1.PodCondition{
		Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI",
		Message: "Eviction API: evicting", LastTransitionTime: storedNow(),
	}
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.DisruptionTarget {
			pod.Status.Conditions[i] = cond
			return
		}
	}
	pod.Status.Conditions = append(pod.Status.Conditions, cond)
}

func parseRV(rv string) (uint64, error) { return strconv.ParseUint(rv, 10, 64) }
