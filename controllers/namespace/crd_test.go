package namespace

import (
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
)

// A deleted namespace is emptied of custom objects too: the controller
// finds CRD resources through discovery like built-in ones.
func TestNamespaceDeletionRemovesCustomObjects(t *testing.T) {
	e := start(t)
	widgets := dynamic.NewForConfigOrDie(e.Config).Resource(e.CreateCRD("example.com", "widgets", "Widget"))
	createNamespace(t, e, "doomed")
	createNamespace(t, e, "bystander")
	for _, ns := range []string{"doomed", "bystander"} {
		w := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": map[string]any{"name": "w"}}}
		if _, err := widgets.Namespace(ns).Create(e.Ctx, w, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Client.Core.Namespaces().Delete(e.Ctx, "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNamespaceGone(t, e, "doomed", 30*time.Second)
	if _, err := widgets.Namespace("doomed").Get(e.Ctx, "w", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("custom object of the deleted namespace: %v", err)
	}
	if _, err := widgets.Namespace("bystander").Get(e.Ctx, "w", metav1.GetOptions{}); err != nil {
		t.Errorf("custom object of another namespace: %v", err)
	}
}
