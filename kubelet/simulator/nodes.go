package simulator

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// NodeName is the name of the i-th node of EnsureNodes.
func NodeName(i int) string { return fmt.Sprintf("sim-%d", i) }

// NewNode is a Node for the simulator to run, labelled as a kubelet labels
// its own plus type=simulated.
func NewNode(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        name,
		Annotations: map[string]string{AnnotationSimulated: "true"},
		Labels: map[string]string{
			corev1.LabelHostname:      name,
			corev1.LabelOSStable:      runtime.GOOS,
			corev1.LabelArchStable:    runtime.GOARCH,
			"beta.kubernetes.io/os":   runtime.GOOS,
			"beta.kubernetes.io/arch": runtime.GOARCH,
			"type":                    "simulated",
		},
	}}
}

// EnsureNodes creates the simulated nodes sim-0 ... sim-<n-1> that do not
// exist yet (a restart finds them all). Nodes that exist are left as they
// are, annotations included.
func EnsureNodes(ctx context.Context, cfg *rest.Config, n int, log *slog.Logger) error {
	if n <= 0 {
		return nil
	}
	api, err := newClient(cfg)
	if err != nil {
		return err
	}
	start := time.Now()
	list := &corev1.NodeList{}
	if err := api.core.Get().Resource("nodes").Do(ctx).Into(list); err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	exists := make(map[string]bool, len(list.Items))
	for _, node := range list.Items {
		exists[node.Name] = true
	}
	list = nil
	names := make(chan string)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		created  int
	)
	// Creates wait for the store's fsync; a few in flight share one.
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range names {
				err := api.core.Post().Resource("nodes").Body(NewNode(name)).Do(ctx).Error()
				mu.Lock()
				switch {
				case err == nil:
					created++
				case apierrors.IsAlreadyExists(err):
				case firstErr == nil:
					firstErr = fmt.Errorf("create simulated node %s: %w", name, err)
				}
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		if name := NodeName(i); !exists[name] {
			names <- name
		}
	}
	close(names)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	log.Info("simulated nodes", "count", n, "created", created, "took", time.Since(start).Round(time.Millisecond))
	return ctx.Err()
}
