package apiserver

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A ReplicationController is defaulted and validated as kube-apiserver's:
// replicas 1, selector and labels from the template's labels, generation
// counting spec changes (a selector change included, which is allowed),
// and upstream's field errors for a spec no controller could serve.
func TestReplicationControllerDefaultsAndValidation(t *testing.T) {
	e := newTestEnv(t)
	rcs := e.cs.CoreV1().ReplicationControllers("default")
	tmpl := appsTemplate("busybox")
	rc, err := rcs.Create(e.ctx, &corev1.ReplicationController{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ReplicationControllerSpec{Template: &tmpl}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rc.Spec.Replicas == nil || *rc.Spec.Replicas != 1 || rc.Generation != 1 {
		t.Errorf("replicas %v generation %d, want 1 and 1", rc.Spec.Replicas, rc.Generation)
	}
	if d := cmp.Diff(map[string]string{"app": "a"}, rc.Spec.Selector); d != "" {
		t.Errorf("selector (-want +got):\n%s", d)
	}
	if d := cmp.Diff(map[string]string{"app": "a"}, rc.Labels); d != "" {
		t.Errorf("labels (-want +got):\n%s", d)
	}
	rc.Spec.Template.Labels = map[string]string{"app": "a", "v": "2"}
	rc.Spec.Selector = map[string]string{"app": "a", "v": "2"}
	if rc, err = rcs.Update(e.ctx, rc, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("changing the selector: %v", err)
	}
	if rc.Generation != 2 {
		t.Errorf("generation %d after a spec change, want 2", rc.Generation)
	}

	never := appsTemplate("busybox")
	never.Spec.RestartPolicy = corev1.RestartPolicyNever
	unlabelled := appsTemplate("busybox")
	unlabelled.Labels = nil
	deadline := appsTemplate("busybox")
	deadline.Spec.ActiveDeadlineSeconds = ptrTo[int64](5)
	for _, tc := range []struct {
		name string
		spec corev1.ReplicationControllerSpec
		want string
	}{
		{"no template", corev1.ReplicationControllerSpec{Selector: map[string]string{"app": "a"}},
			"spec.template: Required value"},
		{"no selector nor template labels", corev1.ReplicationControllerSpec{Template: &unlabelled},
			"spec.selector: Required value"},
		{"selector not matching", corev1.ReplicationControllerSpec{Selector: map[string]string{"app": "b"}, Template: &tmpl},
			"spec.template.metadata.labels: Invalid value: {\"app\":\"a\"}: `selector` does not match template `labels`"},
		{"negative replicas", corev1.ReplicationControllerSpec{Replicas: ptrTo[int32](-1), Template: &tmpl},
			"spec.replicas: Invalid value: -1: must be greater than or equal to 0"},
		{"restartPolicy Never", corev1.ReplicationControllerSpec{Template: &never},
			`spec.template.spec.restartPolicy: Unsupported value: "Never": supported values: "Always"`},
		{"activeDeadlineSeconds", corev1.ReplicationControllerSpec{Template: &deadline},
			"spec.template.spec.activeDeadlineSeconds: Forbidden: activeDeadlineSeconds in ReplicationController is not Supported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rcs.Create(e.ctx, &corev1.ReplicationController{ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Spec: tc.spec}, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want Invalid with %q", err, tc.want)
			}
		})
	}
}
