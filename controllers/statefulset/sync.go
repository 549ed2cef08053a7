package statefulset

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	"bonsai.dev/bonsai/controllers/kit"
)

// sync drives one StatefulSet toward its replicas at their revisions and
// writes its status.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	set, err := c.setLister.StatefulSets(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	sel, err := metav1.LabelSelectorAsSelector(set.Spec.Selector)
	if err != nil {
		return nil // validation keeps these out; nothing to do
	}
	all, err := c.podLister.Pods(set.Namespace).List(labels.Everything())
	if err != nil {
		return err
	}
	pods, err := refManager(c, set, sel, kit.PatchWith(c.client.Core.Pods)).
		Claim(ctx, all, func(p *corev1.Pod) bool { return isMemberOf(set, p) })
	if err != nil {
		return err
	}
	set = set.DeepCopy()
	revs, err := c.listRevisions(ctx, set)
	if err != nil {
		return err
	}
	current, update, collisionCount, err := c.revisions(ctx, set, revs)
	if err != nil {
		return err
	}
	status, err := c.update(ctx, set, current, update, collisionCount, pods)
	if status != nil {
		err = errors.Join(err, c.updateStatus(ctx, set, status))
	}
	if err != nil {
		return err
	}
	if err := c.truncateHistory(ctx, set, pods, revs, current, update); err != nil {
		return err
	}
	// Pods turn available minReadySeconds after Ready with no event.
	if set.Spec.MinReadySeconds > 0 && status.AvailableReplicas != status.ReadyReplicas {
		c.enqueueAfter(set, time.Duration(set.Spec.MinReadySeconds)*time.Second)
	}
	return nil
}

// update is upstream's updateStatefulSet: bring replicas in the ordinal
// range into being (in order and one at a time unless Parallel), delete
// condemned ones above it (highest first), then roll out the update
// revision from the highest ordinal down to the partition.
func (c *Controller) update(ctx context.Context, set *appsv1.StatefulSet, currentRev, updateRev *appsv1.ControllerRevision, collisionCount int32, pods []*corev1.Pod) (*appsv1.StatefulSetStatus, error) {
	currentSet, err := applyRevision(set, currentRev)
	if err != nil {
		return nil, err
	}
	updateSet, err := applyRevision(set, updateRev)
	if err != nil {
		return nil, err
	}
	status := &appsv1.StatefulSetStatus{
		ObservedGeneration: set.Generation,
		CurrentRevision:    currentRev.Name,
		UpdateRevision:     updateRev.Name,
		CollisionCount:     &collisionCount,
	}
	start := startOrdinal(set)
	replicaList := make([]*corev1.Pod, replicas(set))
	var condemned []*corev1.Pod
	for _, p := range pods {
		switch o := ordinalOf(p); {
		case inOrdinalRange(set, p):
			replicaList[o-start] = p
		case o >= 0:
			condemned = append(condemned, p)
		}
	}
	for i := range replicaList {
		if replicaList[i] == nil {
			replicaList[i] = newVersionedPod(currentSet, updateSet, currentRev.Name, updateRev.Name, start+i)
		}
	}
	slices.SortFunc(condemned, func(a, b *corev1.Pod) int { return ordinalOf(b) - ordinalOf(a) })
	fill := func() { c.countReplicas(status, set, currentRev, updateRev, replicaList, condemned) }
	fill()

	var firstUnhealthy *corev1.Pod
	for _, p := range replicaList {
		if !isHealthy(p) {
			firstUnhealthy = p
			break
		}
	}
	if firstUnhealthy == nil {
		for i := len(condemned) - 1; i >= 0; i-- {
			if !isHealthy(condemned[i]) {
				firstUnhealthy = condemned[i]
				break
			}
		}
	}
	if set.DeletionTimestamp != nil {
		return status, nil
	}
	monotonic := set.Spec.PodManagementPolicy != appsv1.ParallelPodManagement

	replica := func(i int) (bool, error) {
		return c.processReplica(ctx, set, updateSet, monotonic, replicaList, i)
	}
	if stop, err := runForAll(len(replicaList), replica, monotonic); stop || err != nil {
		fill()
		return status, err
	}
	fixClaims := func(i int) (bool, error) {
		ok, err := c.claimsMatchPolicy(updateSet, condemned[i])
		if err == nil && !ok {
			err = c.updateClaimsForPolicy(ctx, updateSet, condemned[i])
		}
		return err != nil, err
	}
	if stop, err := runForAll(len(condemned), fixClaims, monotonic); stop || err != nil {
		fill()
		return status, err
	}
	scaleDown := func(i int) (bool, error) {
		return c.processCondemned(ctx, set, firstUnhealthy, monotonic, condemned, i)
	}
	if stop, err := runForAll(len(condemned), scaleDown, monotonic); stop || err != nil {
		fill()
		return status, err
	}
	fill()
	if set.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType {
		return status, nil
	}
	return status, c.rollingUpdate(ctx, set, replicaList, updateRev, status)
}

