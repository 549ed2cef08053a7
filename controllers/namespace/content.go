package namespace

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
)

// remaining is what is left of one resource after a deletion pass.
type remaining struct {
	// estimate is how long, in seconds, what remains may take to go.
	estimate   int64
	count      int
	finalizers map[string]int
}

// deleteAllContent deletes everything in ns and reports, in seconds,
// how long what remains is expected to take (0: nothing remains). It
// records the outcome in the namespace's deletion conditions.
func (c *Controller) deleteAllContent(ctx context.Context, ns *corev1.Namespace) (int64, error) {
	var errs []error
	var conds conditions
	lists, err := c.discovery.ServerPreferredNamespacedResources()
	if err != nil {
		// Not fatal: some groups usually still answer.
		errs = append(errs, err)
		conds.discoveryFailed(err)
	}
	deletable := discovery.FilteredBy(discovery.SupportsAllVerbs{Verbs: []string{"delete"}}, lists)
	type target struct {
		gvr   schema.GroupVersionResource
		verbs metav1.Verbs
	}
	var targets []target
	for _, l := range deletable {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			errs = append(errs, err)
			conds.groupVersionFailed(err)
			continue
		}
		for _, r := range l.APIResources {
			targets = append(targets, target{gvr: gv.WithResource(r.Name), verbs: r.Verbs})
		}
	}

	// Resources are independent: empty several at once.
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		estimate int64
		left     = map[schema.GroupVersionResource]remaining{}
		sem      = make(chan struct{}, c.cfg.ParallelResources)
	)
	for _, t := range targets {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			r, err := c.deleteAllContentFor(ctx, t.gvr, t.verbs, ns.Name, ns.DeletionTimestamp.Time)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				conds.contentFailed(err)
			}
			estimate = max(estimate, r.estimate)
			if r.count > 0 {
				left[t.gvr] = r
			}
		}()
	}
	wg.Wait()
	conds.remaining(left)
	// Always write the conditions: a failure reported before may be over.
	if _, err := c.updateNamespace(ctx, ns, conds.apply); err != nil && !apierrors.IsNotFound(err) {
		c.log.Warn("namespace controller: could not update the deletion conditions", "namespace", ns.Name, "err", err)
	}
	return estimate, errors.Join(errs...)
}

// deleteAllContentFor deletes every object of gvr in ns: deletecollection
// where served, else list and delete one by one. Then it lists what is
// left: objects held by finalizers are normal and get an estimate,
// anything else is an error.
func (c *Controller) deleteAllContentFor(ctx context.Context, gvr schema.GroupVersionResource, verbs metav1.Verbs, ns string, deletedAt time.Time) (remaining, error) {
	estimate, err := c.estimateGracefulTermination(ctx, gvr, ns, deletedAt)
	if err != nil {
		return remaining{}, fmt.Errorf("estimate the termination of %s: %w", gvr, err)
	}
	res := c.meta.Resource(gvr).Namespace(ns)
	background := metav1.DeletePropagationBackground
	opts := metav1.DeleteOptions{PropagationPolicy: &background}
	collection := slices.Contains(verbs, "deletecollection")
	if collection {
		err := res.DeleteCollection(ctx, opts, metav1.ListOptions{})
		switch {
		case err == nil:
		case apierrors.IsMethodNotSupported(err) || apierrors.IsNotFound(err):
			collection = false
		default:
			return remaining{estimate: estimate}, fmt.Errorf("deletecollection of %s: %w", gvr, err)
		}
	}
	if !slices.Contains(verbs, "list") {
		return remaining{estimate: estimate}, nil
	}
	list, err := res.List(ctx, metav1.ListOptions{})
	if apierrors.IsMethodNotSupported(err) || apierrors.IsNotFound(err) {
		return remaining{estimate: estimate}, nil
	}
	if err != nil {
		return remaining{estimate: estimate}, fmt.Errorf("list %s: %w", gvr, err)
	}
	if !collection {
		for _, item := range list.Items {
			if item.DeletionTimestamp != nil {
				continue
			}
			if err := res.Delete(ctx, item.Name, opts); err != nil && !apierrors.IsNotFound(err) {
				return remaining{estimate: estimate}, fmt.Errorf("delete %s %s: %w", gvr, item.Name, err)
			}
		}
		if list, err = res.List(ctx, metav1.ListOptions{}); err != nil {
			return remaining{estimate: estimate}, fmt.Errorf("list %s: %w", gvr, err)
		}
	}
	if len(list.Items) == 0 {
		return remaining{}, nil
	}
	r := remaining{estimate: estimate, count: len(list.Items), finalizers: map[string]int{}}
	for _, item := range list.Items {
		for _, f := range item.Finalizers {
			r.finalizers[f]++
		}
	}
	if estimate > 0 {
		return r, nil
	}
	if len(r.finalizers) > 0 {
		r.estimate = finalizerEstimateSeconds
		return r, nil
	}
	return r, fmt.Errorf("unexpected items still remain in namespace: %s for gvr: %v", ns, gvr)
}

// estimateGracefulTermination is how many seconds pods still running in
// ns may take to terminate, counted from the namespace's deletion; 0
// for other resources.
func (c *Controller) estimateGracefulTermination(ctx context.Context, gvr schema.GroupVersionResource, ns string, deletedAt time.Time) (int64, error) {
	if gvr.GroupResource() != (schema.GroupResource{Resource: "pods"}) {
		return 0, nil
	}
	pods, err := c.client.Core.Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	var estimate int64
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if g := p.Spec.TerminationGracePeriodSeconds; g != nil && *g > estimate {
			estimate = *g
		}
	}
	if time.Since(deletedAt) >= time.Duration(estimate)*time.Second {
		return 0, nil
	}
	return estimate, nil
}
