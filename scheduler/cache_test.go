package scheduler

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

// TestSetPodCountsResizes checks that a bound pod's next versions are
// counted as they ask: a status write leaves the node's requested
// resources as they were, an in-place resize changes them, and a pod
// with init containers is recounted by Kubernetes' max rule.
func TestSetPodCountsResizes(t *testing.T) {
	c := newSchedCache()
	c.setNode(node("n1", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("4Gi")}))
	p := pod("p", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")})
	p.UID, p.Spec.NodeName = types.UID("u1"), "n1"
	requested := func() int64 {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.nodes["n1"].requested.milliCPU
	}
	c.setPod(p)
	if got := requested(); got != 500 {
		t.Fatalf("bound: %dm requested, want 500m", got)
	}
	running := p.DeepCopy()
	running.Status.Phase = corev1.PodRunning
	c.setPod(running)
	if got := requested(); got != 500 {
		t.Errorf("after a status write: %dm requested, want 500m", got)
	}
	resized := running.DeepCopy()
	resized.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("1500m")
	c.setPod(resized)
	if got := requested(); got != 1500 {
		t.Errorf("after a resize: %dm requested, want 1500m", got)
	}
	withInit := resized.DeepCopy()
	withInit.Spec.InitContainers = []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}}}}
	c.setPod(withInit)
	if got := requested(); got != 2000 {
		t.Errorf("with a 2-CPU init container: %dm requested, want 2000m", got)
	}
}

func TestSameRequests(t *testing.T) {
	base := pod("p", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")})
	for _, tc := range []struct {
		name string
		mod  func(*corev1.Pod)
		want bool
	}{
		{"status only", func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning }, true},
		{"same amount, other spelling", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("1000m")
		}, true},
		{"resized", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = resource.MustParse("2Gi")
		}, false},
		{"request dropped", func(p *corev1.Pod) { delete(p.Spec.Containers[0].Resources.Requests, corev1.ResourceCPU) }, false},
		{"host port", func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 8080}}
		}, false},
		{"overhead", func(p *corev1.Pod) {
			p.Spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")}
		}, false},
		{"init container", func(p *corev1.Pod) { p.Spec.InitContainers = []corev1.Container{{Name: "i"}} }, false},
		{"pod-level resources", func(p *corev1.Pod) { p.Spec.Resources = &corev1.ResourceRequirements{} }, false},
		{"second container", func(p *corev1.Pod) { p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "d"}) }, false},
	} {
		other := base.DeepCopy()
		tc.mod(other)
		if got := sameRequests(base, other); got != tc.want {
			t.Errorf("%s: sameRequests %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestAppContainerResourcesAgrees holds the shortcut for app-container
// pods to Kubernetes' helper: random requests of cpu (down to
// microcores, which round up only once summed), memory, storage and
// extended resources, some left out, some zero.
func TestAppContainerResourcesAgrees(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	names := []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage, "vendor.example/gpu", "hugepages-2Mi"}
	values := []string{"0", "1", "500u", "250m", "1500m", "2", "100Mi", "1Gi", "3", "0.5"}
	for i := 0; i < 2000; i++ {
		pod := &corev1.Pod{}
		for c := 0; c < 1+rng.IntN(3); c++ {
			reqs := corev1.ResourceList{}
			for _, n := range names {
				if rng.IntN(2) == 0 {
					reqs[n] = resource.MustParse(values[rng.IntN(len(values))])
				}
			}
			pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: fmt.Sprint(c), Resources: corev1.ResourceRequirements{Requests: reqs}})
		}
		got, ok := appContainerResources(pod)
		if !ok {
			t.Fatalf("pod %d: declined an app-container pod", i)
		}
		if want := helperPodResources(pod); !reflect.DeepEqual(got, want) {
			t.Fatalf("pod %d %v:\ngot  %+v\nwant %+v", i, pod.Spec.Containers, got, want)
		}
	}
	for _, edit := range []func(*corev1.PodSpec){
		func(s *corev1.PodSpec) { s.InitContainers = []corev1.Container{{Name: "i"}} },
		func(s *corev1.PodSpec) { s.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")} },
		func(s *corev1.PodSpec) { s.Resources = &corev1.ResourceRequirements{} },
	} {
		pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
		edit(&pod.Spec)
		if _, ok := appContainerResources(pod); ok {
			t.Errorf("took a pod it does not model: %+v", pod.Spec)
		}
	}
}
