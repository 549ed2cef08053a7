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
	if ev.Name != "" && ev.Name != ri.name {
		return invalid(&resource{gvr: gvr("policy", "v1", "evictions"), kind: "Eviction"}, ev.Name,
			field.ErrorList{field.Invalid(field.NewPath("metadata", "name"), ev.Name, "name in URL does not match name in Eviction object")})
	}
	opts := ev.DeleteOptions
	if opts == nil {
		opts = &metav1.DeleteOptions{}
	}
	if dry, err := dryRun(r); err != nil {
		return err
	} else if dry {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	ctx := r.Context()
	obj, _, err := s.getObject(ctx, res, ri.namespace, ri.name)
	if err != nil {
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
	// budget.
	if pod.DeletionTimestamp == nil && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed && pod.Status.Phase != corev1.PodPending {
		if err := s.takeDisruption(ctx, pod, len(opts.DryRun) > 0); err != nil {
			return err
		}
	}
	if _, _, err := s.deleteObject(ctx, res, ri.namespace, ri.name, opts); err != nil {
		return err
	}
	writeStatus(w, &metav1.Status{Code: http.StatusCreated})
	return nil
}

// takeDisruption spends one allowed disruption of the pod's budget, if it
// has one, recording the pod in disruptedPods as the disruption controller
// expects.
func (s *Server) takeDisruption(ctx context.Context, pod *corev1.Pod, dry bool) error {
	pdbRes := s.reg.byGVR[gvr("policy", "v1", "poddisruptionbudgets")]
	for attempt := 0; ; attempt++ {
		items, _, err := s.listObjects(ctx, pdbRes, pod.Namespace, listOptions{labels: labels.Everything(), fields: fields.Everything()})
		if err != nil {
			return err
		}
		var matching []*policyv1.PodDisruptionBudget
		for _, o := range items {
			pdb := o.(*policyv1.PodDisruptionBudget)
			sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
			if err != nil || sel.Empty() || !sel.Matches(labels.Set(pod.Labels)) {
				continue
			}
			matching = append(matching, pdb)
		}
		switch {
		case len(matching) == 0:
			return nil
		case len(matching) > 1:
			return apierrors.NewInternalError(fmt.Errorf("This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."))
		}
		pdb := matching[0]
		if pdb.Status.ObservedGeneration < pdb.Generation || pdb.Status.DisruptionsAllowed <= 0 {
			err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10)
			err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{
				Type:    policyv1.DisruptionBudgetCause,
				Message: fmt.Sprintf("The disruption budget %s needs %d healthy pods and has %d currently", pdb.Name, pdb.Status.DesiredHealthy, pdb.Status.CurrentHealthy),
			})
			return err
		}
		if dry {
			return nil
		}
		pdb.Status.DisruptionsAllowed--
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
		if _, err := s.cfg.Store.Update(ctx, pdbRes.key(pdb.Namespace, pdb.Name), data, rev); err != nil {
			if apierrors.IsConflict(storeError(err, pdbRes, pdb.Name)) && attempt < maxUnconditionalRetries {
				if err := waitToRetry(ctx, attempt); err != nil {
					return err
				}
				continue
			}
			return storeError(err, pdbRes, pdb.Name)
		}
		return nil
	}
}

func parseRV(rv string) (uint64, error) { return strconv.ParseUint(rv, 10, 64) }
