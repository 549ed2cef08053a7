package endpointslice

import (
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func rvSlice(name, rv string) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv}}
}

func TestTracker(t *testing.T) {
	const key = "ns/web"
	tr := NewTracker()
	if tr.Stale(key, nil) {
		t.Error("an untracked Service is stale")
	}
	tr.Wrote(key, rvSlice("a", "10"))
	tr.Deleted(key, "b")
	tests := []struct {
		name   string
		cached []*discoveryv1.EndpointSlice
		stale  bool
	}{
		{name: "written slice missing", cached: nil, stale: true},
		{name: "written slice older", cached: []*discoveryv1.EndpointSlice{rvSlice("a", "9")}, stale: true},
		{name: "deleted slice still there", cached: []*discoveryv1.EndpointSlice{rvSlice("a", "10"), rvSlice("b", "3")}, stale: true},
		{name: "caught up", cached: []*discoveryv1.EndpointSlice{rvSlice("a", "10")}},
		{name: "newer than written", cached: []*discoveryv1.EndpointSlice{rvSlice("a", "12"), rvSlice("c", "1")}},
	}
	for _, tc := range tests {
		if got := tr.Stale(key, tc.cached); got != tc.stale {
			t.Errorf("%s: stale %v, want %v", tc.name, got, tc.stale)
		}
	}
	if tr.ShouldSync(key, rvSlice("a", "10")) {
		t.Error("the controller's own write is news")
	}
	if !tr.ShouldSync(key, rvSlice("a", "11")) || !tr.ShouldSync(key, rvSlice("z", "1")) {
		t.Error("someone else's write is not news")
	}
	if !tr.HandleDeletion(key, "b") {
		t.Error("the controller's own deletion was unexpected")
	}
	if tr.HandleDeletion(key, "a") {
		t.Error("someone else's deletion was expected")
	}
	if tr.Stale(key, nil) {
		t.Error("stale after every tracked slice was handled")
	}
}
