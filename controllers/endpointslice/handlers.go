package endpointslice

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"

	"bonsai.dev/bonsai/controllers/servicepods"
)

func (c *Controller) enqueueService(obj any) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Add(key)
	}
}

// enqueueBatched queues Services after a pod change, after the batch
// period so that the changes of several pods share one write.
func (c *Controller) enqueueBatched(keys sets.Set[string]) {
	for key := range keys {
		c.queue.AddAfter(key, c.cfg.EndpointUpdatesBatchPeriod)
	}
}

func podOf(obj any) *corev1.Pod {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	p, _ := obj.(*corev1.Pod)
	return p
}

// onPod queues the Services that select a pod added or deleted.
func (c *Controller) onPod(obj any) {
	p := podOf(obj)
	if p == nil {
		return
	}
	keys, err := servicepods.ServicesForPod(c.services.GetIndexer(), p)
	if err != nil {
		c.log.Error("finding the Services of a pod", "pod", p.Namespace+"/"+p.Name, "err", err)
		return
	}
	c.enqueueBatched(keys)
}

// onPodUpdate queues only the Services whose endpoints the change may
// alter, so that status noise (container restarts counts, conditions
// other than Ready) costs nothing.
func (c *Controller) onPodUpdate(old, cur any) {
	o, n := podOf(old), podOf(cur)
	if o == nil || n == nil {
		return
	}
	keys, err := servicepods.ServicesToUpdateOnPodChange(c.services.GetIndexer(), o, n)
	if err != nil {
		c.log.Error("finding the Services of a pod", "pod", n.Namespace+"/"+n.Name, "err", err)
		return
	}
	c.enqueueBatched(keys)
}

// managedKey is the key of the Service a slice of this controller's
// belongs to, or "" for other slices.
func managedKey(obj any) (string, *discoveryv1.EndpointSlice) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || s.Labels[discoveryv1.LabelManagedBy] != ControllerName || s.Labels[discoveryv1.LabelServiceName] == "" {
		return "", nil
	}
	return s.Namespace + "/" + s.Labels[discoveryv1.LabelServiceName], s
}

// enqueueForSlice queues a Service after a change of one of its slices,
// at least sliceChangeMinSyncDelay later so that a burst of slice events
// (a user deleting them all, say) costs one sync.
func (c *Controller) enqueueForSlice(key string) {
	c.queue.AddAfter(key, max(sliceChangeMinSyncDelay, c.cfg.EndpointUpdatesBatchPeriod))
}

// onSlice resyncs a Service when one of its slices changed in a way this
// controller did not write itself (a user edit, say).
func (c *Controller) onSlice(obj any) {
	if key, s := managedKey(obj); s != nil && c.tracker.ShouldSync(key, s) {
		c.enqueueForSlice(key)
	}
}

func (c *Controller) onSliceUpdate(old, cur any) {
	// A slice relabelled away from this controller or its Service leaves
	// a gap the old owner must fill.
	if oldKey, o := managedKey(old); o != nil {
		if newKey, n := managedKey(cur); n == nil || newKey != oldKey {
			c.enqueueForSlice(oldKey)
		}
	}
	c.onSlice(cur)
}

func (c *Controller) onSliceDelete(obj any) {
	if key, s := managedKey(obj); s != nil && !c.tracker.HandleDeletion(key, s.Name) {
		c.enqueueForSlice(key)
	}
}
