package garbagecollector

import (
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"bonsai.dev/bonsai/testsupport/clustertest"
)

// Custom objects are owners and dependents like built-in ones: the
// collector finds their resource in discovery.
func TestCustomObjectsOwnAndAreOwned(t *testing.T) {
	e := &env{Env: clustertest.New(t, clustertest.Options{})}
	widgets := dynamic.NewForConfigOrDie(e.Config).Resource(e.CreateCRD("example.com", "widgets", "Widget")).Namespace("default")
	widget := func(name string, owners []metav1.OwnerReference) *unstructured.Unstructured {
		w := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": map[string]any{"name": name}}}
		w.SetOwnerReferences(owners)
		out, err := widgets.Create(e.Ctx, w, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	// The collector starts once the resource is served: one started
	// earlier finds it at its next rediscovery.
	e.run()

	// A ConfigMap owns a Widget.
	owner := e.configMap("default", "owner", nil)
	widget("dependent", []metav1.OwnerReference{ownedBy(owner, "ConfigMap", false)})
	e.delete("default", "owner", metav1.DeletePropagationBackground)
	clustertest.Eventually(t, timeout, func() error {
		if _, err := widgets.Get(e.Ctx, "dependent", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("widget still there (%v)", err)
		}
		return nil
	})

	// A Widget owns a ConfigMap.
	w := widget("parent", nil)
	e.configMap("default", "child", []metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "Widget", Name: w.GetName(), UID: w.GetUID()}})
	if err := widgets.Delete(e.Ctx, "parent", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitGone("default", "child")
}
