package garbagecollector

import (
	"fmt"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/typed/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"bonsai.dev/bonsai/controllers/controllertest"
)

// Custom objects are owners and dependents like built-in ones: the
// collector finds their resource in discovery.
func TestCustomObjectsOwnAndAreOwned(t *testing.T) {
	e := &env{Env: controllertest.New(t, controllertest.Options{})}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Kind: "Widget"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}}}},
		},
	}
	if _, err := crdclient.NewForConfigOrDie(e.Config).CustomResourceDefinitions().Create(e.Ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	widgets := dynamic.NewForConfigOrDie(e.Config).Resource(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}).Namespace("default")
	widget := func(name string, owners []metav1.OwnerReference) *unstructured.Unstructured {
		w := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": map[string]any{"name": name}}}
		w.SetOwnerReferences(owners)
		var out *unstructured.Unstructured
		controllertest.Eventually(t, timeout, func() error {
			var err error
			out, err = widgets.Create(e.Ctx, w, metav1.CreateOptions{})
			return err
		})
		return out
	}
	// A ConfigMap owns a Widget. The collector starts once the resource
	// is served (the widget's create waits for that): one started earlier
	// finds it at its next rediscovery.
	owner := e.configMap("default", "owner", nil)
	widget("dependent", []metav1.OwnerReference{ownedBy(owner, "ConfigMap", false)})
	e.run()
	e.delete("default", "owner", metav1.DeletePropagationBackground)
	controllertest.Eventually(t, timeout, func() error {
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
