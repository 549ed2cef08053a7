package deviceplugin

import (
	"context"
	"sort"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// podResourcesServer is the pod-resources API v1: which devices each
// container holds, and which the node has, for monitoring agents such as
// GPU exporters. bonsai has no CPU or memory manager, so only devices are
// reported.
type podResourcesServer struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
	m *Manager
}

func registerPodResources(s *grpc.Server, m *Manager) {
	podresourcesapi.RegisterPodResourcesListerServer(s, &podResourcesServer{m: m})
}

// topology is the NUMA nodes of a resource's devices, by device ID, as
// the plugin reported them.
func (m *Manager) topologyLocked(res string) map[string]*pluginapi.TopologyInfo {
	out := map[string]*pluginapi.TopologyInfo{}
	if r := m.resources[res]; r != nil {
		for id, d := range r.devices {
			out[id] = d.Topology
		}
	}
	return out
}

func toPRTopology(t *pluginapi.TopologyInfo) *podresourcesapi.TopologyInfo {
	if t == nil {
		return nil
	}
	out := &podresourcesapi.TopologyInfo{}
	for _, n := range t.Nodes {
		out.Nodes = append(out.Nodes, &podresourcesapi.NUMANode{ID: n.ID})
	}
	return out
}

// ActivePod is a pod the node runs, as the pod-resources API lists it.
type ActivePod struct {
	UID             types.UID
	Namespace, Name string
	// Containers are the init containers' names, then the containers'.
	Containers []string
}

// SetActivePods gives the pod-resources API the node's pods, so that it
// lists every pod as the kubelet's does, devices or not; without it only
// pods holding devices are listed.
func (m *Manager) SetActivePods(f func() []ActivePod) {
	m.mu.Lock()
	m.activePods = f
	m.mu.Unlock()
}

// listed is what the pod-resources API reports on: the node's pods, or
// the pods holding devices when the kubelet gave no list. m.mu is held.
func (m *Manager) listedLocked() []ActivePod {
	if m.activePods != nil {
		m.mu.Unlock()
		pods := m.activePods()
		m.mu.Lock()
		return pods
	}
	var out []ActivePod
	for uid, a := range m.allocs {
		p := ActivePod{UID: uid, Namespace: a.Namespace, Name: a.Name}
		for c := range a.containers {
			p.Containers = append(p.Containers, c)
		}
		sort.Strings(p.Containers)
		out = append(out, p)
	}
	return out
}

// podResourcesLocked is one pod's containers and their devices, one
// ContainerDevices per device as the kubelet reports them (each carries
// its own topology). m.mu is held.
func (m *Manager) podResourcesLocked(p ActivePod) *podresourcesapi.PodResources {
	pr := &podresourcesapi.PodResources{Name: p.Name, Namespace: p.Namespace}
	var held map[string]map[string]*allocation
	if a := m.allocs[p.UID]; a != nil {
		held = a.containers
	}
	for _, c := range p.Containers {
		cr := &podresourcesapi.ContainerResources{Name: c}
		res := make([]string, 0, len(held[c]))
		for r := range held[c] {
			res = append(res, r)
		}
		sort.Strings(res)
		for _, r := range res {
			topo := m.topologyLocked(r)
			for _, id := range held[c][r].DeviceIDs {
				cr.Devices = append(cr.Devices, &podresourcesapi.ContainerDevices{ResourceName: r, DeviceIds: []string{id}, Topology: toPRTopology(topo[id])})
			}
		}
		pr.Containers = append(pr.Containers, cr)
	}
	return pr
}

func (s *podResourcesServer) List(ctx context.Context, _ *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	out := &podresourcesapi.ListPodResourcesResponse{}
	for _, p := range m.listedLocked() {
		out.PodResources = append(out.PodResources, m.podResourcesLocked(p))
	}
	sort.Slice(out.PodResources, func(i, j int) bool {
		a, b := out.PodResources[i], out.PodResources[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	return out, nil
}

// Get answers for one of the listed pods; any other is NotFound.
func (s *podResourcesServer) Get(ctx context.Context, req *podresourcesapi.GetPodResourcesRequest) (*podresourcesapi.GetPodResourcesResponse, error) {
	if req.PodName == "" || req.PodNamespace == "" {
		return nil, status.Error(codes.InvalidArgument, "pod_name and pod_namespace are required")
	}
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.listedLocked() {
		if p.Name == req.PodName && p.Namespace == req.PodNamespace {
			return &podresourcesapi.GetPodResourcesResponse{PodResources: m.podResourcesLocked(p)}, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "pod %s in namespace %s not found", req.PodName, req.PodNamespace)
}

// GetAllocatableResources lists the node's healthy devices.
func (s *podResourcesServer) GetAllocatableResources(ctx context.Context, _ *podresourcesapi.AllocatableResourcesRequest) (*podresourcesapi.AllocatableResourcesResponse, error) {
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	out := &podresourcesapi.AllocatableResourcesResponse{}
	names := make([]string, 0, len(m.resources))
	for n := range m.resources {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		r := m.resources[n]
		healthy := map[string]bool{}
		for id, d := range r.devices {
			if d.Health == pluginapi.Healthy {
				healthy[id] = true
			}
		}
		for _, id := range sortedIDs(healthy) {
			out.Devices = append(out.Devices, &podresourcesapi.ContainerDevices{ResourceName: n, DeviceIds: []string{id}, Topology: toPRTopology(r.devices[id].Topology)})
		}
	}
	return out, nil
}
