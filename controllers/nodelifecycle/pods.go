package nodelifecycle

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"

	"bonsai.dev/bonsai/controllers/kit"
)

func (c *Controller) processNextPod(ctx context.Context) bool {
	key, quit := c.podQueue.Get()
	if quit {
		return false
	}
	defer c.podQueue.Done(key)
	if err := c.syncPod(ctx, key); err != nil {
		if ctx.Err() == nil && !apierrors.IsConflict(err) {
			c.log.Warn("pod sync failed; retrying", "pod", key, "err", err)
		}
		c.podQueue.AddRateLimited(key)
		return true
	}
	c.podQueue.Forget(key)
	return true
}

// syncPod does what a pod's node calls for: delete it when its node is
// gone or has a NoExecute taint it does not tolerate (now, or once its
// tolerationSeconds are up), and mark it not Ready when its node is
// unreachable.
func (c *Controller) syncPod(ctx context.Context, key string) error {
	obj, ok, err := c.pods.GetIndexer().GetByKey(key)
	if err != nil {
		return err
	}
	if !ok {
		c.mu.Lock()
		delete(c.orphans, key)
		c.mu.Unlock()
		return nil
	}
	pod := obj.(*corev1.Pod)
	if pod.Spec.NodeName == "" {
		return nil
	}
	nobj, ok, err := c.nodes.GetStore().GetByKey(pod.Spec.NodeName)
	if err != nil {
		return err
	}
	if !ok {
		return c.deleteOrphan(ctx, pod)
	}
	node := nobj.(*corev1.Node)
	// A node out of service is known to be down: nothing there will finish
	// a graceful delete, so pods without a toleration for the taint (with
	// either effect) are force-deleted, terminating ones too.
	if t := outOfService(node); t != nil && !corev1helpers.TolerationsTolerateTaint(klog.Background(), pod.Spec.Tolerations, t, false) {
		c.recorder.Eventf(pod, corev1.EventTypeNormal, reasonTaintManagerEviction,
			"Force-deleting Pod %s/%s: node %s has taint %s:%s, which the pod does not tolerate", pod.Namespace, pod.Name, node.Name, t.Key, t.Effect)
		c.log.Info("force-deleting pod of an out-of-service node", "pod", key, "node", node.Name)
		return c.deletePod(ctx, pod, &metav1.DeleteOptions{GracePeriodSeconds: new(int64), Preconditions: &metav1.Preconditions{UID: &pod.UID}})
	}
	if pod.DeletionTimestamp != nil {
		return nil
	}

	if taint, untolerated, wait := c.evictionDue(pod, node); taint != nil {
		if wait > 0 {
			c.podQueue.AddAfter(key, wait)
		} else {
			return c.evict(ctx, pod, taint, untolerated)
		}
	}
	if rc := readyCondition(node); rc != nil && rc.Status == corev1.ConditionUnknown {
		return c.markPodNotReady(ctx, pod)
	}
	return nil
}

// evictionDue finds the NoExecute taint that will evict pod soonest:
// one it does not tolerate (untolerated, due now), else the tolerated one
// with the shortest tolerationSeconds, due that long after the taint was
// added. wait is how long until then; no taint means the pod stays.
func (c *Controller) evictionDue(pod *corev1.Pod, node *corev1.Node) (taint *corev1.Taint, untolerated bool, wait time.Duration) {
	logger := klog.Background()
	now := c.clock.Now()
	var best *corev1.Taint
	var bestAt time.Time
	for i := range node.Spec.Taints {
		t := &node.Spec.Taints[i]
		if t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		if !corev1helpers.TolerationsTolerateTaint(logger, pod.Spec.Tolerations, t, false) {
			return t, true, 0
		}
		// The shortest tolerationSeconds among the tolerations that match
		// rules; none set means forever.
		var secs *int64
		for j := range pod.Spec.Tolerations {
			tol := &pod.Spec.Tolerations[j]
			if !tol.ToleratesTaint(logger, t, false) {
				continue
			}
			if tol.TolerationSeconds == nil {
				secs = nil
				break
			}
			if secs == nil || *tol.TolerationSeconds < *secs {
				secs = tol.TolerationSeconds
			}
		}
		if secs == nil {
			continue
		}
		added := now
		if t.TimeAdded != nil {
			added = t.TimeAdded.Time
		}
		at := added.Add(time.Duration(max(*secs, 0)) * time.Second)
		if best == nil || at.Before(bestAt) {
			best, bestAt = t, at
		}
	}
	if best == nil {
		return nil, false, 0
	}
	return best, false, max(bestAt.Sub(now), 0)
}

// evict deletes a pod for a NoExecute taint, gracefully, as upstream's
// taint manager does.
func (c *Controller) evict(ctx context.Context, pod *corev1.Pod, taint *corev1.Taint, untolerated bool) error {
	opts := &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}}
	how := "does not tolerate"
	if !untolerated {
		how = "tolerated for its tolerationSeconds"
	}
	c.recorder.Eventf(pod, corev1.EventTypeNormal, reasonTaintManagerEviction,
		"Marking for deletion Pod %s/%s: node %s has taint %s:%s, which the pod %s", pod.Namespace, pod.Name, pod.Spec.NodeName, taint.Key, taint.Effect, how)
	c.log.Info("evicting pod for a NoExecute taint", "pod", pod.Namespace+"/"+pod.Name, "node", pod.Spec.NodeName, "taint", taint.Key, "untolerated", untolerated)
	return c.deletePod(ctx, pod, opts)
}

