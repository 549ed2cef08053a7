package clustertest

import (
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/typed/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/utils/ptr"
)

// CreateCRD creates a namespaced CustomResourceDefinition of group/v1
// whose objects take any fields, and waits until discovery lists its
// resource, as a controller that discovers resources would see it.
func (e *Env) CreateCRD(group, plural, kind string) schema.GroupVersionResource {
	e.T.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Kind: kind},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}}}},
		},
	}
	if _, err := crdclient.NewForConfigOrDie(e.Config).CustomResourceDefinitions().Create(e.Ctx, crd, metav1.CreateOptions{}); err != nil {
		e.T.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: group, Version: "v1", Resource: plural}
	disc := discovery.NewDiscoveryClientForConfigOrDie(e.Config)
	Eventually(e.T, 10*time.Second, func() error {
		l, err := disc.ServerResourcesForGroupVersion(gvr.GroupVersion().String())
		if err != nil {
			return err
		}
		for _, r := range l.APIResources {
			if r.Name == plural {
				return nil
			}
		}
		return fmt.Errorf("%s not in discovery", gvr)
	})
	return gvr
}
