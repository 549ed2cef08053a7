package deployment

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"bonsai.dev/bonsai/kubelet/simulator"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

// A new Deployment gets one ReplicaSet named and labelled by its
// template's hash, with upstream's annotations, whose pods carry the hash;
// its status and conditions say the rollout is done.
func TestCreate(t *testing.T) {
	e := start(t, 2)
	d := newDeployment("web", 3)
	d.Annotations = map[string]string{"kubernetes.io/change-cause": "first", "kubectl.kubernetes.io/last-applied-configuration": "{}"}
	d = e.create(d)
	d = e.complete("web", 30*time.Second)
	rss := e.replicaSets(d)
	if len(rss) != 1 {
		t.Fatalf("%d ReplicaSets, want 1", len(rss))
	}
	rs := rss[0]
	hash := rs.Labels[appsv1.DefaultDeploymentUniqueLabelKey]
	if hash == "" || rs.Name != "web-"+hash || rs.Spec.Selector.MatchLabels[appsv1.DefaultDeploymentUniqueLabelKey] != hash ||
		rs.Spec.Template.Labels[appsv1.DefaultDeploymentUniqueLabelKey] != hash {
		t.Errorf("ReplicaSet %s labels %v selector %v template labels %v", rs.Name, rs.Labels, rs.Spec.Selector, rs.Spec.Template.Labels)
	}
	wantAnn := map[string]string{
		RevisionAnnotation: "1", DesiredReplicasAnnotation: "3", MaxReplicasAnnotation: "4", // 25% of 3, rounded up
		"kubernetes.io/change-cause": "first",
	}
	if diff := cmp.Diff(wantAnn, rs.Annotations); diff != "" {
		t.Errorf("ReplicaSet annotations (-want +got):\n%s", diff)
	}
	if ref := metav1.GetControllerOf(&rs); ref == nil || ref.Kind != "Deployment" || ref.UID != d.UID || ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
		t.Errorf("ReplicaSet controller %+v", ref)
	}
	if d.Annotations[RevisionAnnotation] != "1" {
		t.Errorf("Deployment annotations %v", d.Annotations)
	}
	pods, err := e.Client.Core.Pods(ns).List(e.Ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Labels[appsv1.DefaultDeploymentUniqueLabelKey] != hash {
			t.Errorf("pod %s labels %v", p.Name, p.Labels)
		}
	}
	st := d.Status
	st.Conditions = nil
	want := appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: 3, AvailableReplicas: 3, TerminatingReplicas: ptr[int32](0)}
	if diff := cmp.Diff(want, st); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	e.waitCondition("web", appsv1.DeploymentAvailable, corev1.ConditionTrue, reasonMinimumAvailable, 10*time.Second)
	e.waitCondition("web", appsv1.DeploymentProgressing, corev1.ConditionTrue, reasonNewRSAvailable, 10*time.Second)

	// kubectl scale, both ways.
	e.scale("web", 6)
	d = e.complete("web", 30*time.Second)
	if rss := e.replicaSets(d); len(rss) != 1 || *rss[0].Spec.Replicas != 6 || rss[0].Annotations[DesiredReplicasAnnotation] != "6" {
		t.Fatalf("after scale up: %d ReplicaSets, %v", len(rss), rss[0].Annotations)
	}
	e.scale("web", 1)
	d = e.complete("web", 30*time.Second)
	if rss := e.replicaSets(d); len(rss) != 1 || *rss[0].Spec.Replicas != 1 {
		t.Fatalf("after scale down: %d ReplicaSets", len(rss))
	}
}

