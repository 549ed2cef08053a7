package scheduler

import (
	"maps"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// cachedPod is a pod counted against a node: bound (seen so by the
// informer) or assumed (decided here, binding under way).
type cachedPod struct {
	pod  *corev1.Pod
	node string
	req  *podResources
	// affinity is the pod's parsed inter-pod affinity; nil for most pods.
	affinity *podAffinity
	assumed  bool
}

// schedCache is the scheduler's view of nodes and of the pods on them.
// It counts a pod against its node from the moment the scheduler decides
// (assume), not from when the binding comes back through the watch: a
// burst of pods never books more of a node than it has. Node and pod
// events update NodeInfos in place; the scheduling loop reads them under
// the same lock, so no per-cycle snapshot is copied.
type schedCache struct {
	mu    sync.Mutex
	nodes map[string]*NodeInfo
	// list is the nodes that exist, in a stable order the scheduler walks
	// round-robin; NodeInfos of pods whose Node is not yet seen are kept
	// out of it.
	list []*NodeInfo
	pods map[types.UID]*cachedPod
	// affinity counts the pods on listed nodes for InterPodAffinity.
	affinity *affinityIndex
}

func newSchedCache() *schedCache {
	return &schedCache{nodes: map[string]*NodeInfo{}, pods: map[types.UID]*cachedPod{}, affinity: newAffinityIndex()}
}

func (c *schedCache) nodeInfoLocked(name string) *NodeInfo {
	ni := c.nodes[name]
	if ni == nil {
		ni = newNodeInfo()
		c.nodes[name] = ni
	}
	return ni
}

func (c *schedCache) setNode(n *corev1.Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ni := c.nodeInfoLocked(n.Name)
	old := ni.Node
	if old == nil {
		c.list = append(c.list, ni)
	}
	ni.setNode(n)
	// The node's pods count from when it is listed, in the topologies
	// its labels put them in.
	if old != nil && maps.Equal(old.Labels, n.Labels) {
		return
	}
	for _, cp := range ni.pods {
		if old != nil {
			c.affinity.update(cp, old.Labels, -1)
		}
		c.affinity.update(cp, n.Labels, 1)
	}
}

func (c *schedCache) removeNode(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ni := c.nodes[name]
	if ni == nil || ni.Node == nil {
		return
	}
	for i, x := range c.list {
		if x == ni {
			c.list = append(c.list[:i], c.list[i+1:]...)
			break
		}
	}
	// Pods still bound to it keep their accounting until they go; the
	// node itself is no longer a candidate.
	for _, cp := range ni.pods {
		c.affinity.update(cp, ni.Node.Labels, -1)
	}
	ni.Node = nil
	if len(ni.pods) == 0 {
		delete(c.nodes, name)
	}
}

// setPod records a pod the API says is bound to a node. An assumed pod is
// confirmed; a pod that moved or changed is re-counted.
func (c *schedCache) setPod(p *corev1.Pod) {
	// What the pod asks for is worked out outside the lock the scheduling
	// loop holds, and only when it changed: a pod's binding and each of
	// its status writes come here, and leave both alone.
	c.mu.Lock()
	seen := c.pods[p.UID]
	c.mu.Unlock()
	cp := c.newCachedPod(seen, p)
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.pods[p.UID]
	if old != seen {
		cp = c.newCachedPod(old, p) // changed meanwhile: rare
	}
	if old != nil && old.node == cp.node && old.pod.Namespace == p.Namespace && maps.Equal(old.pod.Labels, p.Labels) {
		// A confirmation or a status write: the pod counts for
		// inter-pod affinity as it did (its own terms cannot change),
		// so the index is left alone; only its resources are counted
		// again. Re-counting it there cost a check against every
		// incoming term set kept, twice per status write.
		if ni := c.nodes[old.node]; ni != nil && ni.removePod(old) {
			c.pods[p.UID] = cp
			ni.addPod(cp)
			return
		}
	}
	if old != nil {
		c.removeLocked(old)
	}
	c.addLocked(cp)
}

func (c *schedCache) addLocked(cp *cachedPod) {
	c.pods[cp.pod.UID] = cp
	ni := c.nodeInfoLocked(cp.node)
	ni.addPod(cp)
	if ni.Node != nil {
		c.affinity.update(cp, ni.Node.Labels, 1)
	}
}

func (c *schedCache) removePod(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.pods[uid]; old != nil {
		c.removeLocked(old)
	}
}

func (c *schedCache) removeLocked(cp *cachedPod) {
	delete(c.pods, cp.pod.UID)
	ni := c.nodes[cp.node]
	if ni == nil {
		return
	}
	if ni.removePod(cp) && ni.Node != nil {
		c.affinity.update(cp, ni.Node.Labels, -1)
	}
	if ni.Node == nil && len(ni.pods) == 0 {
		delete(c.nodes, cp.node)
	}
}

// newCachedPod is p as the cache counts it, reusing what old (the same
// pod as counted before, or nil) worked out where p did not change it. A
// pod's inter-pod affinity cannot change.
func (c *schedCache) newCachedPod(old *cachedPod, p *corev1.Pod) *cachedPod {
	cp := &cachedPod{pod: p, node: p.Spec.NodeName}
	if old != nil && sameRequests(old.pod, p) {
		cp.req = old.req
	} else {
		cp.req = computePodResources(p)
	}
	if old != nil {
		cp.affinity = old.affinity
	} else {
		cp.affinity = parsePodAffinity(p)
	}
	return cp
}

// assumeLocked counts pod against node before the binding is written.
func (c *schedCache) assumeLocked(p *corev1.Pod, node string, req *podResources) {
	if old := c.pods[p.UID]; old != nil {
		c.removeLocked(old)
	}
	c.addLocked(&cachedPod{pod: p, node: node, req: req, affinity: parsePodAffinity(p), assumed: true})
}

// forget undoes an assume whose binding failed; a pod the informer has
// meanwhile confirmed stays.
func (c *schedCache) forget(p *corev1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cp := c.pods[p.UID]; cp != nil && cp.assumed {
		c.removeLocked(cp)
	}
}

// known is true for a pod the cache counts (bound or assumed): the queue
// may still hold an old copy of it.
func (c *schedCache) known(uid types.UID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pods[uid] != nil
}