// maxBatch caps the calls a Parallel set makes at once.
const maxBatch = 500

// runForAll calls fn for 0..n-1. Monotonic, one after another, stopping
// at the first that asks to or fails; otherwise concurrently in batches
// that double while they succeed (upstream's slow start), stopping after
// a batch with errors.
func runForAll(n int, fn func(int) (bool, error), monotonic bool) (bool, error) {
	if monotonic {
		for i := range n {
			if stop, err := fn(i); stop || err != nil {
				return true, err
			}
		}
		return false, nil
	}
	for pos, batch := 0, 1; pos < n; pos, batch = pos+batch, min(2*batch, maxBatch) {
		batch = min(batch, n-pos)
		errs := make([]error, batch)
		var wg sync.WaitGroup
		for j := range batch {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[j] = fn(pos + j)
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return true, err
		}
	}
	return false, nil
}

// processReplica brings replica i into being and keeps its identity,
// storage and claim ownership; true when an OrderedReady set must wait.
func (c *Controller) processReplica(ctx context.Context, set, updateSet *appsv1.StatefulSet, monotonic bool, replicaList []*corev1.Pod, i int) (bool, error) {
	p := replicaList[i]
	// Failed and Succeeded pods are replaced alike: how a pod stopped
	// (eviction, node reboot) decides its phase, not whether it should
	// run. The successor, of the same name, comes once the API server
	// has let the old one go.
	if isFailed(p) || isSucceeded(p) {
		if p.DeletionTimestamp != nil {
			return true, nil
		}
		if isFailed(p) {
			c.recorder.Eventf(set, corev1.EventTypeWarning, "RecreatingFailedPod", "StatefulSet %s/%s is recreating failed Pod %s", set.Namespace, set.Name, p.Name)
		} else {
			c.recorder.Eventf(set, corev1.EventTypeNormal, "RecreatingTerminatedPod", "StatefulSet %s/%s is recreating terminated Pod %s", set.Namespace, set.Name, p.Name)
		}
		return true, c.deletePod(ctx, set, p)
	}
	if !isCreated(p) {
		stale, err := c.claimIsStale(set, p)
		if err != nil || stale {
			return true, err
		}
		if err := c.createPod(ctx, set, p); err != nil {
			return true, err
		}
		if monotonic {
			return true, nil
		}
	}
	if isPending(p) {
		if err := c.createClaims(ctx, set, p); err != nil {
			return true, err
		}
	}
	now := c.clock.Now()
	if monotonic && (isTerminating(p) || !isRunningAndReady(p) || !isRunningAndAvailable(p, set.Spec.MinReadySeconds, now)) {
		return true, nil
	}
	// An error here means the pod is not fully there yet: count it as
	// matching and look again next time.
	claimsOK, err := c.claimsMatchPolicy(updateSet, p)
	if err != nil {
		claimsOK = true
	}
	if !isCreated(p) || (identityMatches(set, p) && storageMatches(set, p) && claimsOK) {
		return false, nil
	}
	return false, c.updatePod(ctx, updateSet, p.DeepCopy())
}

// processCondemned deletes condemned pod i; an OrderedReady set waits
// for it to be the one unhealthy pod or for all to be healthy, and
// deletes one pod per sync.
func (c *Controller) processCondemned(ctx context.Context, set *appsv1.StatefulSet, firstUnhealthy *corev1.Pod, monotonic bool, condemned []*corev1.Pod, i int) (bool, error) {
	p := condemned[i]
	if isTerminating(p) {
		return monotonic, nil
	}
	now := c.clock.Now()
	if monotonic && p != firstUnhealthy && (!isRunningAndReady(p) || !isRunningAndAvailable(p, set.Spec.MinReadySeconds, now)) {
		return true, nil
	}
	c.log.Debug("deleting pod for scale down", "statefulset", set.Namespace+"/"+set.Name, "pod", p.Name)
	return true, c.deletePod(ctx, set, p)
}

