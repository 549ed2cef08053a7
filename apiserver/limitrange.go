package apiserver

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	resourcehelper "k8s.io/component-helpers/resource"
)

// limitRangerAnnotation records on a pod which defaults the LimitRanger
// set, as kube-apiserver's LimitRanger admission does.
const limitRangerAnnotation = "kubernetes.io/limit-ranger"

// limitRanges are the LimitRanges of a pod's or claim's namespace; none
// for other kinds.
func (s *Server) limitRanges(ctx context.Context, res *resource, obj runtime.Object) ([]*corev1.LimitRange, error) {
	switch obj.(type) {
	case *corev1.Pod, *corev1.PersistentVolumeClaim:
	default:
		return nil, nil
	}
	m, _ := metaOf(obj)
	lres := s.reg.byGVR[gvr("", "v1", "limitranges")]
	items, _, err := s.listObjects(ctx, lres, m.GetNamespace(), listOptions{labels: labels.Everything(), fields: fields.Everything()})
	if err != nil {
		return nil, err
	}
	out := make([]*corev1.LimitRange, len(items))
	for i, o := range items {
		out[i] = o.(*corev1.LimitRange)
	}
	return out, nil
}

// limitRangeDefaults is the LimitRanger's mutating half: a new pod's
// containers get the Container items' default limits and requests for
// what they do not set.
func (s *Server) limitRangeDefaults(ctx context.Context, res *resource, obj runtime.Object) error {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil
	}
	ranges, err := s.limitRanges(ctx, res, obj)
	if err != nil || len(ranges) == 0 {
		return err
	}
	var notes []string
	for _, lr := range ranges {
		for _, item := range lr.Spec.Limits {
			if item.Type != corev1.LimitTypeContainer {
				continue
			}
			for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
				for i := range cs {
					notes = append(notes, applyContainerDefaults(&cs[i], item.DefaultRequest, item.Default)...)
				}
			}
		}
	}
	if len(notes) > 0 {
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[limitRangerAnnotation] = "LimitRanger plugin set: " + strings.Join(notes, "; ")
	}
	return nil
}

// applyContainerDefaults sets what c lacks and says what it set.
func applyContainerDefaults(c *corev1.Container, requests, limits corev1.ResourceList) []string {
	fill := func(dst *corev1.ResourceList, defaults corev1.ResourceList) []string {
		var set []string
		for k, v := range defaults {
			if _, ok := (*dst)[k]; ok {
				continue
			}
			if *dst == nil {
				*dst = corev1.ResourceList{}
			}
			(*dst)[k] = v.DeepCopy()
			set = append(set, string(k))
		}
		sort.Strings(set)
		return set
	}
	var notes []string
	if set := fill(&c.Resources.Requests, requests); len(set) > 0 {
		notes = append(notes, fmt.Sprintf("%s request for container %s", strings.Join(set, ", "), c.Name))
	}
	if set := fill(&c.Resources.Limits, limits); len(set) > 0 {
		notes = append(notes, fmt.Sprintf("%s limit for container %s", strings.Join(set, ", "), c.Name))
	}
	return notes
}

// limitRangeValidate is the LimitRanger's validating half: min, max and
// maxLimitRequestRatio per container, per pod (the sum of its
// containers) and per claim; every violation is listed in one 403.
func (s *Server) limitRangeValidate(ctx context.Context, res *resource, obj runtime.Object) error {
	ranges, err := s.limitRanges(ctx, res, obj)
	if err != nil || len(ranges) == 0 {
		return err
	}
	var errs []error
	for _, lr := range ranges {
		for _, item := range lr.Spec.Limits {
			switch o := obj.(type) {
			case *corev1.Pod:
				switch item.Type {
				case corev1.LimitTypeContainer:
					for _, cs := range [][]corev1.Container{o.Spec.InitContainers, o.Spec.Containers} {
						for _, c := range cs {
							errs = append(errs, checkLimits(item, string(corev1.LimitTypeContainer), c.Resources.Requests, c.Resources.Limits)...)
						}
					}
				case corev1.LimitTypePod:
					req := resourcehelper.PodRequests(o, resourcehelper.PodResourcesOptions{})
					lim := resourcehelper.PodLimits(o, resourcehelper.PodResourcesOptions{})
					errs = append(errs, checkLimits(item, string(corev1.LimitTypePod), req, lim)...)
				}
			case *corev1.PersistentVolumeClaim:
				if item.Type == corev1.LimitTypePersistentVolumeClaim {
					errs = append(errs, checkClaimLimits(item, o)...)
				}
			}
		}
	}
	if len(errs) == 0 {
		return nil
	}
	m, _ := metaOf(obj)
	return apierrors.NewForbidden(qualified(res), m.GetName(), utilerrors.NewAggregate(errs))
}

