package scheduler

import (
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
