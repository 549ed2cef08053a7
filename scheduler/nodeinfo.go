package scheduler

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	"slices"
)

// podResources is what a pod asks of a node, computed once per pod with
// Kubernetes' rule (the larger of the init containers' peak and the sum of
// the app containers, plus sidecars and overhead).
type podResources struct {
	milliCPU, memory, ephemeral int64
	// scalar holds extended resources (vendor.example/gpu), hugepages and
	// every other name the node may advertise: integers, never overcommitted.
	scalar map[corev1.ResourceName]int64
	// nonZeroCPU and nonZeroMem count a container without requests as
	// 100m and 200 MiB, for scoring only, as kube-scheduler does: ten
	// request-less pods should not all land on one node.
	nonZeroCPU, nonZeroMem int64
	hostPorts              []hostPort
}

const (
	defaultMilliCPURequest int64 = 100
	defaultMemoryRequest   int64 = 200 << 20
)

var nonZeroDefaults = corev1.ResourceList{
	corev1.ResourceCPU:    *resource.NewMilliQuantity(defaultMilliCPURequest, resource.DecimalSI),
	corev1.ResourceMemory: *resource.NewQuantity(defaultMemoryRequest, resource.BinarySI),
}

func computePodResources(pod *corev1.Pod) *podResources {
	r, ok := appContainerResources(pod)
	if !ok {
		r = helperPodResources(pod)
	}
	r.hostPorts = podHostPorts(pod)
	return r
}

// helperPodResources is computePodResources' figures for any pod, by
// Kubernetes' own helper.
func helperPodResources(pod *corev1.Pod) *podResources {
	r := &podResources{}
	for name, q := range resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}) {
		switch name {
		case corev1.ResourceCPU:
			r.milliCPU = q.MilliValue()
		case corev1.ResourceMemory:
			r.memory = q.Value()
		case corev1.ResourceEphemeralStorage:
			r.ephemeral = q.Value()
		default:
			if q.IsZero() {
				continue
			}
			if r.scalar == nil {
				r.scalar = map[corev1.ResourceName]int64{}
			}
			r.scalar[name] = q.Value()
		}
	}
	nz := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{NonMissingContainerRequests: nonZeroDefaults})
	r.nonZeroCPU = nz.Cpu().MilliValue()
	r.nonZeroMem = nz.Memory().Value()
	return r
}

// appContainerResources is computePodResources' figures for the common
// pod, app containers only (no init containers, overhead or pod-level
// resources), whose requests are the sum of its containers': the same
// arithmetic as Kubernetes' helper (Quantities added, then rounded),
// without a map per container and per sum on every scheduling attempt.
// It says false for any other pod.
func appContainerResources(pod *corev1.Pod) (*podResources, bool) {
	s := &pod.Spec
	if len(s.InitContainers) > 0 || s.Overhead != nil || s.Resources != nil {
		return nil, false
	}
	var cpu, mem, eph, nzCPU, nzMem resource.Quantity
	var scalar map[corev1.ResourceName]*resource.Quantity
	for i := range s.Containers {
		reqs := s.Containers[i].Resources.Requests
		for name, q := range reqs {
			switch name {
			case corev1.ResourceCPU:
				cpu.Add(q)
			case corev1.ResourceMemory:
				mem.Add(q)
			case corev1.ResourceEphemeralStorage:
				eph.Add(q)
			default:
				if scalar == nil {
					scalar = map[corev1.ResourceName]*resource.Quantity{}
				}
				if sum := scalar[name]; sum != nil {
					sum.Add(q)
				} else {
					c := q.DeepCopy()
					scalar[name] = &c
				}
			}
		}
		// A request left out counts as the default for scoring; one set
		// to zero stays zero.
		if q, ok := reqs[corev1.ResourceCPU]; ok {
			nzCPU.Add(q)
		} else {
			nzCPU.Add(nonZeroDefaults[corev1.ResourceCPU])
		}
		if q, ok := reqs[corev1.ResourceMemory]; ok {
			nzMem.Add(q)
		} else {
			nzMem.Add(nonZeroDefaults[corev1.ResourceMemory])
		}
	}
	r := &podResources{milliCPU: cpu.MilliValue(), memory: mem.Value(), ephemeral: eph.Value(),
		nonZeroCPU: nzCPU.MilliValue(), nonZeroMem: nzMem.Value()}
	for name, q := range scalar {
		if q.IsZero() {
			continue
		}
		if r.scalar == nil {
			r.scalar = map[corev1.ResourceName]int64{}
		}
		r.scalar[name] = q.Value()
	}
	return r, true
}

// sameRequests says whether computePodResources would find the same for
// b as for a, for the common pod: app containers only, no overhead and no
// pod-level resources, with the same requests and ports (an in-place
// resize changes the requests). For any other pod it says false.
func sameRequests(a, b *corev1.Pod) bool {
	as, bs := &a.Spec, &b.Spec
	if len(as.InitContainers)+len(bs.InitContainers) > 0 || as.Overhead != nil || bs.Overhead != nil ||
		as.Resources != nil || bs.Resources != nil || len(as.Containers) != len(bs.Containers) {
		return false
	}
	for i := range as.Containers {
		ca, cb := &as.Containers[i], &bs.Containers[i]
		if !slices.Equal(ca.Ports, cb.Ports) || len(ca.Resources.Requests) != len(cb.Resources.Requests) {
			return false
		}
		for name, q := range ca.Resources.Requests {
			if qb, ok := cb.Resources.Requests[name]; !ok || q.Cmp(qb) != 0 {
				return false
			}
		}
	}
	return true
}