func (c *Controller) deletePod(ctx context.Context, pod *corev1.Pod, opts *metav1.DeleteOptions) error {
	err := c.core.Delete().Namespace(pod.Namespace).Resource("pods").Name(pod.Name).Body(opts).Do(ctx).Error()
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone, or another pod of that name: nothing to do for this one
	}
	return err
}

// deleteOrphan force-deletes a pod bound to a node that does not exist,
// once it has been so for orphanQuarantine (as upstream's pod GC: a node
// may be on its way) and the API confirms it (the node informer may lag
// behind the pods').
func (c *Controller) deleteOrphan(ctx context.Context, pod *corev1.Pod) error {
	key := cacheKey(pod)
	now := c.clock.Now()
	c.mu.Lock()
	first, ok := c.orphans[key]
	if !ok {
		first = now
		c.orphans[key] = now
	}
	c.mu.Unlock()
	if wait := first.Add(orphanQuarantine).Sub(now); wait > 0 {
		c.podQueue.AddAfter(key, wait)
		return nil
	}
	c.mu.Lock()
	delete(c.orphans, key)
	c.mu.Unlock()
	err := c.core.Get().Resource("nodes").Name(pod.Spec.NodeName).Do(ctx).Error()
	if err == nil {
		return nil // the node is back; its events bring the pod here again
	}
	if !apierrors.IsNotFound(err) {
		return err
	}
	c.log.Info("deleting pod of a node that no longer exists", "pod", pod.Namespace+"/"+pod.Name, "node", pod.Spec.NodeName)
	c.recorder.Eventf(pod, corev1.EventTypeNormal, "NodeDeleted", "Deleting pod %s/%s: its node %s no longer exists", pod.Namespace, pod.Name, pod.Spec.NodeName)
	return c.deletePod(ctx, pod, &metav1.DeleteOptions{GracePeriodSeconds: new(int64), Preconditions: &metav1.Preconditions{UID: &pod.UID}})
}

// markPodNotReady sets a pod's Ready condition False: its node cannot say
// otherwise, and Services must stop sending it traffic.
func (c *Controller) markPodNotReady(ctx context.Context, pod *corev1.Pod) error {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed || podReady(pod) == corev1.ConditionFalse {
		return nil
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p := &corev1.Pod{}
		if err := c.core.Get().Namespace(pod.Namespace).Resource("pods").Name(pod.Name).Do(ctx).Into(p); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}
		if p.UID != pod.UID || podReady(p) == corev1.ConditionFalse {
			return nil
		}
		now := metav1.NewTime(c.clock.Now())
		found := false
		for i := range p.Status.Conditions {
			if cond := &p.Status.Conditions[i]; cond.Type == corev1.PodReady {
				cond.Status, cond.LastTransitionTime, cond.Reason, cond.Message = corev1.ConditionFalse, now, "NodeNotReady", fmt.Sprintf("Node %s is unreachable", p.Spec.NodeName)
				found = true
			}
		}
		if !found {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: now, Reason: "NodeNotReady"})
		}
		c.recorder.Eventf(p, corev1.EventTypeWarning, reasonNodeNotReady, "Node is not ready")
		return c.core.Put().Namespace(p.Namespace).Resource("pods").Name(p.Name).SubResource("status").Body(p).Do(ctx).Error()
	})
}

func outOfService(n *corev1.Node) *corev1.Taint {
	for i := range n.Spec.Taints {
		if n.Spec.Taints[i].Key == taintOutOfService {
			return &n.Spec.Taints[i]
		}
	}
	return nil
}

// podReady is the status of p's Ready condition, "" without one.
func podReady(p *corev1.Pod) corev1.ConditionStatus {
	if c := kit.PodReadyCondition(p); c != nil {
		return c.Status
	}
	return ""
}

func cacheKey(p *corev1.Pod) string {
	k, _ := cache.MetaNamespaceKeyFunc(p)
	return k
}

// gcPods deletes the oldest terminated pods over the threshold, and pods
// bound to nodes that do not exist (which the pod queue also catches as
// they change; this catches the rest, after a restart for instance).
func (c *Controller) gcPods(ctx context.Context) {
	var terminated []*corev1.Pod
	for _, obj := range c.pods.GetStore().List() {
		p := obj.(*corev1.Pod)
		if p.DeletionTimestamp != nil {
			continue
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			terminated = append(terminated, p)
		}
		if p.Spec.NodeName != "" {
			if _, ok, _ := c.nodes.GetStore().GetByKey(p.Spec.NodeName); !ok {
				c.podQueue.Add(cacheKey(p))
			}
		}
	}
	over := len(terminated) - c.cfg.TerminatedPodGCThreshold
	if c.cfg.TerminatedPodGCThreshold <= 0 || over <= 0 {
		return
	}
	sort.Slice(terminated, func(i, j int) bool {
		a, b := terminated[i].CreationTimestamp, terminated[j].CreationTimestamp
		if a.Equal(&b) {
			return terminated[i].Name < terminated[j].Name
		}
		return a.Before(&b)
	})
	c.log.Info("deleting terminated pods over the threshold", "count", over, "threshold", c.cfg.TerminatedPodGCThreshold)
	for _, p := range terminated[:over] {
		if err := c.deletePod(ctx, p, &metav1.DeleteOptions{GracePeriodSeconds: new(int64), Preconditions: &metav1.Preconditions{UID: &p.UID}}); err != nil && ctx.Err() == nil {
			c.log.Warn("pod GC delete failed; next pass retries", "pod", p.Namespace+"/"+p.Name, "err", err)
		}
	}
}
