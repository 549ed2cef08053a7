package apiserver

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestNoOpWritesKeepResourceVersion checks that writes changing nothing
// store nothing (the resourceVersion stays) and that writes changing
// something do: a pod's update, status write and patch, and an object
// stored as JSON by an older bonsai, whose stored bytes are not what the
// server would encode now.
func TestNoOpWritesKeepResourceVersion(t *testing.T) {
	e := newTestEnv(t)
	pods := e.cs.CoreV1().Pods("default")
	p, err := pods.Create(e.ctx, labelledPod("p"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rv := p.ResourceVersion
	same := func(what string, got *corev1.Pod, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got.ResourceVersion != rv {
			t.Errorf("%s changed nothing but moved the resourceVersion %s -> %s", what, rv, got.ResourceVersion)
		}
	}
	got, err := pods.Update(e.ctx, p, metav1.UpdateOptions{})
	same("an update", got, err)
	got, err = pods.UpdateStatus(e.ctx, p, metav1.UpdateOptions{})
	same("a status write", got, err)
	got, err = pods.Patch(e.ctx, "p", types.StrategicMergePatchType, []byte(`{"metadata":{"labels":{"app":"a"}}}`), metav1.PatchOptions{})
	same("a patch", got, err)
	p.Status.Phase = corev1.PodRunning
	if got, err = pods.UpdateStatus(e.ctx, p, metav1.UpdateOptions{}); err != nil || got.ResourceVersion == rv {
		t.Errorf("a status change kept the resourceVersion %s (%v)", rv, err)
	}

	// A ConfigMap stored as JSON, as bonsai once stored every object.
	res := e.s.reg.byGVR[gvr("", "v1", "configmaps")]
	js, err := json.Marshal(&corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "old", Namespace: "default", UID: "u-old"}, Data: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.Create(e.ctx, res.key("default", "old"), js); err != nil {
		t.Fatal(err)
	}
	cms := e.cs.CoreV1().ConfigMaps("default")
	c, err := cms.Get(e.ctx, "old", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c2, err := cms.Update(e.ctx, c, metav1.UpdateOptions{})
	if err != nil || c2.ResourceVersion != c.ResourceVersion {
		t.Errorf("a no-op update of a JSON-stored object moved the resourceVersion %s -> %s (%v)", c.ResourceVersion, c2.ResourceVersion, err)
	}
}
