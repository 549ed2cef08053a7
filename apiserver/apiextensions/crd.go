// Package apiextensions is kube-apiserver's apiextensions-apiserver in
// bonsai: CustomResourceDefinitions (their strategy, with upstream's
// validation), the controller that keeps their status (names,
// Established, the cleanup finalizer), and what serving one version of a
// CRD takes: the structural schema with its pruning, defaulting and
// validation (OpenAPI, CEL, list types), the storage encoding, webhook
// conversion, the scale paths, the server-side apply types and the
// additionalPrinterColumns table.
//
// The API server's generic handlers serve custom objects like any other
// kind; a Version is all they need beyond the table entry Resources
// describes. The package reaches the server only through Env (conversion
// webhooks) and Server (the controller), as apiextensions-apiserver sits
// behind kube-apiserver in a delegation chain: it never imports the
// server.
package apiextensions

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/scheme"

	"bonsai.dev/bonsai/apiserver/registry"
)

// CustomResourceDefinitions are served like any built-in kind; their
// strategy holds upstream's validation (names, structural schemas, CEL
// rules, conversion), taken from k8s.io/apiextensions-apiserver's own
// validation package, and bonsai's one extra rule: a built-in group
// cannot be claimed.

// GVR is the CustomResourceDefinitions' resource.
var GVR = registry.GVR("apiextensions.k8s.io", "v1", "customresourcedefinitions")

func init() {
	// The API server's codecs, protobuf included, read the global scheme.
	if err := apiextensionsv1.AddToScheme(scheme.Scheme); err != nil {
		panic(err)
	}
}

// crdScheme converts CRDs between v1 and the internal version upstream's
// validation and schema packages take.
var crdScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := apiextensions.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}()

func internalCRD(crd *apiextensionsv1.CustomResourceDefinition) (*apiextensions.CustomResourceDefinition, error) {
	out := &apiextensions.CustomResourceDefinition{}
	if err := crdScheme.Convert(crd, out, nil); err != nil {
		return nil, err
	}
	return out, nil
}

// CRDStrategy is the CustomResourceDefinition's strategy.
type CRDStrategy struct {
	// BuiltinGroup reports a group the API server serves itself, which no
	// CRD may claim.
	BuiltinGroup func(group string) bool
}

func (CRDStrategy) TracksGeneration() bool { return true }

func (CRDStrategy) PrepareForCreate(w *registry.WriteCtx, obj runtime.Object) error {
	crd := obj.(*apiextensionsv1.CustomResourceDefinition)
	scheme.Scheme.Default(crd)
	crd.Status = apiextensionsv1.CustomResourceDefinitionStatus{}
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			crd.Status.StoredVersions = []string{v.Name}
		}
	}
	return nil
}

func (CRDStrategy) PrepareForUpdate(w *registry.WriteCtx, obj, old runtime.Object) error {
	crd, oldCRD := obj.(*apiextensionsv1.CustomResourceDefinition), old.(*apiextensionsv1.CustomResourceDefinition)
	scheme.Scheme.Default(crd)
	crd.Status = oldCRD.Status
	// A new storage version joins storedVersions: objects are about to be
	// written in it.
	for _, v := range crd.Spec.Versions {
		if v.Storage && !slices.Contains(crd.Status.StoredVersions, v.Name) {
			crd.Status.StoredVersions = append(append([]string{}, crd.Status.StoredVersions...), v.Name)
		}
	}
	return nil
}

func (st CRDStrategy) Validate(w *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	crd := obj.(*apiextensionsv1.CustomResourceDefinition)
	in, err := internalCRD(crd)
	if err != nil {
		return field.ErrorList{field.InternalError(field.NewPath("spec"), err)}
	}
	errs := registry.WithoutMetadataErrors(crdvalidation.ValidateCustomResourceDefinition(context.Background(), in))
	if want := crd.Spec.Names.Plural + "." + crd.Spec.Group; crd.Name != want {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), crd.Name, `must be spec.names.plural+"."+spec.group`))
	}
	return append(errs, st.validateGroup(crd)...)
}

func (st CRDStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	crd := obj.(*apiextensionsv1.CustomResourceDefinition)
	in, err := internalCRD(crd)
	if err != nil {
		return field.ErrorList{field.InternalError(field.NewPath("spec"), err)}
	}
	oldIn, err := internalCRD(old.(*apiextensionsv1.CustomResourceDefinition))
	if err != nil {
		return field.ErrorList{field.InternalError(field.NewPath("spec"), err)}
	}
	errs := registry.WithoutMetadataErrors(crdvalidation.ValidateCustomResourceDefinitionUpdate(context.Background(), in, oldIn))
	return append(errs, st.validateGroup(crd)...)
}

// ValidateStatusUpdate checks a status write (conditions, accepted names,
// stored versions) with upstream's rules.
func (CRDStrategy) ValidateStatusUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	in, err := internalCRD(obj.(*apiextensionsv1.CustomResourceDefinition))
	if err != nil {
		return field.ErrorList{field.InternalError(field.NewPath("status"), err)}
	}
	oldIn, err := internalCRD(old.(*apiextensionsv1.CustomResourceDefinition))
	if err != nil {
		return field.ErrorList{field.InternalError(field.NewPath("status"), err)}
	}
	return registry.WithoutMetadataErrors(crdvalidation.ValidateUpdateCustomResourceDefinitionStatus(context.Background(), in, oldIn))
}

// BlocksDeletion: the first DELETE of a CRD only marks it, with the
// cleanup finalizer, so that its objects go before it does (upstream's
// CRD registry does the same).
func (CRDStrategy) BlocksDeletion(obj runtime.Object) bool {
	return obj.(*apiextensionsv1.CustomResourceDefinition).DeletionTimestamp == nil
}

func (CRDStrategy) MarkDeleting(obj runtime.Object) {
	crd := obj.(*apiextensionsv1.CustomResourceDefinition)
	if !apihelpers.CRDHasFinalizer(crd, apiextensionsv1.CustomResourceCleanupFinalizer) {
		crd.Finalizers = append(crd.Finalizers, apiextensionsv1.CustomResourceCleanupFinalizer)
	}
}

// validateGroup refuses groups the built-in table serves: a CRD may add
// a group, never take over one (the core group has no dot and fails
// upstream's own rule already).
func (st CRDStrategy) validateGroup(crd *apiextensionsv1.CustomResourceDefinition) field.ErrorList {
	if st.BuiltinGroup(crd.Spec.Group) && crd.Spec.Group != "" {
		return field.ErrorList{field.Forbidden(field.NewPath("spec", "group"), fmt.Sprintf("%q is served by the API server itself and cannot be claimed by a CustomResourceDefinition", crd.Spec.Group))}
	}
	return nil
}
