package client

import (
	"testing"

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
