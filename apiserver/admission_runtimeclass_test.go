package apiserver

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The RuntimeClass admission plugin, as kube-apiserver's: a new pod gets
// its class's overhead and scheduling, and is refused for a missing
// class, a conflicting node selector or an overhead of its own.
func TestRuntimeClassAdmission(t *testing.T) {
	e := newTestEnv(t)
	overhead := corev1.ResourceList{corev1.ResourceCPU: apiresource.MustParse("10m"), corev1.ResourceMemory: apiresource.MustParse("1Mi")}
	toleration := corev1.Toleration{Key: "sandboxed", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	if _, err := e.cs.NodeV1().RuntimeClasses().Create(e.ctx, &nodev1.RuntimeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "sandboxed"}, Handler: "runc",
		Overhead:   &nodev1.Overhead{PodFixed: overhead},
		Scheduling: &nodev1.Scheduling{NodeSelector: map[string]string{"sandbox": "yes"}, Tolerations: []corev1.Toleration{toleration}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := func(name, class string, mod func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		if class != "" {
			p.Spec.RuntimeClassName = &class
		}
		if mod != nil {
			mod(p)
		}
		return p
	}
	pods := e.cs.CoreV1().Pods("default")
	got, err := pods.Create(e.ctx, pod("with-class", "sandboxed", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"disk": "ssd"} }), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !apiequality.Semantic.DeepEqual(got.Spec.Overhead, overhead) {
		t.Errorf("overhead %v, want the class's %v", got.Spec.Overhead, overhead)
	}
	if got.Spec.NodeSelector["sandbox"] != "yes" || got.Spec.NodeSelector["disk"] != "ssd" {
		t.Errorf("node selector %v: the class's not merged into the pod's", got.Spec.NodeSelector)
	}
	if !hasTol(got.Spec.Tolerations, toleration) {
		t.Errorf("tolerations %v lack the class's", got.Spec.Tolerations)
	}
	for _, tc := range []struct {
		pod  *corev1.Pod
		want string
	}{
		{pod("missing", "nope", nil), `pod rejected: RuntimeClass "nope" not found`},
		{pod("conflict", "sandboxed", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"sandbox": "no"} }),
			"conflict: runtimeClass.scheduling.nodeSelector[sandbox] = yes; pod.spec.nodeSelector[sandbox] = no"},
		{pod("other-overhead", "sandboxed", func(p *corev1.Pod) {
			p.Spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: apiresource.MustParse("1")}
		}), "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"},
		{pod("own-overhead", "", func(p *corev1.Pod) { p.Spec.Overhead = overhead }), "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"},
	} {
		_, err := pods.Create(e.ctx, tc.pod, metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want 403 with %q", tc.pod.Name, err, tc.want)
		}
		if _, err := pods.Get(e.ctx, tc.pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s: refused pod was stored (%v)", tc.pod.Name, err)
		}
	}
}

func hasTol(ts []corev1.Toleration, t corev1.Toleration) bool {
	for _, x := range ts {
		if apiequality.Semantic.DeepEqual(x, t) {
			return true
		}
	}
	return false
}
