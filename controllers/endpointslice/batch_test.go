package endpointslice

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/servicepods"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

// TestPodChangesBatched drives the handlers directly, on a fake clock: a
// pod change queues its Services only after EndpointUpdatesBatchPeriod,
// so that the changes of many pods share one sync, while a Service change
// queues at once. Only the Services that select the pod are queued.
func TestPodChangesBatched(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	c, err := New(Config{Client: &client.Clientset{}, Informers: client.NewInformers(&rest.Config{Host: "https://127.0.0.1:1"}),
		Clock: clk, EndpointUpdatesBatchPeriod: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.queue.ShutDown()
	for _, s := range []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db"}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "db"}}},
	} {
		if err := c.services.GetIndexer().Add(s); err != nil {
			t.Fatal(err)
		}
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", Labels: map[string]string{"app": "web"}}}
	servicepods.PodHandler(c.services.GetIndexer(), c.log, c.enqueueBatched).OnAdd(p, false)
	if n := c.queue.Len(); n != 0 {
		t.Fatalf("%d Services queued before the batch period", n)
	}
	// The queue's own goroutine sets its timer on the fake clock when it
	// gets to the pod's key, which may be after a step: step again until
	// the key is queued.
	clustertest.Eventually(t, 10*time.Second, func() error {
		clk.Step(time.Second)
		if n := c.queue.Len(); n != 1 {
			return fmt.Errorf("%d Services queued after the batch period, want 1", n)
		}
		return nil
	})
	key, _ := c.queue.Get()
	if key != "ns/web" {
		t.Errorf("queued %q, want ns/web", key)
	}
	c.queue.Done(key)
	c.enqueueService(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db"}})
	if n := c.queue.Len(); n != 1 {
		t.Errorf("a Service change queued %d, want 1 at once", n)
	}
}