// A RollingUpdate never runs more than replicas+maxSurge pods' worth of
// ReplicaSets nor fewer than replicas-maxUnavailable available pods, at
// any event of the rollout, and ends with the new ReplicaSet alone.
func TestRollingUpdateBounds(t *testing.T) {
	for _, tc := range []struct {
		name                string
		replicas            int32
		surge, unavailable  intstr.IntOrString
		wantMax, wantMinAva int
	}{
		{"surge 1 unavailable 1", 4, intstr.FromInt32(1), intstr.FromInt32(1), 5, 3},
		{"defaults 25%", 5, intstr.FromString("25%"), intstr.FromString("25%"), 7, 4}, // surge rounds up, unavailable down
		{"surge only", 3, intstr.FromInt32(1), intstr.FromInt32(0), 4, 3},
		{"unavailable only", 3, intstr.FromInt32(0), intstr.FromString("34%"), 3, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := start(t, 3)
			d := newDeployment("web", tc.replicas)
			d.Spec.Strategy = rolling(tc.surge, tc.unavailable)
			e.create(d)
			e.complete("web", 30*time.Second)
			armed := false
			w := e.watch("web", func(w *watcher) error {
				total := 0
				for _, rs := range w.rss {
					total += int(*rs.Spec.Replicas)
				}
				if total > tc.wantMax {
					return fmt.Errorf("ReplicaSets sum to %d replicas, over %d", total, tc.wantMax)
				}
				avail, _ := w.available()
				if avail >= int(tc.replicas) {
					armed = true // the informer's initial list is complete
				}
				if armed && avail < tc.wantMinAva {
					return fmt.Errorf("%d pods available, under %d", avail, tc.wantMinAva)
				}
				return nil
			})
			d = e.update("web", func(d *appsv1.Deployment) {
				// New pods take a while to be Ready, so the rollout
				// goes in steps.
				d.Spec.Template.Annotations = map[string]string{simulator.AnnotationReadyDelay: "150ms"}
				d.Spec.Template.Spec.Containers[0].Image = "busybox:2"
			})
			d = e.complete("web", 60*time.Second)
			if f := w.failures(); len(f) > 0 {
				t.Fatalf("bounds broken during the rollout:\n%s", strings.Join(f, "\n"))
			}
			rss := e.replicaSets(d)
			if len(rss) != 2 || *rss[0].Spec.Replicas != 0 || *rss[1].Spec.Replicas != tc.replicas || revision(&rss[1]) != 2 {
				t.Fatalf("ReplicaSets after the rollout: %s", describe(rss))
			}
			if d.Annotations[RevisionAnnotation] != "2" {
				t.Errorf("Deployment revision %q, want 2", d.Annotations[RevisionAnnotation])
			}
			e.waitCondition("web", appsv1.DeploymentProgressing, corev1.ConditionTrue, reasonNewRSAvailable, 10*time.Second)
		})
	}
}

func describe(rss []appsv1.ReplicaSet) string {
	var b strings.Builder
	for _, rs := range rss {
		fmt.Fprintf(&b, "%s rev %d replicas %d; ", rs.Name, revision(&rs), *rs.Spec.Replicas)
	}
	return b.String()
}

// Recreate: no new pod exists while an old one does (terminating ones
// included).
func TestRecreate(t *testing.T) {
	e := start(t, 2)
	d := newDeployment("web", 3)
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
	d = e.create(d)
	d = e.complete("web", 30*time.Second)
	oldHash := e.replicaSets(d)[0].Labels[appsv1.DefaultDeploymentUniqueLabelKey]
	w := e.watch("web", func(w *watcher) error {
		old, new := 0, 0
		for _, p := range w.pods {
			if p.Labels[appsv1.DefaultDeploymentUniqueLabelKey] == oldHash {
				old++
			} else {
				new++
			}
		}
		if old > 0 && new > 0 {
			return fmt.Errorf("%d old pods and %d new ones at once", old, new)
		}
		return nil
	})
	e.update("web", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "busybox:2" })
	d = e.complete("web", 60*time.Second)
	if f := w.failures(); len(f) > 0 {
		t.Fatalf("Recreate overlapped:\n%s", strings.Join(f, "\n"))
	}
	if rss := e.replicaSets(d); len(rss) != 2 || *rss[0].Spec.Replicas != 0 || *rss[1].Spec.Replicas != 3 {
		t.Fatalf("ReplicaSets: %s", describe(rss))
	}
}

