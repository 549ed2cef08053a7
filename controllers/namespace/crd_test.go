package namespace

import (
	"testing"
	"time"

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

// A deleted namespace is emptied of custom objects too: the controller
// finds CRD resources through discovery like built-in ones.
func TestNamespaceDeletionRemovesCustomObjects(t *testing.T) {
	e := start(t)
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
	widgets := dynamic.NewForConfigOrDie(e.Config).Resource(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"})
	createNamespace(t, e, "doomed")
	createNamespace(t, e, "bystander")
	for _, ns := range []string{"doomed", "bystander"} {
		w := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": map[string]any{"name": "w"}}}
		controllertest.Eventually(t, 5*time.Second, func() error {
			_, err := widgets.Namespace(ns).Create(e.Ctx, w, metav1.CreateOptions{})
			return err
		})
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