// hostPort is one port a pod takes on its node's addresses.
type hostPort struct {
	ip       string
	protocol corev1.Protocol
	port     int32
}

func podHostPorts(pod *corev1.Pod) []hostPort {
	var out []hostPort
	add := func(cs []corev1.Container) {
		for i := range cs {
			for _, p := range cs[i].Ports {
				if p.HostPort <= 0 {
					continue
				}
				hp := hostPort{ip: p.HostIP, protocol: p.Protocol, port: p.HostPort}
				if hp.ip == "" {
					hp.ip = "0.0.0.0"
				}
				if hp.protocol == "" {
					hp.protocol = corev1.ProtocolTCP
				}
				out = append(out, hp)
			}
		}
	}
	add(pod.Spec.InitContainers)
	add(pod.Spec.Containers)
	return out
}

// allocatable is what a node offers.
type allocatable struct {
	milliCPU, memory, ephemeral, pods int64
	scalar                            map[corev1.ResourceName]int64
}

func nodeAllocatable(n *corev1.Node) allocatable {
	a := allocatable{}
	for name, q := range n.Status.Allocatable {
		switch name {
		case corev1.ResourceCPU:
			a.milliCPU = q.MilliValue()
		case corev1.ResourceMemory:
			a.memory = q.Value()
		case corev1.ResourceEphemeralStorage:
			a.ephemeral = q.Value()
		case corev1.ResourcePods:
			a.pods = q.Value()
		default:
			if a.scalar == nil {
				a.scalar = map[corev1.ResourceName]int64{}
			}
			a.scalar[name] = q.Value()
		}
	}
	return a
}

// portKey is a protocol and port; the addresses using it are counted.
type portKey struct {
	protocol corev1.Protocol
	port     int32
}

// NodeInfo is a node and what the pods on it (bound or assumed) take.
type NodeInfo struct {
	Node  *corev1.Node
	alloc allocatable
	// unschedulable and taints are the Node's, kept here: the first
	// filters read them for every node in every cycle, and reaching into
	// a thousand Node objects for them was a cache miss per node.
	unschedulable bool
	taints        []corev1.Taint
	// requested sums the pods' requests; scalar entries are created as
	// pods bring them.
	requested  podResources
	pods       []*cachedPod
	usedPorts  map[portKey]map[string]int
	imageSizes map[string]int64
}

func newNodeInfo() *NodeInfo { return &NodeInfo{} }

func (ni *NodeInfo) setNode(n *corev1.Node) {
	ni.Node = n
	ni.alloc = nodeAllocatable(n)
	ni.unschedulable, ni.taints = n.Spec.Unschedulable, n.Spec.Taints
	ni.imageSizes = nil
	for _, img := range n.Status.Images {
		for _, name := range img.Names {
			if ni.imageSizes == nil {
				ni.imageSizes = make(map[string]int64, len(n.Status.Images))
			}
			ni.imageSizes[normalizeImage(name)] = img.SizeBytes
		}
	}
}

// Pods are the pods on the node, assumed ones included.
func (ni *NodeInfo) Pods() []*cachedPod { return ni.pods }

func (ni *NodeInfo) addPod(p *cachedPod) {
	ni.pods = append(ni.pods, p)
	ni.account(p.req, 1)
}

func (ni *NodeInfo) removePod(p *cachedPod) bool {
	for i, q := range ni.pods {
		if q == p {
			last := len(ni.pods) - 1
			ni.pods[i] = ni.pods[last]
			ni.pods[last] = nil
			ni.pods = ni.pods[:last]
			ni.account(p.req, -1)
			return true
		}
	}
	return false
}

func (ni *NodeInfo) account(r *podResources, sign int64) {
	q := &ni.requested
	q.milliCPU += sign * r.milliCPU
	q.memory += sign * r.memory
	q.ephemeral += sign * r.ephemeral
	q.nonZeroCPU += sign * r.nonZeroCPU
	q.nonZeroMem += sign * r.nonZeroMem
	for name, v := range r.scalar {
		if q.scalar == nil {
			q.scalar = map[corev1.ResourceName]int64{}
		}
		q.scalar[name] += sign * v
	}
	for _, hp := range r.hostPorts {
		k := portKey{hp.protocol, hp.port}
		if sign > 0 {
			if ni.usedPorts == nil {
				ni.usedPorts = map[portKey]map[string]int{}
			}
			m := ni.usedPorts[k]
			if m == nil {
				m = map[string]int{}
				ni.usedPorts[k] = m
			}
			m[hp.ip]++
			continue
		}
		if m := ni.usedPorts[k]; m != nil {
			if m[hp.ip]--; m[hp.ip] <= 0 {
				delete(m, hp.ip)
			}
			if len(m) == 0 {
				delete(ni.usedPorts, k)
			}
		}
	}
}

// portConflict is Kubernetes' rule: the same protocol and port conflict
// when either address is 0.0.0.0 or both are the same.
func (ni *NodeInfo) portConflict(hp hostPort) bool {
	m := ni.usedPorts[portKey{hp.protocol, hp.port}]
	if len(m) == 0 {
		return false
	}
	if hp.ip == "0.0.0.0" {
		return true
	}
	return m["0.0.0.0"] > 0 || m[hp.ip] > 0
}