// checkLimits holds requests and limits to one item's min, max and
// ratio, in resource name order.
func checkLimits(item corev1.LimitRangeItem, kind string, req, lim corev1.ResourceList) []error {
	var errs []error
	for _, k := range sortedNames(item.Min) {
		errs = appendErr(errs, minConstraint(kind, k, item.Min[k], req, lim))
	}
	for _, k := range sortedNames(item.Max) {
		errs = appendErr(errs, maxConstraint(kind, k, item.Max[k], req, lim))
	}
	for _, k := range sortedNames(item.MaxLimitRequestRatio) {
		errs = appendErr(errs, ratioConstraint(kind, k, item.MaxLimitRequestRatio[k], req, lim))
	}
	return errs
}

// checkClaimLimits holds a claim's storage request to the item's min
// and max.
func checkClaimLimits(item corev1.LimitRangeItem, pvc *corev1.PersistentVolumeClaim) []error {
	var errs []error
	req := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	if q, ok := item.Min[corev1.ResourceStorage]; ok && req.Cmp(q) < 0 {
		errs = append(errs, fmt.Errorf("minimum storage usage per PersistentVolumeClaim is %s, but request is %s", q.String(), req.String()))
	}
	if q, ok := item.Max[corev1.ResourceStorage]; ok && req.Cmp(q) > 0 {
		errs = append(errs, fmt.Errorf("maximum storage usage per PersistentVolumeClaim is %s, but request is %s", q.String(), req.String()))
	}
	return errs
}

func appendErr(errs []error, err error) []error {
	if err != nil {
		return append(errs, err)
	}
	return errs
}

func sortedNames(l corev1.ResourceList) []corev1.ResourceName {
	out := make([]corev1.ResourceName, 0, len(l))
	for k := range l {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// values are the request, limit and bound in milli-units when none
// overflows, else in units, as Kubernetes compares them.
func values(req, lim, bound apiresource.Quantity) (int64, int64, int64) {
	r, l, b := req.Value(), lim.Value(), bound.Value()
	if r <= apiresource.MaxMilliValue && l <= apiresource.MaxMilliValue && b <= apiresource.MaxMilliValue {
		return req.MilliValue(), lim.MilliValue(), bound.MilliValue()
	}
	return r, l, b
}

func minConstraint(kind string, name corev1.ResourceName, bound apiresource.Quantity, reqs, lims corev1.ResourceList) error {
	req, hasReq := reqs[name]
	lim, hasLim := lims[name]
	r, l, b := values(req, lim, bound)
	switch {
	case !hasReq:
		return fmt.Errorf("minimum %s usage per %s is %s.  No request is specified", name, kind, bound.String())
	case r < b:
		return fmt.Errorf("minimum %s usage per %s is %s, but request is %s", name, kind, bound.String(), req.String())
	case hasLim && l < b:
		return fmt.Errorf("minimum %s usage per %s is %s, but limit is %s", name, kind, bound.String(), lim.String())
	}
	return nil
}

func maxConstraint(kind string, name corev1.ResourceName, bound apiresource.Quantity, reqs, lims corev1.ResourceList) error {
	req, hasReq := reqs[name]
	lim, hasLim := lims[name]
	r, l, b := values(req, lim, bound)
	switch {
	case !hasLim:
		return fmt.Errorf("maximum %s usage per %s is %s.  No limit is specified", name, kind, bound.String())
	case l > b:
		return fmt.Errorf("maximum %s usage per %s is %s, but limit is %s", name, kind, bound.String(), lim.String())
	case hasReq && r > b:
		return fmt.Errorf("maximum %s usage per %s is %s, but request is %s", name, kind, bound.String(), req.String())
	}
	return nil
}

func ratioConstraint(kind string, name corev1.ResourceName, bound apiresource.Quantity, reqs, lims corev1.ResourceList) error {
	req, hasReq := reqs[name]
	lim, hasLim := lims[name]
	r, l, _ := values(req, lim, bound)
	if !hasReq || r == 0 {
		return fmt.Errorf("%s max limit to request ratio per %s is %s, but no request is specified or request is 0", name, kind, bound.String())
	}
	if !hasLim || l == 0 {
		return fmt.Errorf("%s max limit to request ratio per %s is %s, but no limit is specified or limit is 0", name, kind, bound.String())
	}
	ratio := float64(l) / float64(r)
	observed, max := ratio, float64(bound.Value())
	if bound.Value() <= apiresource.MaxMilliValue {
		observed, max = ratio*1000, float64(bound.MilliValue())
	}
	if observed > max {
		return fmt.Errorf("%s max limit to request ratio per %s is %s, but provided ratio is %f", name, kind, bound.String(), ratio)
	}
	return nil
}
