package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/testsupport/testenv"
)

// evictionBenchBudget is the node's memory above what bonsai's pod cgroup
// already holds (--node-memory-capacity): the default hard threshold
// memory.available<100Mi is met when the pods grow past 300Mi of it.
const evictionBenchBudget = 400 << 20

// evictionSuite measures node-pressure eviction on a real node: a
// best-effort pod grows its memory (8Mi every 0.2 s) past the hard
// threshold, and the time from the pods' working set crossing it (read
// from the pod cgroup every 20 ms) to the pod seen Failed/Evicted is
// recorded, a few times over.
func evictionSuite(ctx context.Context, b *bench) ([]Row, error) {
	rounds := 3
	if b.quick {
		rounds = 1
	}
	var lat []time.Duration
	rows := func() []Row {
		var p50, worst *float64
		if len(lat) > 0 {
			p50, worst = ms(percentile(lat, 0.5)), ms(percentile(lat, 1))
		}
		return []Row{
			{Name: fmt.Sprintf("eviction: memory threshold crossed to pod Failed/Evicted, p50 of %d", rounds), Unit: "ms", Bonsai: p50},
			{Name: fmt.Sprintf("eviction: memory threshold crossed to pod Failed/Evicted, worst of %d", rounds), Unit: "ms", Bonsai: worst, Target: atMost(10000, "ms")},
		}
	}
	if os.Geteuid() != 0 {
		return rows(), errors.New("the eviction suite needs root (network namespaces, containerd)")
	}
	base, err := testenv.PodsMemoryWorkingSet()
	if err != nil {
		return rows(), err
	}
	budget := base + evictionBenchBudget
	b.logf("eviction: starting bonsai with its own containerd, memory capacity %d MiB", budget>>20)
	// A short transition period: each round starts on a node without
	// pressure, as the first does.
	n, err := startRealNode(ctx, b, "eviction", "10.206.0.0/16", fmt.Sprintf("--node-memory-capacity=%d", budget), "--eviction-pressure-transition-period=1s")
	if err != nil {
		return rows(), err
	}
	defer n.close()
	for i := range rounds {
		d, err := evictOnce(ctx, n, budget, fmt.Sprintf("hog-%d", i))
		if err != nil {
			return rows(), err
		}
		b.logf("eviction: round %d: %v", i, d.Round(time.Millisecond))
		lat = append(lat, d)
		// The next round starts on a node without pressure (a BestEffort
		// pod is refused under MemoryPressure).
		if err := waitNoMemoryPressure(ctx, n, time.Minute); err != nil {
			return rows(), err
		}
	}
	return rows(), nil
}

func evictOnce(ctx context.Context, n *realNode, budget uint64, name string) (time.Duration, error) {
	pods := n.cs.CoreV1().Pods("default")
	_, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
		NodeName: n.name, RestartPolicy: corev1.RestartPolicyNever,
		Containers: []corev1.Container{{Name: "hog", Image: "bonsai.test/busybox:1", ImagePullPolicy: corev1.PullNever,
			Command: []string{"sh", "-c", testenv.MemoryHogScript(8, 800, 0.2)}}},
	}}, metav1.CreateOptions{})
	if err != nil {
		return 0, err
	}
	crossedAt, stop := testenv.WatchMemoryCrossing(budget, 100<<20)
	defer stop()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodFailed {
			if p.Status.Reason != "Evicted" {
				return 0, fmt.Errorf("pod %s failed with reason %q, not Evicted: %s", name, p.Status.Reason, p.Status.Message)
			}
			break
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("pod %s not evicted within 2m", name)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	at := time.Now()
	c := crossedAt()
	if c.IsZero() {
		return 0, fmt.Errorf("pod %s was evicted before the pods crossed the threshold by the bench's reading", name)
	}
	return at.Sub(c), nil
}

func waitNoMemoryPressure(ctx context.Context, n *realNode, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		node, err := n.cs.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
		if err == nil {
			pressed := false
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeMemoryPressure && c.Status == corev1.ConditionTrue {
					pressed = true
				}
			}
			if !pressed {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s still under MemoryPressure after %v", n.name, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