// rollingUpdate deletes pods not at the update revision, from the highest
// ordinal down to the partition, at most maxUnavailable unavailable at a
// time; manage recreates them at the update revision.
func (c *Controller) rollingUpdate(ctx context.Context, set *appsv1.StatefulSet, replicaList []*corev1.Pod, updateRev *appsv1.ControllerRevision, status *appsv1.StatefulSetStatus) error {
	partition, maxUnavailable := 0, 1
	if ru := set.Spec.UpdateStrategy.RollingUpdate; ru != nil {
		if ru.Partition != nil {
			partition = int(*ru.Partition)
		}
		if ru.MaxUnavailable != nil {
			n, err := intstr.GetScaledValueFromIntOrPercent(ru.MaxUnavailable, replicas(set), true)
			if err != nil {
				return fmt.Errorf("maxUnavailable: %w", err)
			}
			// A small percentage rounds to 0: at least one at a time.
			maxUnavailable = max(n, 1)
		}
	}
	now := c.clock.Now()
	unavailable := 0
	for _, p := range replicaList {
		if isUnavailable(p, set.Spec.MinReadySeconds, now) {
			unavailable++
		}
	}
	// An OrderedReady set only gets here with every replica available, so
	// with the default maxUnavailable of 1 it updates one pod and waits
	// for it to come back.
	budget := maxUnavailable - unavailable
	for target := len(replicaList) - 1; target >= partition && budget > 0; target-- {
		p := replicaList[target]
		if revisionOf(p) == updateRev.Name || isTerminating(p) {
			continue
		}
		if err := c.deletePod(ctx, set, p); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		status.CurrentReplicas--
		budget--
	}
	return nil
}

// countReplicas fills the replica counts of status from the pods.
func (c *Controller) countReplicas(status *appsv1.StatefulSetStatus, set *appsv1.StatefulSet, currentRev, updateRev *appsv1.ControllerRevision, lists ...[]*corev1.Pod) {
	status.Replicas, status.ReadyReplicas, status.AvailableReplicas, status.CurrentReplicas, status.UpdatedReplicas = 0, 0, 0, 0, 0
	now := c.clock.Now()
	for _, list := range lists {
		for _, p := range list {
			if isCreated(p) {
				status.Replicas++
			}
			if isRunningAndReady(p) {
				status.ReadyReplicas++
				if isRunningAndAvailable(p, set.Spec.MinReadySeconds, now) {
					status.AvailableReplicas++
				}
			}
			if isCreated(p) && !isTerminating(p) {
				if revisionOf(p) == currentRev.Name {
					status.CurrentReplicas++
				}
				if revisionOf(p) == updateRev.Name {
					status.UpdatedReplicas++
				}
			}
		}
	}
}

// updateStatus completes a finished rolling update (the update revision
// becomes current) and writes status if it changed.
func (c *Controller) updateStatus(ctx context.Context, set *appsv1.StatefulSet, status *appsv1.StatefulSetStatus) error {
	if set.Spec.UpdateStrategy.Type == appsv1.RollingUpdateStatefulSetStrategyType &&
		status.UpdatedReplicas == status.Replicas && status.ReadyReplicas == status.Replicas {
		status.CurrentReplicas = status.UpdatedReplicas
		status.CurrentRevision = status.UpdateRevision
	}
	status.Conditions = set.Status.Conditions
	if statusEqual(&set.Status, status) {
		return nil
	}
	sets := c.client.Apps.StatefulSets(set.Namespace)
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		set.Status = *status
		_, err := sets.UpdateStatus(ctx, set, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			if err != nil {
				return fmt.Errorf("update status: %w", err)
			}
			return nil
		}
		fresh, gerr := c.setLister.StatefulSets(set.Namespace).Get(set.Name)
		if gerr != nil {
			return gerr
		}
		*set = *fresh.DeepCopy()
		return err
	})
}

func statusEqual(a, b *appsv1.StatefulSetStatus) bool {
	return a.ObservedGeneration == b.ObservedGeneration && a.Replicas == b.Replicas && a.ReadyReplicas == b.ReadyReplicas &&
		a.AvailableReplicas == b.AvailableReplicas && a.CurrentReplicas == b.CurrentReplicas && a.UpdatedReplicas == b.UpdatedReplicas &&
		a.CurrentRevision == b.CurrentRevision && a.UpdateRevision == b.UpdateRevision &&
		(a.CollisionCount == nil) == (b.CollisionCount == nil) && (a.CollisionCount == nil || *a.CollisionCount == *b.CollisionCount)
}
