package daemonset

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"bonsai.dev/bonsai/controllers/kit"
)

// rollingUpdate replaces old pods, as upstream: without surge it deletes
// old pods while fewer than maxUnavailable pods are unavailable and lets
// manage create their successors; with surge it starts a new pod beside
// up to maxSurge old ones, and manage deletes each old pod once its
// successor is available. Unavailable old pods are replaced at once
// either way: they count against nothing.
func (c *Controller) rollingUpdate(ctx context.Context, ds *appsv1.DaemonSet, nodes []*corev1.Node, hash string) error {
	byNode, err := c.daemonPods(ctx, ds, false)
	if err != nil {
		return err
	}
	maxSurge, maxUnavailable, desired, err := c.updateBudget(ds, nodes, byNode)
	if err != nil {
		return err
	}
	now := c.clock.Now()
	gen := templateGeneration(ds)
	available := func(p *corev1.Pod) bool { return kit.IsPodAvailable(p, ds.Spec.MinReadySeconds, now) }

	if maxSurge == 0 {
		unavailable := 0
		var replace, candidates []string
		for _, pods := range byNode {
			newPod, oldPod, ok := updatedPodsOnNode(pods, hash, gen)
			switch {
			case !ok, newPod == nil && oldPod == nil, newPod != nil && oldPod != nil:
				// manage sorts these nodes out; count them unavailable.
				unavailable++
			case newPod != nil:
				if !available(newPod) {
					unavailable++
				}
			case !available(oldPod):
				replace = append(replace, oldPod.Name)
			case unavailable < maxUnavailable:
				candidates = append(candidates, oldPod.Name)
			}
		}
		n := min(max(maxUnavailable-unavailable, 0), len(candidates))
		return c.syncNodes(ctx, ds, append(replace, candidates[:n]...), nil, hash)
	}

	// Nodes the DaemonSet has left (a new taint, a changed selector) get
	// no new pod; their old pods go only while enough pods elsewhere are
	// available, since surging promises no loss of availability.
	surged, availableNow := 0, 0
	var del, replaceOn, candidates, leaving []string
	for node, pods := range byNode {
		newPod, oldPod, ok := updatedPodsOnNode(pods, hash, gen)
		if !ok {
			surged++
			continue
		}
		if (oldPod != nil && available(oldPod)) || (oldPod == nil && newPod != nil && available(newPod)) {
			availableNow++
		}
		switch {
		case oldPod == nil:
			// Up to date, or empty: manage's business.
		case newPod == nil && !c.wantsPod(ds, node):
			if available(oldPod) {
				leaving = append(leaving, oldPod.Name)
			} else {
				del = append(del, oldPod.Name)
			}
		case newPod == nil && !available(oldPod):
			replaceOn = append(replaceOn, node)
		case newPod == nil:
			if surged < maxSurge {
				candidates = append(candidates, node)
			}
		case !available(newPod):
			surged++
		default:
			// The old pod goes now, but until its deletion is seen the
			// node still runs two: it counts against maxSurge, or the
			// new pod started below (syncNodes creates before it
			// deletes) would briefly make one node too many.
			del = append(del, oldPod.Name)
			surged++
		}
	}
	if spare := availableNow - desired; spare > 0 {
		del = append(del, leaving[:min(spare, len(leaving))]...)
	}
	n := min(max(maxSurge-surged, 0), len(candidates))
	return c.syncNodes(ctx, ds, del, append(replaceOn, candidates[:n]...), hash)
}

// wantsPod says whether ds wants a pod on the named node (false for a
// node that is gone).
func (c *Controller) wantsPod(ds *appsv1.DaemonSet, name string) bool {
	node, err := c.nodeLister.Get(name)
	if err != nil {
		return false
	}
	run, _ := shouldRun(node, ds)
	return run
}

// updateBudget is how many pods the update may add and take down at once,
// scaled on the number of nodes that want a pod, desired (nodes without one are
// added to byNode so the update counts them). A DaemonSet allowing
// neither gets upstream's fallback of one unavailable.
func (c *Controller) updateBudget(ds *appsv1.DaemonSet, nodes []*corev1.Node, byNode map[string][]*corev1.Pod) (surge, unavailable, desired int, err error) {
	for _, node := range nodes {
		if run, _ := shouldRun(node, ds); run {
			desired++
			if _, ok := byNode[node.Name]; !ok {
				byNode[node.Name] = nil
			}
		}
	}
	if unavailable, err = unavailableCount(ds, desired); err != nil {
		return 0, 0, 0, fmt.Errorf("maxUnavailable: %w", err)
	}
	if surge, err = surgeCount(ds, desired); err != nil {
		return 0, 0, 0, fmt.Errorf("maxSurge: %w", err)
	}
	if desired > 0 && surge == 0 && unavailable == 0 {
		unavailable = 1
	}
	return surge, unavailable, desired, nil
}

// updatedPodsOnNode splits a node's live pods into the up-to-date one and
// the old one; ok is false when there are more than one of either.
func updatedPodsOnNode(pods []*corev1.Pod, hash string, gen *int64) (newPod, oldPod *corev1.Pod, ok bool) {
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		if podUpdated(p, hash, gen) {
			if newPod != nil {
				return nil, nil, false
			}
			newPod = p
		} else {
			if oldPod != nil {
				return nil, nil, false
			}
			oldPod = p
		}
	}
	return newPod, oldPod, true
}
