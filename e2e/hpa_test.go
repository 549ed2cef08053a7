package e2e

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/testsupport/testenv"
)

// A HorizontalPodAutoscaler made with kubectl autoscale (autoscaling/v1)
// scales a Deployment of real pods 1 → 3 while one pod burns CPU over
// its request, and back to 1 once the load stops and the scale-down
// stabilization window (30 s, patched in through autoscaling/v2) has
// passed; kubectl get hpa shows upstream's columns and the rescales are
// upstream's events.
func TestHorizontalPodAutoscaler(t *testing.T) {
	e := startPodEnv(t, "--metric-resolution=10s", "--horizontal-pod-autoscaler-sync-period=5s")
	kcs := testenv.Kubectls(t)
	k := &kubectlRunner{t: t, bin: kcs[len(kcs)-1].Path, kubeconfig: filepath.Join(e.s.dataDir, "kubeconfig.yaml"), cacheDir: t.TempDir()}
	ctx := t.Context()

	// Each pod burns CPU (up to its 200m limit, twice its request) while
	// /tmp/burn exists.
	labels := map[string]string{"app": "burner"}
	one := int32(1)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "burner"},
		Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: new(int64),
				Containers: []corev1.Container{{Name: "main", Image: podImage,
					Command: sh("while :; do if [ -e /tmp/burn ]; then :; else sleep 1; fi; done"),
					Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
						Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m")},
					}}},
			}}},
	}
	if _, err := e.cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	podsOf := func() []corev1.Pod {
		l, err := e.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=burner"})
		if err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	var first string
	waitFor(t, 60*time.Second, "the Deployment's pod running", func() bool {
		ps := podsOf()
		if len(ps) == 1 && running(&ps[0]) {
			first = ps[0].Name
			return true
		}
		return false
	})

	k.must("autoscale", "deployment", "burner", "--min=1", "--max=3", "--cpu-percent=50")
	k.must("patch", "hpa", "burner", "--type=merge", "-p", `{"spec":{"behavior":{"scaleDown":{"stabilizationWindowSeconds":30}}}}`)
	hpa, err := e.cs.AutoscalingV2().HorizontalPodAutoscalers("default").Get(ctx, "burner", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m := hpa.Spec.Metrics; len(m) != 1 || m[0].Resource == nil || *m[0].Resource.Target.AverageUtilization != 50 || *hpa.Spec.Behavior.ScaleDown.StabilizationWindowSeconds != 30 {
		t.Fatalf("kubectl autoscale's HPA read as v2: %+v", hpa.Spec)
	}

	start := time.Now()
	k.must("exec", first, "--", "touch", "/tmp/burn")
	deployReplicas := func() int32 {
		d, err := e.cs.AppsV1().Deployments("default").Get(ctx, "burner", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return *d.Spec.Replicas
	}
	waitFor(t, 90*time.Second, "the Deployment scaled to 3 under load", func() bool { return deployReplicas() == 3 })
	up := time.Since(start)
	waitFor(t, 60*time.Second, "the HPA's status after the scale up", func() bool {
		hpa, err = e.cs.AutoscalingV2().HorizontalPodAutoscalers("default").Get(ctx, "burner", metav1.GetOptions{})
		return err == nil && hpa.Status.CurrentReplicas == 3 && len(hpa.Status.CurrentMetrics) == 1
	})
	cur := hpa.Status.CurrentMetrics[0].Resource
	if cur == nil || cur.Name != corev1.ResourceCPU || cur.Current.AverageUtilization == nil || *cur.Current.AverageUtilization < 50 || hpa.Status.LastScaleTime == nil {
		t.Errorf("status under load: %+v", hpa.Status)
	}
	cond := map[autoscalingv2.HorizontalPodAutoscalerConditionType]autoscalingv2.HorizontalPodAutoscalerCondition{}
	for _, c := range hpa.Status.Conditions {
		cond[c.Type] = c
	}
	if cond["AbleToScale"].Status != "True" || cond["ScalingActive"].Reason != "ValidMetricFound" ||
		cond["ScalingActive"].Message != "the HPA was able to successfully calculate a replica count from cpu resource utilization (percentage of request)" {
		t.Errorf("conditions under load: %+v", hpa.Status.Conditions)
	}
	out := k.must("get", "hpa", "burner")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "NAME REFERENCE TARGETS MINPODS MAXPODS REPLICAS AGE" {
		t.Fatalf("kubectl get hpa:\n%s", out)
	}
	if f := strings.Fields(lines[1]); len(f) != 8 || f[0] != "burner" || f[1] != "Deployment/burner" || f[2] != "cpu:" || !strings.HasSuffix(f[3], "%/50%") || f[4] != "1" || f[5] != "3" || f[6] != "3" {
		t.Errorf("kubectl get hpa row: %q", lines[1])
	}

	desc := k.must("describe", "hpa", "burner")
	for _, w := range []string{"Reference:", "Deployment/burner", "Min replicas:", "Conditions:", "ValidMetricFound", "SuccessfulRescale"} {
		if !strings.Contains(desc, w) {
			t.Errorf("kubectl describe hpa lacks %q:\n%s", w, desc)
		}
	}
	if out := k.must("get", "all", "-o", "name"); !strings.Contains(out, "horizontalpodautoscaler.autoscaling/burner") {
		t.Errorf("kubectl get all lacks the HPA:\n%s", out)
	}
	// Through autoscaling/v1: the CPU target, the rest in annotations.
	var v1 struct {
		Metadata struct{ Annotations map[string]string }
		Spec     struct{ TargetCPUUtilizationPercentage int32 }
		Status   struct{ CurrentCPUUtilizationPercentage *int32 }
	}
	raw := k.must("get", "horizontalpodautoscalers.v1.autoscaling", "burner", "-o", "json")
	if err := json.Unmarshal([]byte(raw), &v1); err != nil {
		t.Fatal(err)
	}
	if v1.Spec.TargetCPUUtilizationPercentage != 50 || v1.Status.CurrentCPUUtilizationPercentage == nil ||
		!strings.Contains(v1.Metadata.Annotations["autoscaling.alpha.kubernetes.io/behavior"], `"stabilizationWindowSeconds":30`) ||
		!strings.Contains(v1.Metadata.Annotations["autoscaling.alpha.kubernetes.io/conditions"], "ScalingActive") {
		t.Errorf("the HPA through autoscaling/v1: %s", raw)
	}

	// The load stops: back to 1 after the 30 s window.
	k.must("exec", first, "--", "rm", "/tmp/burn")
	stop := time.Now()
	waitFor(t, 120*time.Second, "the Deployment scaled back to 1", func() bool { return deployReplicas() == 1 })
	down := time.Since(stop)
	if down < 30*time.Second {
		t.Errorf("scaled down %v after the load stopped: within the 30 s stabilization window", down)
	}
	t.Logf("1 → 3 in %v under load; 3 → 1 in %v after it stopped", up.Round(time.Second), down.Round(time.Second))

	var rescales []string
	evs, err := e.cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=burner,involvedObject.kind=HorizontalPodAutoscaler"})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs.Items {
		if ev.Reason == "SuccessfulRescale" && ev.Source.Component == "horizontal-pod-autoscaler" {
			rescales = append(rescales, ev.Message)
		}
	}
	want := []string{"New size: 3; reason: cpu resource utilization (percentage of request) above target", "New size: 1; reason: All metrics below target"}
	for _, w := range want {
		found := false
		for _, r := range rescales {
			found = found || r == w
		}
		if !found {
			b, _ := json.Marshal(rescales)
			t.Errorf("events lack %q: %s", w, b)
		}
	}
}