// undo does what kubectl rollout undo does (client-side): copy an old
// ReplicaSet's template, less its hash label, and its annotations into
// the Deployment with a JSON patch.
func (e *env) undo(d *appsv1.Deployment, to *appsv1.ReplicaSet) {
	e.T.Helper()
	tmpl := to.Spec.Template.DeepCopy()
	delete(tmpl.Labels, appsv1.DefaultDeploymentUniqueLabelKey)
	ann := map[string]string{}
	for k, v := range d.Annotations {
		if skipCopy[k] {
			ann[k] = v
		}
	}
	for k, v := range to.Annotations {
		if !skipCopy[k] {
			ann[k] = v
		}
	}
	patch, _ := json.Marshal([]map[string]any{
		{"op": "replace", "path": "/spec/template", "value": tmpl},
		{"op": "replace", "path": "/metadata/annotations", "value": ann},
	})
	if _, err := e.Client.Apps.Deployments(ns).Patch(e.Ctx, d.Name, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		e.T.Fatal(err)
	}
}

// A rollback makes the old ReplicaSet of that template the new one again
// (no new ReplicaSet), with the next revision and the old one kept in
// revision-history; change-cause follows.
func TestRollbackReusesReplicaSet(t *testing.T) {
	e := start(t, 2)
	d := newDeployment("web", 2)
	d.Annotations = map[string]string{"kubernetes.io/change-cause": "v1"}
	e.create(d)
	d = e.complete("web", 30*time.Second)
	e.update("web", func(d *appsv1.Deployment) {
		d.Spec.Template.Spec.Containers[0].Image = "busybox:2"
		d.Annotations["kubernetes.io/change-cause"] = "v2"
	})
	d = e.complete("web", 30*time.Second)
	rss := e.replicaSets(d)
	if len(rss) != 2 {
		t.Fatalf("ReplicaSets: %s", describe(rss))
	}
	v1 := rss[0]
	e.undo(d, &v1)
	clustertest.Eventually(t, 30*time.Second, func() error {
		d = e.get("web")
		if err := rolloutDone(d); err != nil {
			return err
		}
		rss = e.replicaSets(d)
		if len(rss) != 2 {
			return fmt.Errorf("ReplicaSets: %s", describe(rss))
		}
		back := rss[1] // highest revision
		if back.UID != v1.UID || revision(&back) != 3 || back.Annotations[RevisionHistoryAnnotation] != "1" || *back.Spec.Replicas != 2 || *rss[0].Spec.Replicas != 0 {
			return fmt.Errorf("after undo: %s; history %q", describe(rss), back.Annotations[RevisionHistoryAnnotation])
		}
		if back.Annotations["kubernetes.io/change-cause"] != "v1" || d.Annotations[RevisionAnnotation] != "3" {
			return fmt.Errorf("change-cause %q, Deployment revision %q", back.Annotations["kubernetes.io/change-cause"], d.Annotations[RevisionAnnotation])
		}
		return nil
	})
}

// Old ReplicaSets beyond revisionHistoryLimit go, oldest first.
func TestRevisionHistoryLimit(t *testing.T) {
	e := start(t, 2)
	d := newDeployment("web", 1)
	d.Spec.RevisionHistoryLimit = ptr[int32](1)
	d = e.create(d)
	e.complete("web", 30*time.Second)
	for i := 2; i <= 4; i++ {
		e.update("web", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = fmt.Sprintf("busybox:%d", i) })
		e.complete("web", 30*time.Second)
	}
	clustertest.Eventually(t, 20*time.Second, func() error {
		rss := e.replicaSets(d)
		if len(rss) != 2 || revision(&rss[0]) != 3 || revision(&rss[1]) != 4 {
			return fmt.Errorf("ReplicaSets: %s", describe(rss))
		}
		return nil
	})
}

