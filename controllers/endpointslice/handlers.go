package endpointslice

import (
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"bonsai.dev/bonsai/controllers/kit"
	"bonsai.dev/bonsai/controllers/worker"
)

func (c *Controller) enqueueService(obj any) {
	worker.Enqueue(c.queue, obj)
}

// enqueueBatched queues Services after a pod change, after the batch
// period so that the changes of several pods share one write.
func (c *Controller) enqueueBatched(keys sets.Set[string]) {
	for key := range keys {
		c.queue.AddAfter(key, c.cfg.EndpointUpdatesBatchPeriod)
	}
}

// managedKey is the key of the Service a slice of this controller's
// belongs to, or "" for other slices.
func managedKey(obj any) (string, *discoveryv1.EndpointSlice) {
	s, ok := kit.Unwrap[*discoveryv1.EndpointSlice](obj)
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
