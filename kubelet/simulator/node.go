package simulator

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeschema "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// DefaultCapacity is what a simulated node has when its status says
// nothing: a generous server, so scheduling tests are not bound by it.
// Allocatable equals capacity (nothing is reserved for a system that does
// not run).
var DefaultCapacity = corev1.ResourceList{
	corev1.ResourceCPU:              resource.MustParse("32"),
	corev1.ResourceMemory:           resource.MustParse("256Gi"),
	corev1.ResourcePods:             resource.MustParse("110"),
	corev1.ResourceEphemeralStorage: resource.MustParse("1Ti"),
}

// kubeletConditions are the node conditions a healthy kubelet reports.
var kubeletConditions = []struct {
	typ             corev1.NodeConditionType
	status          corev1.ConditionStatus
	reason, message string
}{
	{corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"},
	{corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"},
	{corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"},
	{corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"},
}

// nodeView is what the simulator keeps of a Node instead of the Node:
// with 10,000 nodes the cache is most of its memory, and a decoded Node
// with its status takes about 4 KB against a few hundred bytes for this.
// The informer's transform computes it once per node event, against the
// whole Node; it is never changed afterwards.
type nodeView struct {
	metav1.ObjectMeta // name, UID and resourceVersion only

	simulated, heartbeat annotation
	podCIDR              netip.Prefix // invalid when the node has none
	internalIP           string
	readyHeartbeat       time.Time // zero: never posted
	created              time.Time
	// fix is what the node's status lacks to be a kubelet's (capacity,
	// node info, addresses), as strategic merge patch fields; nil when
	// nothing. condFix has bit i set when kubeletConditions[i] is missing
	// or says something else, condTransition when its status changes.
	fix                     map[string]any
	condFix, condTransition uint8
}

type annotation struct {
	value string
	set   bool
}

func (v *nodeView) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject shares fix: a view is never modified.
func (v *nodeView) DeepCopyObject() runtimeschema.Object {
	c := *v
	c.ObjectMeta = *v.ObjectMeta.DeepCopy()
	return &c
}

func (v *nodeView) ref() *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: v.Name, UID: v.UID}
}

// viewNode is the node informer's transform.
func (s *Simulator) viewNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil // a tombstone, or a view already
	}
	v := &nodeView{ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion}, created: n.CreationTimestamp.Time}
	v.simulated.value, v.simulated.set = n.Annotations[AnnotationSimulated]
	v.heartbeat.value, v.heartbeat.set = n.Annotations[AnnotationHeartbeat]
	v.podCIDR, _ = podCIDR(n)
	v.internalIP = internalIP(n)
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			v.readyHeartbeat = c.LastHeartbeatTime.Time
		}
	}
	if v.simulated.set {
		v.fix, v.condFix, v.condTransition = s.statusFix(n)
	}
	return v, nil
}

// statusFix compares a node's status with what a kubelet would report.
// What the node already has is kept (the server's own node reports the
// host's capacity and system); what is missing comes from DefaultCapacity
// and the simulator.
func (s *Simulator) statusFix(n *corev1.Node) (fix map[string]any, condFix, condTransition uint8) {
	fix = map[string]any{}
	capacity := n.Status.Capacity.DeepCopy()
	if add := missing(capacity, DefaultCapacity); len(add) > 0 {
		fix["capacity"] = add
		if capacity == nil {
			capacity = corev1.ResourceList{}
		}
		for k, q := range add {
			capacity[k] = q
		}
	}
	if add := missing(n.Status.Allocatable, capacity); len(add) > 0 {
		fix["allocatable"] = add
	}
	info := map[string]string{}
	have := n.Status.NodeInfo
	for _, f := range []struct{ field, have, want string }{
		{"containerRuntimeVersion", have.ContainerRuntimeVersion, "simulated://" + s.cfg.Version},
		{"kubeletVersion", have.KubeletVersion, s.cfg.KubeletVersion},
		{"operatingSystem", have.OperatingSystem, runtime.GOOS},
		{"architecture", have.Architecture, runtime.GOARCH},
		{"osImage", have.OSImage, "bonsai simulated node"},
		{"systemUUID", have.SystemUUID, string(n.UID)},
		{"machineID", have.MachineID, strings.ReplaceAll(string(n.UID), "-", "")},
	} {
		if f.have == "" && f.want != "" {
			info[f.field] = f.want
		}
	}
	if len(info) > 0 {
		fix["nodeInfo"] = info
	}
	if addrs := nodeAddresses(n); addrs != nil && !slices.Equal(addrs, n.Status.Addresses) {
		fix["addresses"] = addrs
	}
	if len(fix) == 0 {
		fix = nil
	}
	for i, kc := range kubeletConditions {
		found := false
		for _, c := range n.Status.Conditions {
			if c.Type != kc.typ {
				continue
			}
			found = true
			if c.Status != kc.status {
				condTransition |= 1 << i
			}
			if c.Status != kc.status || c.Reason != kc.reason || c.Message != kc.message {
				condFix |= 1 << i
			}
		}
		if !found {
			condFix |= 1 << i
			condTransition |= 1 << i
		}
	}
	return fix, condFix, condTransition
}

