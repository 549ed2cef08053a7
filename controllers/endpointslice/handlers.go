package endpointslice

import (
	"time"

	corev1 "k8s.io/api/core/v1"
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

// onNodeChange resyncs the Services with topology aware hints when a
// node's part in the zones' shares may have changed: it came or went, or
// its zone, allocatable CPU, readiness or control-plane labels changed.
// (A node's heartbeats change none of these.) The Services are looked
// for at most once per nodeChangeDelay, however many nodes change (a
// start lists every node).
func (c *Controller) onNodeChange(old, cur any) {
	if o, ok := kit.Unwrap[*corev1.Node](old); ok {
		if n, ok := kit.Unwrap[*corev1.Node](cur); ok && !topologyChanged(o, n) {
			return
		}
	}
	if !c.nodesChanged.CompareAndSwap(false, true) {
		return
	}
	time.AfterFunc(nodeChangeDelay, func() {
		c.nodesChanged.Store(false)
		for _, obj := range c.services.GetIndexer().List() {
			if svc := obj.(*corev1.Service); autoHints(svc) {
				c.enqueueService(svc)
			}
		}
	})
}

// nodeChangeDelay batches node changes for the hinted Services.
const nodeChangeDelay = time.Second

func topologyChanged(a, b *corev1.Node) bool {
	for _, l := range []string{corev1.LabelTopologyZone, "node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master"} {
		va, oka := a.Labels[l]
		vb, okb := b.Labels[l]
		if va != vb || oka != okb {
			return true
		}
	}
	return nodeReady(a) != nodeReady(b) || !a.Status.Allocatable.Cpu().Equal(*b.Status.Allocatable.Cpu())
}
