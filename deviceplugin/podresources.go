package deviceplugin

import (
	"context"
	"sort"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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

// podResourcesLocked is one pod's containers and their devices, one
// ContainerDevices per device as the kubelet reports them (each carries
// its own topology). m.mu is held.
func (m *Manager) podResourcesLocked(a *podAllocation) *podresourcesapi.PodResources {
	pr := &podresourcesapi.PodResources{Name: a.Name, Namespace: a.Namespace}
	cnames := make([]string, 0, len(a.containers))
	for c := range a.containers {
		cnames = append(cnames, c)
	}
	sort.Strings(cnames)
	for _, c := range cnames {
		cr := &podresourcesapi.ContainerResources{Name: c}
		res := make([]string, 0, len(a.containers[c]))
		for r := range a.containers[c] {
			res = append(res, r)
		}
		sort.Strings(res)
		for _, r := range res {
			topo := m.topologyLocked(r)
			for _, id := range a.containers[c][r].DeviceIDs {
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
	for _, a := range m.allocs {
		out.PodResources = append(out.PodResources, m.podResourcesLocked(a))
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

// Get answers for one pod that holds devices here; any other pod is
// NotFound, since the device manager is all this node's pod-resources API
// knows of.
func (s *podResourcesServer) Get(ctx context.Context, req *podresourcesapi.GetPodResourcesRequest) (*podresourcesapi.GetPodResourcesResponse, error) {
	if req.PodName == "" || req.PodNamespace == "" {
		return nil, status.Error(codes.InvalidArgument, "pod_name and pod_namespace are required")
	}
	m := s.m
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, a := range m.allocs {
		if a.Name == req.PodName && a.Namespace == req.PodNamespace {
			return &podresourcesapi.GetPodResourcesResponse{PodResources: m.podResourcesLocked(a)}, nil
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
