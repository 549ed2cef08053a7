package apiserver

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"bonsai.dev/bonsai/apiserver/quota"
)

// admitQuota is the ResourceQuota admission: what obj adds (over old, on
// an update) is charged to every quota of its namespace that covers it
// and tracks it; if any would go over its hard limit the write is
// refused with 403 and nothing is charged. The charge is written to the
// quotas' status.used before the object is stored, so concurrent
// writers cannot both take the last unit; the resourcequota controller
// later recounts from what exists.
func (s *Server) admitQuota(ctx context.Context, res *resource, obj, old runtime.Object, dry bool) error {
	if !res.namespaced {
		return nil
	}
	qres := s.reg.byGVR[gvr("", "v1", "resourcequotas")]
	gr := qualified(res)
	m, _ := metaOf(obj)
	for attempt := 0; ; attempt++ {
		items, _, err := s.listObjects(ctx, qres, m.GetNamespace(), listOptions{labels: labels.Everything(), fields: fields.Everything()})
		if err != nil {
			return err
		}
		if len(items) == 0 {
			return nil
		}
		delta := chargeOf(gr, obj, old)
		if len(delta) == 0 {
			return nil
		}
		var charged []*corev1.ResourceQuota
		for _, o := range items {
			q := o.(*corev1.ResourceQuota)
			upd, err := chargeQuota(res, m.GetName(), q, obj, delta)
			if err != nil {
				return err
			}
			if upd != nil {
				charged = append(charged, upd)
			}
		}
		if dry || len(charged) == 0 {
			return nil
		}
		conflict, err := s.writeQuotaUsage(ctx, qres, charged)
		if err == nil {
			return nil
		}
		if !conflict || attempt >= 10 {
			return err
		}
		// Another write charged a quota first: judge again on its count.
		if err := waitToRetry(ctx, attempt); err != nil {
			return err
		}
	}
}

// chargeOf is what the write adds: the object's usage, less the old
// object's on an update; only increases are charged (a decrease shows
// when the controller recounts).
func chargeOf(gr schema.GroupResource, obj, old runtime.Object) corev1.ResourceList {
	now := time.Now()
	usage := quota.Usage(gr, obj, now)
	if old != nil {
		prev := quota.Usage(gr, old, now)
		for name, q := range usage {
			if p, ok := prev[name]; ok {
				q.Sub(p)
				usage[name] = q
			}
		}
	}
	for name, q := range usage {
		if q.Sign() <= 0 {
			delete(usage, name)
		}
	}
	return usage
}

// chargeQuota is q with delta added to what it tracks, nil when it
// tracks none of it; an error when it would go over a hard limit, does
// not know its usage yet, or the object misses what a compute quota
// requires.
func chargeQuota(res *resource, name string, q *corev1.ResourceQuota, obj runtime.Object, delta corev1.ResourceList) (*corev1.ResourceQuota, error) {
	forbidden := func(err error) error { return apierrors.NewForbidden(qualified(res), name, err) }
	match, err := quota.Matches(q, obj)
	if err != nil {
		return nil, forbidden(fmt.Errorf("failed quota: %s: %v", q.Name, err))
	}
	if !match {
		return nil, nil
	}
	if pod, ok := obj.(*corev1.Pod); ok {
		if err := quota.Constraints(q.Spec.Hard, pod); err != nil {
			return nil, forbidden(fmt.Errorf("failed quota: %s: %v", q.Name, err))
		}
	}
	var tracked []corev1.ResourceName
	for n := range q.Spec.Hard {
		if _, ok := delta[n]; ok && quota.Tracks(q, n) {
			tracked = append(tracked, n)
		}
	}
	if len(tracked) == 0 {
		return nil, nil
	}
	sort.Slice(tracked, func(i, j int) bool { return tracked[i] < tracked[j] })
	upd := q.DeepCopy()
	if upd.Status.Used == nil {
		upd.Status.Used = corev1.ResourceList{}
	}
	var over []corev1.ResourceName
	for _, n := range tracked {
		used, ok := q.Status.Used[n]
		if !ok {
			return nil, forbidden(fmt.Errorf("status unknown for quota: %s, resource: %s", q.Name, n))
		}
		sum := used.DeepCopy()
		sum.Add(delta[n])
		upd.Status.Used[n] = sum
		if hard := q.Spec.Hard[n]; sum.Cmp(hard) > 0 {
			over = append(over, n)
		}
	}
	if len(over) > 0 {
		return nil, forbidden(fmt.Errorf("exceeded quota: %s, requested: %s, used: %s, limited: %s",
			q.Name, prettyQuantities(delta, over), prettyQuantities(q.Status.Used, over), prettyQuantities(q.Spec.Hard, over)))
	}
	return upd, nil
}

// prettyQuantities is "name=value,..." of names in l, sorted.
func prettyQuantities(l corev1.ResourceList, names []corev1.ResourceName) string {
	parts := make([]string, 0, len(names))
	for _, n := range names {
		q := l[n]
		parts = append(parts, string(n)+"="+q.String())
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// writeQuotaUsage stores the charged quotas, each conditional on the
// revision it was read at; conflict says another writer got there first.
func (s *Server) writeQuotaUsage(ctx context.Context, qres *resource, quotas []*corev1.ResourceQuota) (bool, error) {
	for _, q := range quotas {
		data, err := encodeForStore(qres, q)
		if err != nil {
			return false, apierrors.NewInternalError(err)
		}
		rev, err := parseRV(q.ResourceVersion)
		if err != nil {
			return false, apierrors.NewInternalError(err)
		}
		if _, err := s.cfg.Store.Update(ctx, qres.key(q.Namespace, q.Name), data, rev); err != nil {
			err = storeError(err, qres, q.Name)
			return apierrors.IsConflict(err), err
		}
	}
	return false, nil
}

// growsOnUpdate: kinds whose usage an update can raise.
func growsOnUpdate(res *resource) bool {
	switch qualified(res) {
	case quota.Pods, quota.Services, quota.Claims:
		return true
	}
	return false
}
