package client

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// TestIndexSlicesByService checks the index the service proxy and the
// cluster DNS share: asked for twice, it is added once, and it finds a
// Service's slices and none of another's.
func TestIndexSlicesByService(t *testing.T) {
	inf := cache.NewSharedIndexInformer(&cache.ListWatch{}, &discoveryv1.EndpointSlice{}, 0, cache.Indexers{})
	for range 2 {
		if err := IndexSlicesByService(inf); err != nil {
			t.Fatal(err)
		}
	}
	slice := func(ns, name, svc string) *discoveryv1.EndpointSlice {
		s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if svc != "" {
			s.Labels = map[string]string{discoveryv1.LabelServiceName: svc}
		}
		return s
	}
	for _, s := range []*discoveryv1.EndpointSlice{
		slice("a", "web-1", "web"), slice("a", "web-2", "web"), slice("a", "db-1", "db"),
		slice("b", "web-1", "web"), slice("a", "orphan", ""),
	} {
		if err := inf.GetIndexer().Add(s); err != nil {
			t.Fatal(err)
		}
	}
	got, err := inf.GetIndexer().IndexKeys(SliceServiceIndex, "a/web")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !(got[0] == "a/web-1" && got[1] == "a/web-2" || got[0] == "a/web-2" && got[1] == "a/web-1") {
		t.Errorf("slices of a/web: %v, want a/web-1 and a/web-2", got)
	}
	if keys, _ := SliceServiceKeys(slice("a", "orphan", "")); len(keys) != 0 {
		t.Errorf("a slice without a Service indexed under %v", keys)
	}
}

// TestIndexPodsByNode checks the index the node lifecycle controller and
// the node simulator share: asked for twice, it is added once; it finds
// a node's pods in every namespace, and a pod not bound yet is on none.
func TestIndexPodsByNode(t *testing.T) {
	inf := cache.NewSharedIndexInformer(&cache.ListWatch{}, &corev1.Pod{}, 0, cache.Indexers{})
	for range 2 {
		if err := IndexPodsByNode(inf); err != nil {
			t.Fatal(err)
		}
	}
	pod := func(ns, name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{NodeName: node}}
	}
	for _, p := range []*corev1.Pod{pod("a", "p1", "n1"), pod("b", "p2", "n1"), pod("a", "p3", "n2"), pod("a", "pending", "")} {
		if err := inf.GetIndexer().Add(p); err != nil {
			t.Fatal(err)
		}
	}
	got, err := inf.GetIndexer().IndexKeys(PodNodeIndex, "n1")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"a/p1", "b/p2"}) {
		t.Errorf("pods of n1: %v, want a/p1 and b/p2", got)
	}
	if keys, _ := PodNodeKeys(pod("a", "pending", "")); len(keys) != 0 {
		t.Errorf("a pod not bound indexed under %v", keys)
	}
}
