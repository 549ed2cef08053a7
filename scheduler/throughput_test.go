package scheduler

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"bonsai.dev/bonsai/kubelet/simulator"
)

// BenchmarkThroughput places pods created before the scheduler starts on
// nodes, against the real API server: b.N pods over 100 or 1,000 nodes.
func BenchmarkThroughput(b *testing.B) {
	for _, nodes := range []int{100, 1000} {
		for _, sim := range []bool{false, true} {
			for _, anti := range []bool{false, true} {
				b.Run(fmt.Sprintf("nodes=%d/simulated=%v/anti=%v", nodes, sim, anti), func(b *testing.B) { benchThroughput(b, nodes, sim, anti) })
			}
		}
	}
}

func benchThroughput(b *testing.B, nodes int, sim, anti bool) {
	a := newTestAPI(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if sim {
		s, err := simulator.New(simulator.Config{RESTConfig: a.cfg, Version: "bench", KubeletVersion: "v1.37.2"})
		if err != nil {
			b.Fatal(err)
		}
		go s.Run(ctx)
	}
	for i := range nodes {
		a.createNode(b, node(fmt.Sprintf("n%03d", i), corev1.ResourceList{corev1.ResourcePods: resource.MustParse("100000")}, func(n *corev1.Node) {
			n.Annotations = map[string]string{"bonsai.dev/simulated": fmt.Sprint(sim)}
			n.Spec.PodCIDR = fmt.Sprintf("10.%d.%d.0/24", 128+i/256, i%256)
			n.Spec.PodCIDRs = []string{n.Spec.PodCIDR}
		}))
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < b.N; i = int(next.Add(1)) - 1 {
				a.createPod(b, pod(fmt.Sprintf("p%06d", i), corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1m")}, func(p *corev1.Pod) {
					if !anti {
						return
					}
					// Groups of one pod per node.
					group := fmt.Sprint(i / nodes)
					p.Labels["group"] = group
					p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
						LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"group": group}}, TopologyKey: "kubernetes.io/hostname",
					}}}}
				}))
			}
		}()
	}
	wg.Wait()
	list, _ := a.cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
	w, err := a.cs.CoreV1().Pods("default").Watch(context.Background(), metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	b.ResetTimer()
	start := time.Now()
	a.startScheduler(b, Options{})
	bound := 0
	for ev := range w.ResultChan() {
		if ev.Type != watch.Modified {
			continue
		}
		if p := ev.Object.(*corev1.Pod); p.Spec.NodeName != "" {
			if bound++; bound == b.N {
				break
			}
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pods/s")
}
