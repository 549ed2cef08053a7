package apiserver

import (
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func testDeployment(name string) *appsv1.Deployment {
	l := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: l},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: l},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
			},
		},
	}
}

// Deployments and ReplicaSets are validated as kube-apiserver validates
// them: strategy, fenceposts, durations, restart policy.
func TestDeploymentValidation(t *testing.T) {
	e := newTestEnv(t)
	pct := func(s string) *intstr.IntOrString { v := intstr.FromString(s); return &v }
	num := func(n int32) *intstr.IntOrString { v := intstr.FromInt32(n); return &v }
	for _, tc := range []struct {
		name string
		mod  func(*appsv1.Deployment)
		want string // "" for valid
	}{
		{"defaults", func(*appsv1.Deployment) {}, ""},
		{"recreate", func(d *appsv1.Deployment) { d.Spec.Strategy.Type = appsv1.RecreateDeploymentStrategyType }, ""},
		{"recreate with rollingUpdate", func(d *appsv1.Deployment) {
			d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: num(1)}}
		}, "spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy `type` is 'Recreate'"},
		{"both zero", func(d *appsv1.Deployment) {
			d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxSurge: num(0), MaxUnavailable: pct("0%")}
		}, "may not be 0 when `maxSurge` is 0"},
		{"surge over 100% is fine", func(d *appsv1.Deployment) {
			d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxSurge: pct("200%")}
		}, ""},
		{"unavailable over 100%", func(d *appsv1.Deployment) {
			d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxUnavailable: pct("101%")}
		}, "must not be greater than 100%"},
		{"bad percent", func(d *appsv1.Deployment) {
			d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxSurge: pct("x")}
		}, "a valid percent string"},
		{"negative surge", func(d *appsv1.Deployment) {
			d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxSurge: num(-1)}
		}, "spec.strategy.rollingUpdate.maxSurge: Invalid value: -1"},
		{"unknown strategy", func(d *appsv1.Deployment) { d.Spec.Strategy.Type = "Canary" }, "spec.strategy.type: Unsupported value"},
		{"deadline not over minReadySeconds", func(d *appsv1.Deployment) {
			d.Spec.MinReadySeconds = 10
			d.Spec.ProgressDeadlineSeconds = ptrTo[int32](10)
		}, "must be greater than minReadySeconds"},
		{"negative history", func(d *appsv1.Deployment) { d.Spec.RevisionHistoryLimit = ptrTo[int32](-1) }, "spec.revisionHistoryLimit"},
		{"restartPolicy", func(d *appsv1.Deployment) { d.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever }, "spec.template.spec.restartPolicy: Unsupported value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := testDeployment(strings.ReplaceAll(strings.ReplaceAll(tc.name, " ", "-"), "%", ""))
			tc.mod(d)
			_, err := e.cs.AppsV1().Deployments("default").Create(e.ctx, d, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (!apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want Invalid with %q", err, tc.want)
			}
		})
	}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "rs"}, Spec: appsv1.ReplicaSetSpec{
		MinReadySeconds: -1, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"a": "b"}},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyOnFailure, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}}}
	_, err := e.cs.AppsV1().ReplicaSets("default").Create(e.ctx, rs, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.minReadySeconds") || !strings.Contains(err.Error(), "restartPolicy") {
		t.Fatalf("ReplicaSet: %v", err)
	}
}

// A Deployment's status write carries its annotations (the controller's
// revision) but not labels or spec, and bumps no generation; an
// annotation change through the main resource does bump it, as upstream.
func TestDeploymentStatusAnnotationsAndGeneration(t *testing.T) {
	e := newTestEnv(t)
	deps := e.cs.AppsV1().Deployments("default")
	d, err := deps.Create(e.ctx, testDeployment("web"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d.Annotations = map[string]string{"deployment.kubernetes.io/revision": "1"}
	d.Labels = map[string]string{"sneaky": "yes"}
	d.Status.ObservedGeneration = 1
	out, err := deps.UpdateStatus(e.ctx, d, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if out.Annotations["deployment.kubernetes.io/revision"] != "1" || out.Labels["sneaky"] != "" || out.Generation != 1 || out.Status.ObservedGeneration != 1 {
		t.Fatalf("after status write: annotations %v labels %v generation %d", out.Annotations, out.Labels, out.Generation)
	}
	out, err = deps.Patch(e.ctx, "web", types.MergePatchType, []byte(`{"metadata":{"annotations":{"kubernetes.io/change-cause":"x"}}}`), metav1.PatchOptions{})
	if err != nil || out.Generation != 2 {
		t.Fatalf("annotation patch: %v, generation %d", err, out.Generation)
	}
	out, err = deps.Patch(e.ctx, "web", types.MergePatchType, []byte(`{"metadata":{"labels":{"tier":"web"}}}`), metav1.PatchOptions{})
	if err != nil || out.Generation != 2 {
		t.Fatalf("label patch: %v, generation %d", err, out.Generation)
	}
	out, err = deps.Patch(e.ctx, "web", types.MergePatchType, []byte(`{"spec":{"paused":true},"metadata":{"annotations":{"a":"b"}}}`), metav1.PatchOptions{})
	if err != nil || out.Generation != 3 {
		t.Fatalf("spec and annotation patch: %v, generation %d", err, out.Generation)
	}
	// Scale bumps it too (a spec change), and reports the selector.
	sc, err := deps.GetScale(e.ctx, "web", metav1.GetOptions{})
	if err != nil || sc.Status.Selector != "app=web" {
		t.Fatalf("scale: %+v %v", sc, err)
	}
	sc.Spec.Replicas = 4
	if _, err := deps.UpdateScale(e.ctx, "web", sc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, _ = deps.Get(e.ctx, "web", metav1.GetOptions{}); out.Generation != 4 || *out.Spec.Replicas != 4 {
		t.Fatalf("after scale: generation %d replicas %d", out.Generation, *out.Spec.Replicas)
	}
}

// A scale write with no resourceVersion that races another writer (a
// controller's status updates) is retried on the object read afresh, with
// the same body: it succeeds or, when the other writer wins every retry,
// is a Conflict the client may retry, never a bad request.
func TestScaleRetriesConflicts(t *testing.T) {
	e := newTestEnv(t)
	deps := e.cs.AppsV1().Deployments("default")
	if _, err := deps.Create(e.ctx, testDeployment("web"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := int32(0); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			d, err := deps.Get(e.ctx, "web", metav1.GetOptions{})
			if err != nil {
				continue
			}
			d.Status.Replicas = i
			deps.UpdateStatus(e.ctx, d, metav1.UpdateOptions{})
			time.Sleep(time.Millisecond) // a busy controller, not a livelock
		}
	}()
	defer func() { close(stop); <-done }()
	for i := int32(1); i <= 100; i++ {
		patch := []byte(`{"spec":{"replicas":` + strconv.Itoa(int(i)) + `}}`)
		var sc autoscalingv1.Scale
		err := e.cs.AppsV1().RESTClient().Patch(types.MergePatchType).Namespace("default").Resource("deployments").
			Name("web").SubResource("scale").Body(patch).Do(e.ctx).Into(&sc)
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			t.Fatalf("scale patch %d: %v", i, err)
		}
		if sc.Spec.Replicas != i {
			t.Fatalf("scale patch %d: replicas %d", i, sc.Spec.Replicas)
		}
	}
}
