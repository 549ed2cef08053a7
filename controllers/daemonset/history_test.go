package daemonset

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"bonsai.dev/bonsai/controllers/history"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

// revisions is what kubectl rollout history daemonset lists: the
// ControllerRevisions the DaemonSet selects and controls, by number.
func revisions(t *testing.T, e *clustertest.Env, name string) []appsv1.ControllerRevision {
	t.Helper()
	ds, err := e.Client.Apps.DaemonSets("default").Get(e.Ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	list, err := e.Client.Apps.ControllerRevisions("default").List(e.Ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		t.Fatal(err)
	}
	var out []appsv1.ControllerRevision
	for _, r := range list.Items {
		if metav1.IsControlledBy(&r, ds) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b appsv1.ControllerRevision) int { return int(a.Revision - b.Revision) })
	return out
}

// undo does what kubectl rollout undo daemonset --to-revision does: it
// sends the revision's data to the DaemonSet as a strategic merge patch.
func undo(t *testing.T, e *clustertest.Env, name string, to int64) {
	t.Helper()
	for _, r := range revisions(t, e, name) {
		if r.Revision == to {
			if _, err := e.Client.Apps.DaemonSets("default").Patch(e.Ctx, name, types.StrategicMergePatchType, r.Data.Raw, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no revision %d of %s", to, name)
}

// waitRevisions waits until the DaemonSet's revisions are numbered want
// and returns them.
func waitRevisions(t *testing.T, e *clustertest.Env, name string, want ...int64) []appsv1.ControllerRevision {
	t.Helper()
	var revs []appsv1.ControllerRevision
	clustertest.Eventually(t, timeout, func() error {
		revs = revisions(t, e, name)
		var got []int64
		for _, r := range revs {
			got = append(got, r.Revision)
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("revisions %v, want %v", got, want)
		}
		return nil
	})
	return revs
}

// Each template is recorded as a numbered ControllerRevision named by its
// hash; undo brings an old one back as the newest number, and the pods
// with it; history beyond revisionHistoryLimit is dropped.
func TestHistoryAndRollback(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{Nodes: 2})
	start(t, e)
	create(t, e, newDS("agent", nil))
	waitPlaced(t, e, "agent", "sim-0", "sim-1")
	first := waitRevisions(t, e, "agent", 1)[0]
	modify(t, e, "agent", func(ds *appsv1.DaemonSet) { image(ds, "busybox:2") })
	waitImage(t, e, "agent", "busybox:2", "sim-0", "sim-1")
	revs := waitRevisions(t, e, "agent", 1, 2)
	for _, r := range revs {
		if h := r.Labels[history.HashLabel]; r.Name != "agent-"+h {
			t.Errorf("revision %d named %s, hash label %q", r.Revision, r.Name, h)
		}
		if !bytes.Contains(r.Data.Raw, []byte(`"$patch":"replace"`)) {
			t.Errorf("revision %d data %s: not a template replacement patch", r.Revision, r.Data.Raw)
		}
	}

	undo(t, e, "agent", 1)
	waitImage(t, e, "agent", "busybox:1", "sim-0", "sim-1")
	revs = waitRevisions(t, e, "agent", 2, 3)
	if revs[1].Name != first.Name {
		t.Errorf("rolled back to %s, want the first revision %s renumbered", revs[1].Name, first.Name)
	}
	for _, p := range pods(t, e, "agent") {
		if p.Labels[history.HashLabel] != first.Labels[history.HashLabel] {
			t.Errorf("pod %s hash %q, want %q", p.Name, p.Labels[history.HashLabel], first.Labels[history.HashLabel])
		}
	}

	modify(t, e, "agent", func(ds *appsv1.DaemonSet) {
		ds.Spec.RevisionHistoryLimit = ptr[int32](1)
		image(ds, "busybox:4")
	})
	waitImage(t, e, "agent", "busybox:4", "sim-0", "sim-1")
	waitRevisions(t, e, "agent", 3, 4)
}

// A revision name taken by another template (a hash collision) raises
// status.collisionCount, and the template is recorded under the next
// hash.
func TestHashCollision(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{Nodes: 1})
	start(t, e)
	create(t, e, newDS("agent", nil))
	waitPlaced(t, e, "agent", "sim-0")
	waitRevisions(t, e, "agent", 1)

	// The next template as the API server will store it, to take its name.
	next, err := e.Client.Apps.DaemonSets("default").Get(e.Ctx, "agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	image(next, "busybox:2")
	next, err = e.Client.Apps.DaemonSets("default").Update(e.Ctx, next, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatal(err)
	}
	taken := history.Name("agent", history.HashObject(&next.Spec.Template, nil))
	if _, err := e.Client.Apps.ControllerRevisions("default").Create(e.Ctx, &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{Name: taken, Labels: map[string]string{"app": "squatter"}},
		Data:       runtime.RawExtension{Raw: []byte(`{"spec":{}}`)},
		Revision:   1,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	modify(t, e, "agent", func(ds *appsv1.DaemonSet) { image(ds, "busybox:2") })
	waitImage(t, e, "agent", "busybox:2", "sim-0")
	revs := waitRevisions(t, e, "agent", 1, 2)
	one := int32(1)
	if want := history.Name("agent", history.HashObject(&next.Spec.Template, &one)); revs[1].Name != want {
		t.Errorf("revision 2 named %s, want %s", revs[1].Name, want)
	}
	ds, err := e.Client.Apps.DaemonSets("default").Get(e.Ctx, "agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ds.Status.CollisionCount == nil || *ds.Status.CollisionCount != 1 {
		t.Errorf("collisionCount %v, want 1", ds.Status.CollisionCount)
	}
}
