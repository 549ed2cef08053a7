package resourcequota

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"

	"bonsai.dev/bonsai/apiserver/quota"
)

// sync recounts one quota and writes its status if it changed.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	q, err := c.quotas.ResourceQuotas(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	kinds := map[schema.GroupResource]bool{}
	for n := range q.Spec.Hard {
		if quota.Tracks(q, n) {
			kinds[quota.KindOf(n)] = true
		}
	}
	total := corev1.ResourceList{}
	for gr := range kinds {
		if err := c.addUsage(ctx, q, gr, total); err != nil {
			return err
		}
	}
	used := corev1.ResourceList{}
	for n := range q.Spec.Hard {
		if !quota.Tracks(q, n) {
			continue
		}
		if v, ok := total[n]; ok {
			used[n] = v
		} else {
			used[n] = resource.MustParse("0")
		}
	}
	if sameLists(q.Status.Hard, q.Spec.Hard) && sameLists(q.Status.Used, used) {
		return nil
	}
	upd := q.DeepCopy()
	upd.Status = corev1.ResourceQuotaStatus{Hard: q.Spec.Hard, Used: used}
	_, err = c.cfg.Client.Core.ResourceQuotas(ns).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
	return err
}

// addUsage adds what the quota's namespace's objects of kind gr use
// within the quota's scopes.
func (c *Controller) addUsage(ctx context.Context, q *corev1.ResourceQuota, gr schema.GroupResource, total corev1.ResourceList) error {
	now := c.cfg.Clock.Now()
	add := func(obj runtime.Object) error {
		ok, err := quota.Matches(q, obj)
		if err != nil || !ok {
			return err
		}
		for n, v := range quota.Usage(gr, obj, now) {
			sum := total[n]
			sum.Add(v)
			total[n] = sum
		}
		return nil
	}
	if idx, ok := c.indexer[gr]; ok {
		objs, err := idx.ByIndex(cache.NamespaceIndex, q.Namespace)
		if err != nil {
			return err
		}
		for _, o := range objs {
			if err := add(o.(runtime.Object)); err != nil {
				return err
			}
		}
		return nil
	}
	// Any other kind only counts, which its metadata tells.
	versions := scheme.Scheme.PrioritizedVersionsForGroup(gr.Group)
	if len(versions) == 0 {
		return fmt.Errorf("cannot count %s: not a built-in kind", gr)
	}
	list, err := c.meta.Resource(gr.WithVersion(versions[0].Version)).Namespace(q.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range list.Items {
		if err := add(&list.Items[i]); err != nil {
			return err
		}
	}
	return nil
}

// sameLists compares resource lists by value ("1000m" is "1").
func sameLists(a, b corev1.ResourceList) bool {
	return apiequality.Semantic.DeepEqual(a, b)
}