// missing is what defaults has that have lacks.
func missing(have, defaults corev1.ResourceList) corev1.ResourceList {
	var out corev1.ResourceList
	for k, v := range defaults {
		if _, ok := have[k]; !ok {
			if out == nil {
				out = corev1.ResourceList{}
			}
			out[k] = v.DeepCopy()
		}
	}
	return out
}

// syncNode posts a simulated node's status when it differs from what a
// kubelet would report, or when the last post is StatusInterval old, and
// schedules the next look.
func (s *Simulator) syncNode(ctx context.Context, name string) error {
	node, ok := s.simulatedNode(name)
	if !ok {
		if node == nil {
			s.forgetBad("", name)
		}
		s.leases.forget(name)
		return nil
	}
	if !s.heartbeat(node) {
		return nil
	}
	now := s.clock.Now()
	if wait := node.created.Add(cidrGrace).Sub(now); node.readyHeartbeat.IsZero() && !node.podCIDR.IsValid() && wait > 0 {
		// A new node's first status waits a moment for its pod CIDR, and
		// the address that comes from it: one post instead of two, which
		// matters when 10,000 nodes register at once. The CIDR's arrival
		// queues the node again.
		s.nodeQ.AddAfter(name, wait)
		return nil
	}
	if node.fix == nil && node.condFix == 0 && now.Sub(node.readyHeartbeat) < s.cfg.StatusInterval {
		s.nodeQ.AddAfter(name, s.statusRecheck(node.readyHeartbeat.Add(s.cfg.StatusInterval).Sub(now)))
		return nil
	}
	if err := s.api.patchNodeStatus(ctx, name, s.statusPatch(node, now)); err != nil {
		return err
	}
	s.nodeQ.AddAfter(name, s.statusRecheck(s.cfg.StatusInterval))
	return nil
}

// cidrGrace is how long a new node's first status waits for its pod CIDR
// (a variable for tests).
var cidrGrace = 2 * time.Second

// statusPatch is a strategic merge patch of the node's status: every
// condition's heartbeat, whatever else is to fix, and a transition time
// only for a condition whose status changes (the patch keeps the others').
func (s *Simulator) statusPatch(v *nodeView, now time.Time) []byte {
	t := metav1.NewTime(now)
	status := map[string]any{}
	for k, x := range v.fix {
		status[k] = x
	}
	conds := make([]map[string]any, 0, len(kubeletConditions))
	for i, kc := range kubeletConditions {
		c := map[string]any{"type": kc.typ, "lastHeartbeatTime": t}
		if v.condFix&(1<<i) != 0 {
			c["status"], c["reason"], c["message"] = kc.status, kc.reason, kc.message
		}
		if v.condTransition&(1<<i) != 0 {
			c["lastTransitionTime"] = t
		}
		conds = append(conds, c)
	}
	status["conditions"] = conds
	patch, _ := json.Marshal(map[string]any{"status": status})
	return patch
}

// statusRecheck adds up to a tenth of the interval at random, so posts of
// nodes registered together drift apart.
func (s *Simulator) statusRecheck(d time.Duration) time.Duration {
	return max(d, 0) + rand.N(s.cfg.StatusInterval/10+1)
}

// nodeAddresses gives a node without an InternalIP the first address of
// its pod CIDR (as a bridge gateway would have) and a Hostname, so that
// `kubectl get nodes -o wide` and pods' hostIP have something to show. A
// node with an InternalIP keeps its addresses: nil means no change.
func nodeAddresses(n *corev1.Node) []corev1.NodeAddress {
	if internalIP(n) != "" {
		return nil
	}
	var out []corev1.NodeAddress
	if cidr, ok := podCIDR(n); ok {
		out = append(out, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: cidr.Addr().Next().String()})
	}
	host := n.Name
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeHostName {
			host = a.Address
		}
	}
	out = append(out, corev1.NodeAddress{Type: corev1.NodeHostName, Address: host})
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeHostName && a.Type != corev1.NodeInternalIP {
			out = append(out, a)
		}
	}
	return out
}

func internalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

// podCIDR is the node's first pod CIDR, if it has one that parses.
func podCIDR(n *corev1.Node) (netip.Prefix, bool) {
	s := n.Spec.PodCIDR
	if len(n.Spec.PodCIDRs) > 0 {
		s = n.Spec.PodCIDRs[0]
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, false
	}
	return p.Masked(), true
}
