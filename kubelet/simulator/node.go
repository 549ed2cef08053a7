package simulator

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// slimNode keeps what the simulator reads of a node. With 10,000 nodes
// the cache is most of the simulator's memory.
func slimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil // a tombstone
	}
	var ann map[string]string
	for k, v := range n.Annotations {
		if strings.HasPrefix(k, AnnotationSimulated) {
			if ann == nil {
				ann = map[string]string{}
			}
			ann[k] = v
		}
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, Annotations: ann},
		Spec:       corev1.NodeSpec{PodCIDR: n.Spec.PodCIDR, PodCIDRs: n.Spec.PodCIDRs},
		Status: corev1.NodeStatus{
			Capacity: n.Status.Capacity, Allocatable: n.Status.Allocatable,
			Conditions: n.Status.Conditions, Addresses: n.Status.Addresses, NodeInfo: n.Status.NodeInfo,
		},
	}, nil
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
	want, due := s.nodeStatus(node, now)
	if due {
		patch, err := json.Marshal(map[string]any{"status": want})
		if err != nil {
			return err
		}
		if err := s.api.patchNodeStatus(ctx, name, patch); err != nil {
			return err
		}
		s.nodeQ.AddAfter(name, s.statusRecheck(s.cfg.StatusInterval))
		return nil
	}
	s.nodeQ.AddAfter(name, s.statusRecheck(readyHeartbeat(node).Add(s.cfg.StatusInterval).Sub(now)))
	return nil
}

// statusRecheck adds up to a tenth of the interval at random, so posts of
// nodes registered together drift apart.
func (s *Simulator) statusRecheck(d time.Duration) time.Duration {
	return max(d, 0) + rand.N(s.cfg.StatusInterval/10+1)
}

func readyHeartbeat(n *corev1.Node) time.Time {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.LastHeartbeatTime.Time
		}
	}
	return time.Time{}
}

// nodeStatusPatch is the part of NodeStatus the simulator writes; the
// rest is left to whoever else writes it.
type nodeStatusPatch struct {
	Conditions  []corev1.NodeCondition `json:"conditions"`
	Capacity    corev1.ResourceList    `json:"capacity"`
	Allocatable corev1.ResourceList    `json:"allocatable"`
	Addresses   []corev1.NodeAddress   `json:"addresses,omitempty"`
	NodeInfo    corev1.NodeSystemInfo  `json:"nodeInfo"`
}

// nodeStatus is the status a kubelet would post for n now, and whether it
// is due: something differs, or the last heartbeat is StatusInterval old.
// Capacity and node info the node already has are kept (the server's own
// node reports the host's); what is missing comes from DefaultCapacity.
func (s *Simulator) nodeStatus(n *corev1.Node, now time.Time) (nodeStatusPatch, bool) {
	hb := metav1.NewTime(now)
	cond := func(t corev1.NodeConditionType, status corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		c := corev1.NodeCondition{Type: t, Status: status, Reason: reason, Message: msg, LastHeartbeatTime: hb, LastTransitionTime: hb}
		for _, old := range n.Status.Conditions {
			if old.Type == t && old.Status == status {
				c.LastTransitionTime = old.LastTransitionTime
			}
		}
		return c
	}
	want := nodeStatusPatch{
		Conditions: []corev1.NodeCondition{
			cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
			cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
			cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
			cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"),
		},
		Capacity:  fill(n.Status.Capacity, DefaultCapacity),
		Addresses: nodeAddresses(n),
		NodeInfo:  n.Status.NodeInfo,
	}
	want.Allocatable = fill(n.Status.Allocatable, want.Capacity)
	ni := &want.NodeInfo
	setIfEmpty(&ni.ContainerRuntimeVersion, "simulated://"+s.cfg.Version)
	setIfEmpty(&ni.KubeletVersion, s.cfg.KubeletVersion)
	setIfEmpty(&ni.OperatingSystem, runtime.GOOS)
	setIfEmpty(&ni.Architecture, runtime.GOARCH)
	setIfEmpty(&ni.OSImage, "bonsai simulated node")
	setIfEmpty(&ni.SystemUUID, string(n.UID))
	setIfEmpty(&ni.MachineID, strings.ReplaceAll(string(n.UID), "-", ""))

	due := now.Sub(readyHeartbeat(n)) >= s.cfg.StatusInterval ||
		!apiequality.Semantic.DeepEqual(want.Capacity, n.Status.Capacity) ||
		!apiequality.Semantic.DeepEqual(want.Allocatable, n.Status.Allocatable) ||
		want.NodeInfo != n.Status.NodeInfo
	if want.Addresses == nil {
		// Nothing to add; the patch leaves the node's own alone.
	} else if !apiequality.Semantic.DeepEqual(want.Addresses, n.Status.Addresses) {
		due = true
	}
	for _, c := range want.Conditions {
		found := false
		for _, old := range n.Status.Conditions {
			if old.Type == c.Type {
				found = true
				due = due || old.Status != c.Status || old.Reason != c.Reason || old.Message != c.Message
			}
		}
		due = due || !found
	}
	return want, due
}

// fill returns have with every resource of defaults it lacks.
func fill(have, defaults corev1.ResourceList) corev1.ResourceList {
	out := have.DeepCopy()
	if out == nil {
		out = corev1.ResourceList{}
	}
	for k, v := range defaults {
		if _, ok := out[k]; !ok {
			out[k] = v.DeepCopy()
		}
	}
	return out
}

func setIfEmpty(field *string, v string) {
	if *field == "" {
		*field = v
	}
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