// A paused Deployment starts no rollout but still scales; the pause and
// the resume show in the Progressing condition; resumed, it rolls out.
func TestPauseResume(t *testing.T) {
	e := start(t, 2)
	reasons := e.progressReasons("web")
	d := e.create(newDeployment("web", 2))
	e.complete("web", 30*time.Second)
	e.update("web", func(d *appsv1.Deployment) { d.Spec.Paused = true })
	e.waitCondition("web", appsv1.DeploymentProgressing, corev1.ConditionUnknown, reasonPaused, 10*time.Second)
	e.update("web", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "busybox:2" })
	e.scale("web", 4)
	clustertest.Eventually(t, 30*time.Second, func() error {
		d = e.get("web")
		rss := e.replicaSets(d)
		if d.Status.ObservedGeneration != d.Generation {
			return fmt.Errorf("generation %d not observed", d.Generation)
		}
		if len(rss) != 1 || *rss[0].Spec.Replicas != 4 || d.Status.AvailableReplicas != 4 {
			return fmt.Errorf("paused: %s available %d", describe(rss), d.Status.AvailableReplicas)
		}
		return nil
	})
	if d.Status.UpdatedReplicas != 0 {
		t.Errorf("paused with a template change: %d updated replicas, want 0", d.Status.UpdatedReplicas)
	}
	e.update("web", func(d *appsv1.Deployment) { d.Spec.Paused = false })
	d = e.complete("web", 30*time.Second)
	if rss := e.replicaSets(d); len(rss) != 2 || *rss[1].Spec.Replicas != 4 || revision(&rss[1]) != 2 {
		t.Fatalf("resumed: %s", describe(rss))
	}
	e.waitCondition("web", appsv1.DeploymentProgressing, corev1.ConditionTrue, reasonNewRSAvailable, 10*time.Second)
	waitReasons(t, reasons, reasonNewReplicaSet, reasonNewRSAvailable, reasonPaused, reasonResumed, reasonNewReplicaSet, reasonNewRSAvailable)
}

// A rollout whose pods never become Ready is reported past its deadline:
// Progressing=False, ProgressDeadlineExceeded; the Deployment stays
// Available on its old pods.
func TestProgressDeadlineExceeded(t *testing.T) {
	e := start(t, 2)
	d := newDeployment("web", 2)
	d.Spec.ProgressDeadlineSeconds = ptr[int32](2)
	e.create(d)
	e.complete("web", 30*time.Second)
	e.update("web", func(d *appsv1.Deployment) {
		d.Spec.Template.Spec.Containers[0].Image = "busybox:2"
		neverReady(&d.Spec.Template)
	})
	d = e.waitCondition("web", appsv1.DeploymentProgressing, corev1.ConditionFalse, reasonTimedOut, 30*time.Second)
	if c := condition(d, appsv1.DeploymentProgressing); !strings.Contains(c.Message, "has timed out progressing") {
		t.Errorf("message %q", c.Message)
	}
	if c := condition(d, appsv1.DeploymentAvailable); c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("Available %+v", c)
	}
	if d.Status.UnavailableReplicas == 0 {
		t.Errorf("status %+v: want unavailable replicas", d.Status)
	}
}

