package apiserver

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"bonsai.dev/bonsai/apiserver/registry/core"
)

// Every namespace carries kubernetes.io/metadata.name=<name>, whatever a
// create, an update or a patch says, as kube-apiserver enforces.
func TestNamespaceNameLabel(t *testing.T) {
	e := newTestEnv(t)
	nss := e.cs.CoreV1().Namespaces()
	ns, err := nss.Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "labelled",
		Labels: map[string]string{core.NamespaceNameLabel: "other", "team": "a"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ns.Labels[core.NamespaceNameLabel] != "labelled" || ns.Labels["team"] != "a" {
		t.Errorf("labels after create: %v", ns.Labels)
	}
	ns.Labels = map[string]string{"team": "b"}
	if ns, err = nss.Update(e.ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if ns.Labels[core.NamespaceNameLabel] != "labelled" || ns.Labels["team"] != "b" {
		t.Errorf("labels after an update dropping the label: %v", ns.Labels)
	}
	if ns, err = nss.Patch(e.ctx, "labelled", types.MergePatchType, []byte(`{"metadata":{"labels":{"kubernetes.io/metadata.name":"x"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if ns.Labels[core.NamespaceNameLabel] != "labelled" {
		t.Errorf("labels after a patch changing the label: %v", ns.Labels)
	}
}
