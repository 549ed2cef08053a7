package scheduler

import (
	"context"
	"encoding/json"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
)

// Preemption is Kubernetes' DefaultPreemption, cut down: when a pod fits
// nowhere, find the node where evicting the fewest, lowest-priority pods
// lets it fit; delete those gracefully, and nominate the node in the
// pod's status.nominatedNodeName. The pod is retried when they are gone.
// Only nodes whose failure a preemption can cure (resources, host ports)
// are candidates; affinity rules are not re-evaluated without victims.

// preemption is one decision: the node and the pods to evict.
type preemption struct {
	node    string
	victims []*corev1.Pod
}

// eligibleToPreempt follows Kubernetes: preemptionPolicy Never never
// preempts, and a pod whose nominated node still has lower-priority pods
// terminating waits for them rather than evicting more.
func (s *Scheduler) eligibleToPreemptLocked(pod *corev1.Pod) bool {
	if pod.Spec.PreemptionPolicy != nil && *pod.Spec.PreemptionPolicy == corev1.PreemptNever {
		return false
	}
	if nn := pod.Status.NominatedNodeName; nn != "" {
		if ni := s.cache.nodes[nn]; ni != nil {
			prio := corev1helpers.PodPriority(pod)
			for _, cp := range ni.pods {
				if cp.pod.DeletionTimestamp != nil && corev1helpers.PodPriority(cp.pod) < prio {
					return false
				}
			}
		}
	}
	return true
}

// findPreemptionLocked picks victims among the candidate nodes (those
// that failed for a reason evicting pods can cure).
func (s *Scheduler) findPreemptionLocked(state *CycleState, pod *corev1.Pod, candidates []*NodeInfo) *preemption {
	if len(candidates) == 0 || !s.eligibleToPreemptLocked(pod) {
		return nil
	}
	prio := corev1helpers.PodPriority(pod)
	var best *preemption
	var bestMax int32
	for _, ni := range candidates {
		victims, ok := s.victimsOn(state, pod, prio, ni)
		if !ok {
			continue
		}
		maxPrio := int32(-1 << 31)
		for _, v := range victims {
			maxPrio = max(maxPrio, corev1helpers.PodPriority(v.pod))
		}
		// Kubernetes' first criteria: the lowest highest-priority victim,
		// then the fewest victims.
		if best == nil || maxPrio < bestMax || (maxPrio == bestMax && len(victims) < len(best.victims)) {
			best = &preemption{node: ni.Node.Name}
			for _, v := range victims {
				best.victims = append(best.victims, v.pod)
			}
			bestMax = maxPrio
		}
	}
	return best
}

// victimsOn removes every lower-priority pod from a scratch copy of the
// node; if the pod then fits, it puts back as many as it can, highest
// priority first, and returns the rest.
func (s *Scheduler) victimsOn(state *CycleState, pod *corev1.Pod, prio int32, ni *NodeInfo) ([]*cachedPod, bool) {
	scratch := newNodeInfo()
	scratch.setNode(ni.Node)
	var lower []*cachedPod
	for _, cp := range ni.pods {
		if cp.pod.DeletionTimestamp == nil && corev1helpers.PodPriority(cp.pod) < prio {
			lower = append(lower, cp)
			continue
		}
		scratch.addPod(cp)
	}
	if len(lower) == 0 || runFilters(s.filters, state, pod, scratch) != nil {
		return nil, false
	}
	sort.Slice(lower, func(i, j int) bool {
		return corev1helpers.PodPriority(lower[i].pod) > corev1helpers.PodPriority(lower[j].pod)
	})
	var victims []*cachedPod
	for _, cp := range lower {
		scratch.addPod(cp)
		if runFilters(s.filters, state, pod, scratch) != nil {
			scratch.removePod(cp)
			victims = append(victims, cp)
		}
	}
	return victims, true
}

// preempt writes the decision: the nomination first, so the pod is not
// seen as needing another preemption, then the victims' graceful deletion.
func (s *Scheduler) preempt(pod *corev1.Pod, p *preemption) {
	s.recorder.Eventf(pod, corev1.EventTypeNormal, "Preempting", "Preempting %d pod(s) on node %s", len(p.victims), p.node)
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"nominatedNodeName": p.node}})
	ns, name := pod.Namespace, pod.Name
	victims := p.victims
	s.writes <- func(ctx context.Context) {
		err := s.core.Patch(types.StrategicMergePatchType).Namespace(ns).Resource("pods").Name(name).SubResource("status").Body(patch).Do(ctx).Error()
		if err != nil {
			if !apierrors.IsNotFound(err) && ctx.Err() == nil {
				s.log.Warn("could not nominate a node", "pod", ns+"/"+name, "err", err)
			}
			return
		}
		for _, v := range victims {
			s.recorder.Eventf(v, corev1.EventTypeNormal, "Preempted", "Preempted by pod %s on node %s", pod.UID, p.node)
			// The victim's own grace period; only that very pod (UID).
			opts := &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &v.UID}}
			err := s.core.Delete().Namespace(v.Namespace).Resource("pods").Name(v.Name).Body(opts).Do(ctx).Error()
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
				s.log.Warn("could not delete a preemption victim", "pod", v.Namespace+"/"+v.Name, "err", err)
			}
		}
	}
}