// A Deployment short of minimum availability says so.
func TestMinimumReplicasUnavailable(t *testing.T) {
	e := start(t, 1)
	d := newDeployment("web", 2)
	neverReady(&d.Spec.Template)
	e.create(d)
	e.waitCondition("web", appsv1.DeploymentAvailable, corev1.ConditionFalse, reasonMinimumUnavailable, 20*time.Second)
	clustertest.Eventually(t, 20*time.Second, func() error {
		d = e.get("web")
		if st := d.Status; st.UnavailableReplicas != 2 || st.Replicas != 2 || st.ReadyReplicas != 0 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	e.waitCondition("web", appsv1.DeploymentProgressing, corev1.ConditionTrue, reasonReplicaSetUpdated, 20*time.Second)
}

// Scaling a Deployment mid-rollout shares the new replicas among its
// ReplicaSets in proportion to their sizes, as upstream: 10 replicas,
// maxSurge 3, maxUnavailable 2, a rollout stuck at old 8 / new 5; scaled
// to 20, max 23: old round(8*23/13)=14, new round(5*23/13)=9.
func TestProportionalScaling(t *testing.T) {
	e := start(t, 3)
	d := newDeployment("web", 10)
	d.Spec.Strategy = rolling(intstr.FromInt32(3), intstr.FromInt32(2))
	e.create(d)
	e.complete("web", 30*time.Second)
	e.update("web", func(d *appsv1.Deployment) {
		d.Spec.Template.Spec.Containers[0].Image = "busybox:2"
		neverReady(&d.Spec.Template)
	})
	sizes := func(want ...int32) func() error {
		return func() error {
			d = e.get("web")
			rss := e.replicaSets(d)
			if len(rss) != 2 || *rss[0].Spec.Replicas != want[0] || *rss[1].Spec.Replicas != want[1] || d.Status.ObservedGeneration != d.Generation {
				return fmt.Errorf("ReplicaSets: %s, want old %d new %d", describe(rss), want[0], want[1])
			}
			return nil
		}
	}
	clustertest.Eventually(t, 30*time.Second, sizes(8, 5))
	e.scale("web", 20)
	clustertest.Eventually(t, 30*time.Second, sizes(14, 9))
	for _, rs := range e.replicaSets(d) {
		if annotation(&rs, DesiredReplicasAnnotation) != 20 || annotation(&rs, MaxReplicasAnnotation) != 23 {
			t.Errorf("%s annotations %v", rs.Name, rs.Annotations)
		}
	}
	// And back down: 10 replicas, max 13: old round(14*13/23)=8,
	// new round(9*13/23)=5.
	e.scale("web", 10)
	clustertest.Eventually(t, 30*time.Second, sizes(8, 5))
}

// kubectl rollout restart is a template annotation change: a new
// ReplicaSet rolls out.
func TestRestart(t *testing.T) {
	e := start(t, 2)
	d := e.create(newDeployment("web", 2))
	e.complete("web", 30*time.Second)
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339))
	if _, err := e.Client.Apps.Deployments(ns).Patch(e.Ctx, "web", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	d = e.complete("web", 30*time.Second)
	if rss := e.replicaSets(d); len(rss) != 2 || *rss[1].Spec.Replicas != 2 || revision(&rss[1]) != 2 {
		t.Fatalf("after restart: %s", describe(rss))
	}
}

// A Deployment adopts an orphan ReplicaSet its selector matches and
// whose template is its own, instead of creating one.
func TestAdoptsReplicaSet(t *testing.T) {
	e := start(t, 1)
	d := newDeployment("web", 2)
	tmpl := d.Spec.Template.DeepCopy()
	tmpl.Labels = map[string]string{"app": "web", appsv1.DefaultDeploymentUniqueLabelKey: "abc"}
	orphan := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-abc", Namespace: ns, Labels: tmpl.Labels},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr[int32](2), Selector: &metav1.LabelSelector{MatchLabels: tmpl.Labels}, Template: *tmpl}}
	if _, err := e.Client.Apps.ReplicaSets(ns).Create(e.Ctx, orphan, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reasons := e.progressReasons("web")
	d = e.create(d)
	d = e.complete("web", 30*time.Second)
	rss := e.replicaSets(d)
	if len(rss) != 1 || rss[0].Name != "web-abc" {
		t.Fatalf("ReplicaSets: %s", describe(rss))
	}
	e.waitCondition("web", appsv1.DeploymentProgressing, corev1.ConditionTrue, reasonNewRSAvailable, 10*time.Second)
	waitReasons(t, reasons, reasonFoundNewRS, reasonNewRSAvailable)
}

// A ReplicaSet of another template in the new ReplicaSet's name is a
// hash collision: collisionCount goes up and the new ReplicaSet gets
// another name.
func TestHashCollision(t *testing.T) {
	e := start(t, 1)
	d := newDeployment("web", 1)
	d.Spec.Paused = true // no ReplicaSet yet: the test takes its name first
	d = e.create(d)
	taken := "web-" + templateHash(&d.Spec.Template, nil)
	other := map[string]string{"app": "other"}
	squatter := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: taken, Namespace: ns, Labels: other},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr[int32](0), Selector: &metav1.LabelSelector{MatchLabels: other},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: other},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "other"}}}}}}
	if _, err := e.Client.Apps.ReplicaSets(ns).Create(e.Ctx, squatter, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.update("web", func(d *appsv1.Deployment) { d.Spec.Paused = false })
	d = e.complete("web", 30*time.Second)
	rss := e.replicaSets(d)
	if d.Status.CollisionCount == nil || *d.Status.CollisionCount != 1 || len(rss) != 1 || rss[0].Name == taken {
		t.Fatalf("collisionCount %v, ReplicaSets %s", d.Status.CollisionCount, describe(rss))
	}
}

// minReadySeconds is not part of the template: a change reaches the
// current ReplicaSet without a new rollout.
func TestMinReadySecondsFollows(t *testing.T) {
	e := start(t, 1)
	d := e.create(newDeployment("web", 1))
	e.complete("web", 30*time.Second)
	e.update("web", func(d *appsv1.Deployment) { d.Spec.MinReadySeconds = 7 })
	clustertest.Eventually(t, 20*time.Second, func() error {
		rss := e.replicaSets(d)
		if len(rss) != 1 || rss[0].Spec.MinReadySeconds != 7 {
			return fmt.Errorf("ReplicaSets %s", describe(rss))
		}
		return nil
	})
}

// Creates refused by ResourceQuotas show in the Deployment's
// conditions: a ReplicaSet's ReplicaFailure is copied as the
// Deployment's, and a ReplicaSet it cannot create makes Progressing False,
// ReplicaSetCreateError; both clear once creates succeed.
func TestCreateFailures(t *testing.T) {
	e := start(t, 1)
	e.setQuota("pods", corev1.ResourcePods, 0, 0)
	e.create(newDeployment("web", 2))
	d := e.waitCondition("web", appsv1.DeploymentReplicaFailure, corev1.ConditionTrue, "FailedCreate", 20*time.Second)
	if c := condition(d, appsv1.DeploymentReplicaFailure); !strings.Contains(c.Message, "exceeded quota") {
		t.Errorf("ReplicaFailure message %q", c.Message)
	}
	e.setQuota("pods", corev1.ResourcePods, 100, 0)
	e.complete("web", 30*time.Second)
	clustertest.Eventually(t, 10*time.Second, func() error {
		if c := condition(e.get("web"), appsv1.DeploymentReplicaFailure); c != nil {
			return fmt.Errorf("ReplicaFailure still there: %+v", c)
		}
		return nil
	})

	// One ReplicaSet exists; the quota allows no other.
	e.setQuota("replicasets", "count/replicasets.apps", 1, 1)
	e.update("web", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "busybox:2" })
	d = e.waitCondition("web", appsv1.DeploymentProgressing, corev1.ConditionFalse, reasonFailedRSCreate, 20*time.Second)
	if c := condition(d, appsv1.DeploymentProgressing); !strings.Contains(c.Message, "Failed to create new replica set") || !strings.Contains(c.Message, "exceeded quota") {
		t.Errorf("Progressing message %q", c.Message)
	}
	e.setQuota("replicasets", "count/replicasets.apps", 5, 1)
	e.complete("web", 30*time.Second)
	e.waitCondition("web", appsv1.DeploymentProgressing, corev1.ConditionTrue, reasonNewRSAvailable, 20*time.Second)
}
