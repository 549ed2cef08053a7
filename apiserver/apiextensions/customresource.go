package apiextensions

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	celschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structurallisttype "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/kube-openapi/pkg/validation/spec"
	kjson "sigs.k8s.io/json"

	"bonsai.dev/bonsai/apiserver/encryption"
	"bonsai.dev/bonsai/apiserver/registry"
	"bonsai.dev/bonsai/store"
)

// Version is one served version of a CustomResourceDefinition:
// everything the generic handlers need beyond the table entry to serve
// its objects, which are unstructured and stored as JSON in the storage
// version.
type Version struct {
	crdName string
	// storage is the group version objects are stored in.
	storage schema.GroupVersion
	// terminating: the CRD is being deleted; no new objects.
	terminating bool

	structural *structuralschema.Structural
	validator  apiservervalidation.SchemaValidator
	// cel is nil when the schema has no x-kubernetes-validations.
	cel *celschema.Validator
	// openAPI is the schema as published in /openapi/v2 and v3.
	openAPI *spec.Schema

	status  bool
	scale   *apiextensionsv1.CustomResourceSubresourceScale
	printer registry.Printer
	// webhook converts between versions when the CRD asks for Webhook
	// conversion; nil is None conversion (apiVersion only).
	webhook *webhookConverter

	// gone is closed when the CRD changes what this version serves or
	// goes: its watches end, and clients re-watch what is served now.
	gone chan struct{}

	gvk    schema.GroupVersionKind
	tcOnce sync.Once
	tc     managedfields.TypeConverter
}

// newVersion builds a served version of crd.
func newVersion(env Env, crd *apiextensionsv1.CustomResourceDefinition, v *apiextensionsv1.CustomResourceDefinitionVersion) (*Version, error) {
	kind := crd.Spec.Names.Kind
	if crd.Status.AcceptedNames.Kind != "" {
		kind = crd.Status.AcceptedNames.Kind
	}
	cv := &Version{crdName: crd.Name, terminating: crd.DeletionTimestamp != nil, gone: make(chan struct{}),
		gvk: schema.GroupVersionKind{Group: crd.Spec.Group, Version: v.Name, Kind: kind}}
	for _, sv := range crd.Spec.Versions {
		if sv.Storage {
			cv.storage = schema.GroupVersion{Group: crd.Spec.Group, Version: sv.Name}
		}
	}
	if v.Schema != nil && v.Schema.OpenAPIV3Schema != nil {
		in := &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: v.Schema.OpenAPIV3Schema}
		internal, err := internalSchema(in)
		if err != nil {
			return nil, err
		}
		if cv.structural, err = structuralschema.NewStructural(internal); err != nil {
			return nil, fmt.Errorf("schema of %s %s is not structural: %w", crd.Name, v.Name, err)
		}
		if cv.validator, _, err = apiservervalidation.NewSchemaValidator(internal); err != nil {
			return nil, err
		}
		if hasValidations(cv.structural) {
			cv.cel = celschema.NewValidator(cv.structural, true, celconfig.PerCallLimit)
		}
		cv.openAPI = cv.structural.ToKubeOpenAPI()
	}
	if v.Subresources != nil {
		cv.status = v.Subresources.Status != nil
		cv.scale = v.Subresources.Scale
	}
	cv.printer = customPrinter(v.AdditionalPrinterColumns)
	var err error
	if cv.webhook, err = newWebhookConverter(env, crd); err != nil {
		return nil, err
	}
	return cv, nil
}

func internalSchema(in *apiextensionsv1.CustomResourceValidation) (*apiextensions.JSONSchemaProps, error) {
	out := &apiextensions.CustomResourceValidation{}
	if err := crdScheme.Convert(in, out, nil); err != nil {
		return nil, err
	}
	return out.OpenAPIV3Schema, nil
}

func hasValidations(s *structuralschema.Structural) bool {
	if s == nil {
		return false
	}
	if len(s.XValidations) > 0 {
		return true
	}
	for _, p := range s.Properties {
		if hasValidations(&p) {
			return true
		}
	}
	if s.Items != nil && hasValidations(s.Items) {
		return true
	}
	if s.AdditionalProperties != nil && hasValidations(s.AdditionalProperties.Structural) {
		return true
	}
	return false
}

// Resource is one served version of a CRD: its row of the API server's
// table of served kinds, and what serving its objects takes beyond that.
type Resource struct {
	Kind    registry.Kind
	Version *Version
}

// Resources builds the served versions of crd.
func Resources(env Env, crd *apiextensionsv1.CustomResourceDefinition) ([]Resource, error) {
	names := crd.Spec.Names
	if crd.Status.AcceptedNames.Kind != "" {
		// Discovery shows what the naming controller accepted; the
		// plural is the CRD's name and cannot conflict.
		plural := names.Plural
		names = crd.Status.AcceptedNames
		names.Plural = plural
	}
	var out []Resource
	for i := range crd.Spec.Versions {
		v := &crd.Spec.Versions[i]
		if !v.Served {
			continue
		}
		cv, err := newVersion(env, crd, v)
		if err != nil {
			return nil, err
		}
		k := registry.Kind{
			GVR: registry.GVR(crd.Spec.Group, v.Name, names.Plural), Kind: names.Kind, ListKind: names.ListKind, Singular: names.Singular,
			Namespaced: crd.Spec.Scope == apiextensionsv1.NamespaceScoped, ShortNames: names.ShortNames, Categories: names.Categories,
			Strategy: customStrategy{v: cv},
		}
		if k.Singular == "" {
			k.Singular = strings.ToLower(names.Kind)
		}
		if cv.status {
			k.Subresources = append(k.Subresources, "status")
		}
		if cv.scale != nil {
			k.Subresources = append(k.Subresources, "scale")
		}
		if len(v.SelectableFields) > 0 {
			k.Fields = map[string]func(runtime.Object) string{}
			for _, sf := range v.SelectableFields {
				path := strings.Split(strings.TrimPrefix(sf.JSONPath, "."), ".")
				k.Fields[strings.Join(path, ".")] = func(o runtime.Object) string {
					return selectableValue(o.(*unstructured.Unstructured), path)
				}
			}
		}
		out = append(out, Resource{Kind: k, Version: cv})
	}
	return out, nil
}

// Servable: upstream serves a CRD once its names are accepted (or it was
// established before a later names conflict).
func Servable(crd *apiextensionsv1.CustomResourceDefinition) bool {
	return apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.NamesAccepted) || apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.Established)
}

// ServingChanged: what upstream rebuilds a CRD's serving for (its spec,
// its accepted names), plus whether it is served and terminating.
func ServingChanged(a, b *apiextensionsv1.CustomResourceDefinition) bool {
	return !apiequality.Semantic.DeepEqual(a.Spec, b.Spec) ||
		!apiequality.Semantic.DeepEqual(a.Status.AcceptedNames, b.Status.AcceptedNames) ||
		Servable(a) != Servable(b) || (a.DeletionTimestamp == nil) != (b.DeletionTimestamp == nil)
}

// Terminating: the CRD is being deleted; no new objects.
func (cv *Version) Terminating() bool { return cv.terminating }

// Gone is closed when the CRD changes what this version serves or goes:
// its watches end, and clients re-watch what is served now.
func (cv *Version) Gone() <-chan struct{} { return cv.gone }

// Stop closes Gone; the server calls it once, when it stops serving the
// version as it is.
func (cv *Version) Stop() { close(cv.gone) }

// Structural is the version's structural schema; nil without a schema.
func (cv *Version) Structural() *structuralschema.Structural { return cv.structural }

// OpenAPI is the schema as published in /openapi/v2 and v3; nil without
// a schema.
func (cv *Version) OpenAPI() *spec.Schema { return cv.openAPI }

// Scale is the scale subresource's paths; nil without one.
func (cv *Version) Scale() *apiextensionsv1.CustomResourceSubresourceScale { return cv.scale }

// Printer gives the version's table columns.
func (cv *Version) Printer() *registry.Printer { return &cv.printer }

// Converts: reading objects stored in another version calls the CRD's
// conversion webhook, best once for many (Decode).
func (cv *Version) Converts() bool { return cv.webhook != nil }

// selectableValue is a selectable field's value as field selectors compare
// it: strings as they are, numbers and booleans in their JSON form.
func selectableValue(u *unstructured.Unstructured, path []string) string {
	v, ok, _ := unstructured.NestedFieldNoCopy(u.Object, path...)
	if !ok || v == nil {
		return ""
	}
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	case bool:
		return strconv.FormatBool(x)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}

// Decode decodes stored custom objects into this version (None
// conversion: only apiVersion changes; Webhook: the CRD's webhook, one
// call for those stored in another version), pruned and defaulted as
// upstream does on every read, so a default added to the CRD shows on old
// objects.
func (cv *Version) Decode(kvs []store.KeyValue) ([]runtime.Object, error) {
	want := cv.gvk.GroupVersion().String()
	us := make([]*unstructured.Unstructured, len(kvs))
	var convert []int
	for i, kv := range kvs {
		var m map[string]any
		if encryption.IsEncrypted(kv.Value) {
			return nil, encryption.Unreadable(kv.Key, kv.Value)
		}
		if err := kjson.UnmarshalCaseSensitivePreserveInts(kv.Value, &m); err != nil {
			return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		us[i] = &unstructured.Unstructured{Object: m}
		if cv.webhook != nil && us[i].GetAPIVersion() != want {
			convert = append(convert, i)
		}
	}
	if len(convert) > 0 {
		in := make([]*unstructured.Unstructured, len(convert))
		for j, i := range convert {
			in[j] = us[i]
		}
		out, err := cv.webhook.convertMany(in, want)
		if err != nil {
			return nil, err
		}
		for j, i := range convert {
			us[i] = out[j]
		}
	}
	objs := make([]runtime.Object, len(us))
	for i, u := range us {
		u.SetAPIVersion(want)
		if s := cv.structural; s != nil {
			structuralpruning.Prune(u.Object, s, true)
			structuraldefaulting.Default(u.Object, s)
		}
		u.SetResourceVersion(strconv.FormatUint(kvs[i].Revision, 10))
		objs[i] = u
	}
	return objs, nil
}

// Encode is the stored form of a custom object: its JSON in the storage
// version, without resourceVersion.
func (cv *Version) Encode(obj runtime.Object) ([]byte, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("%T is not a custom object", obj)
	}
	if wc := cv.webhook; wc != nil && u.GetAPIVersion() != cv.storage.String() {
		var err error
		if u, err = wc.convert(u, cv.storage.String()); err != nil {
			return nil, err
		}
	}
	out := make(map[string]any, len(u.Object))
	for k, v := range u.Object {
		out[k] = v
	}
	out["apiVersion"] = cv.storage.String()
	out["kind"] = cv.gvk.Kind
	if md, ok := u.Object["metadata"].(map[string]any); ok {
		m2 := make(map[string]any, len(md))
		for k, v := range md {
			if k != "resourceVersion" && k != "selfLink" {
				m2[k] = v
			}
		}
		out["metadata"] = m2
	}
	return json.Marshal(out)
}

// PruneUnknown drops the fields of a custom object its schema does not
// know, as upstream's decoder prunes every request, and reports them if
// track (fieldValidation Strict or Warn): the caller fails or warns.
// Metadata that is not ObjectMeta is a 400.
func (cv *Version) PruneUnknown(u *unstructured.Unstructured, track bool) ([]string, error) {
	s := cv.structural
	if s == nil {
		return nil, nil
	}
	if err := schemaobjectmeta.Coerce(nil, u.Object, s, true, false); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	pruned := structuralpruning.PruneWithOptions(u.Object, s, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: track})
	var msgs []string
	for _, p := range pruned {
		msgs = append(msgs, fmt.Sprintf("unknown field %q", p))
	}
	return msgs, nil
}

// customStrategy is the strategy of every custom resource: upstream's
// customResourceStrategy with the CRD's structural schema.
type customStrategy struct{ v *Version }

func (customStrategy) TracksGeneration() bool { return true }

func (st customStrategy) PrepareForCreate(w *registry.WriteCtx, obj runtime.Object) error {
	u := obj.(*unstructured.Unstructured)
	if st.v.status {
		delete(u.Object, "status")
	}
	st.v.normalize(u)
	return nil
}

func (st customStrategy) PrepareForUpdate(w *registry.WriteCtx, obj, old runtime.Object) error {
	u := obj.(*unstructured.Unstructured)
	if st.v.status {
		registry.CopyField(obj, old, "Status")
	}
	st.v.normalize(u)
	return nil
}

func (st customStrategy) PrepareForStatusUpdate(w *registry.WriteCtx, obj, old runtime.Object) error {
	st.v.normalize(obj.(*unstructured.Unstructured))
	return nil
}

// normalize prunes what the schema does not know and applies its
// defaults: after mutating admission and apply, as upstream does again
// before validation.
func (cv *Version) normalize(u *unstructured.Unstructured) {
	if s := cv.structural; s != nil {
		structuralpruning.Prune(u.Object, s, true)
		structuraldefaulting.Default(u.Object, s)
	}
}

func (st customStrategy) Validate(w *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	return st.v.validate(obj.(*unstructured.Unstructured), nil)
}

func (st customStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	return st.v.validate(obj.(*unstructured.Unstructured), old.(*unstructured.Unstructured))
}

func (st customStrategy) ValidateStatusUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	return st.v.validate(obj.(*unstructured.Unstructured), old.(*unstructured.Unstructured))
}

// validate checks a custom object against its version's schema:
// OpenAPI validation, embedded objects' metadata, list types and map
// keys, then the CEL rules (with oldSelf on updates), and the scale
// subresource's replicas.
func (cv *Version) validate(u, old *unstructured.Unstructured) field.ErrorList {
	var errs field.ErrorList
	if cv.validator != nil {
		if old == nil {
			errs = append(errs, apiservervalidation.ValidateCustomResource(nil, u.UnstructuredContent(), cv.validator)...)
		} else {
			errs = append(errs, apiservervalidation.ValidateCustomResourceUpdate(nil, u.UnstructuredContent(), old.UnstructuredContent(), cv.validator)...)
		}
	}
	if s := cv.structural; s != nil {
		errs = append(errs, schemaobjectmeta.Validate(context.Background(), nil, u.Object, s, true)...)
		errs = append(errs, structurallisttype.ValidateListSetsAndMaps(nil, s, u.Object)...)
	}
	if cv.cel != nil {
		var oldObj any
		if old != nil {
			oldObj = old.Object
		}
		celErrs, _ := cv.cel.Validate(context.Background(), nil, cv.structural, u.Object, oldObj, celconfig.RuntimeCELCostBudget)
		errs = append(errs, celErrs...)
	}
	if sc := cv.scale; sc != nil {
		errs = append(errs, validateScalePaths(u, sc)...)
	}
	return errs
}

// validateScalePaths checks the replicas the scale subresource reads, as
// upstream's custom resource validator does.
func validateScalePaths(u *unstructured.Unstructured, sc *apiextensionsv1.CustomResourceSubresourceScale) field.ErrorList {
	var errs field.ErrorList
	check := func(jsonPath string) {
		path := strings.Split(strings.TrimPrefix(jsonPath, "."), ".")
		v, found, err := unstructured.NestedFieldNoCopy(u.Object, path...)
		if err != nil || !found {
			return
		}
		fp := field.NewPath(path[0], path[1:]...)
		n, ok := v.(int64)
		if !ok {
			errs = append(errs, field.Invalid(fp, v, "should be an integer"))
			return
		}
		if n < 0 {
			errs = append(errs, field.Invalid(fp, n, "should be a non-negative integer"))
		} else if n > 1<<31-1 {
			errs = append(errs, field.Invalid(fp, n, "should be less than or equal to 2147483647"))
		}
	}
	check(sc.SpecReplicasPath)
	check(sc.StatusReplicasPath)
	return errs
}

// SpecChanged: a custom object's generation counts every change outside
// metadata (status is the stored one already when the status subresource
// is on).
func SpecChanged(obj, old *unstructured.Unstructured) bool {
	a, b := withoutMetadata(obj.Object), withoutMetadata(old.Object)
	return !apiequality.Semantic.DeepEqual(a, b)
}

func withoutMetadata(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if k != "metadata" && k != "apiVersion" && k != "kind" {
			out[k] = v
		}
	}
	return out
}

// ScaleOf reads the Scale of a custom object through its CRD's paths.
func ScaleOf(u *unstructured.Unstructured, sc *apiextensionsv1.CustomResourceSubresourceScale) (spec, status int32, selector string) {
	get := func(jsonPath string) any {
		if jsonPath == "" {
			return nil
		}
		v, _, _ := unstructured.NestedFieldNoCopy(u.Object, strings.Split(strings.TrimPrefix(jsonPath, "."), ".")...)
		return v
	}
	if n, ok := get(sc.SpecReplicasPath).(int64); ok {
		spec = int32(n)
	}
	if n, ok := get(sc.StatusReplicasPath).(int64); ok {
		status = int32(n)
	}
	if sc.LabelSelectorPath != nil {
		selector, _ = get(*sc.LabelSelectorPath).(string)
	}
	return spec, status, selector
}

// SetSpecReplicas sets the replicas the Scale's spec shows.
func SetSpecReplicas(u *unstructured.Unstructured, sc *apiextensionsv1.CustomResourceSubresourceScale, n int32) error {
	return unstructured.SetNestedField(u.Object, int64(n), strings.Split(strings.TrimPrefix(sc.SpecReplicasPath, "."), ".")...)
}

// Objects is the converter, creater and defaulter the field manager
// needs for one custom resource version: conversion between versions is
// None (apiVersion only), as for every CRD bonsai serves.
type Objects struct{ v *Version }

// Objects is the version's converter, creater and defaulter.
func (cv *Version) Objects() Objects { return Objects{cv} }

func (c Objects) Convert(in, out, context any) error {
	return fmt.Errorf("custom objects are converted with ConvertToVersion only")
}

func (c Objects) ConvertToVersion(in runtime.Object, gv runtime.GroupVersioner) (runtime.Object, error) {
	u, ok := in.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("%T is not a custom object", in)
	}
	out := u.DeepCopy()
	if gvk, ok := gv.KindForGroupVersionKinds([]schema.GroupVersionKind{u.GroupVersionKind()}); ok {
		out.SetGroupVersionKind(gvk)
	}
	return out, nil
}

func (c Objects) ConvertFieldLabel(gvk schema.GroupVersionKind, label, value string) (string, string, error) {
	return label, value, nil
}

func (c Objects) New(gvk schema.GroupVersionKind) (runtime.Object, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

func (c Objects) Default(obj runtime.Object) {
	if u, ok := obj.(*unstructured.Unstructured); ok && c.v.structural != nil {
		structuraldefaulting.Default(u.Object, c.v.structural)
	}
}

// TypeConverter is server-side apply's view of the version's schema, so
// list types and map keys merge as declared; metadata is left to the
// field manager's own handling. Without a schema, types are deduced.
func (cv *Version) TypeConverter() managedfields.TypeConverter {
	cv.tcOnce.Do(func() {
		cv.tc = managedfields.NewDeducedTypeConverter()
		if cv.openAPI == nil {
			return
		}
		s := *cv.openAPI
		props := map[string]spec.Schema{}
		for k, v := range s.Properties {
			props[k] = v
		}
		props["metadata"] = objectMetaApplySchema()
		props["apiVersion"] = spec.Schema{SchemaProps: spec.SchemaProps{Type: spec.StringOrArray{"string"}}}
		props["kind"] = spec.Schema{SchemaProps: spec.SchemaProps{Type: spec.StringOrArray{"string"}}}
		s.Properties = props
		s.Extensions = spec.Extensions{}
		for k, v := range cv.openAPI.Extensions {
			s.Extensions[k] = v
		}
		s.AddExtension("x-kubernetes-group-version-kind", []any{map[string]any{"group": cv.gvk.Group, "version": cv.gvk.Version, "kind": cv.gvk.Kind}})
		tc, err := managedfields.NewTypeConverter(map[string]*spec.Schema{"custom": &s}, cv.structural.XPreserveUnknownFields)
		if err == nil {
			cv.tc = tc
		}
	})
	return cv.tc
}

// objectMetaApplySchema is ObjectMeta as server-side apply merges it for
// built-in kinds: labels and annotations key by key, finalizers as a set,
// ownerReferences by uid; the other fields are scalars. Without it a
// custom object's finalizers were one atomic list, so two managers'
// finalizers replaced each other.
func objectMetaApplySchema() spec.Schema {
	str := spec.Schema{SchemaProps: spec.SchemaProps{Type: spec.StringOrArray{"string"}}}
	strMap := spec.Schema{SchemaProps: spec.SchemaProps{Type: spec.StringOrArray{"object"}, AdditionalProperties: &spec.SchemaOrBool{Allows: true, Schema: &str}}}
	finalizers := spec.Schema{SchemaProps: spec.SchemaProps{Type: spec.StringOrArray{"array"}, Items: &spec.SchemaOrArray{Schema: &str}}}
	finalizers.AddExtension("x-kubernetes-list-type", "set")
	boolean := spec.Schema{SchemaProps: spec.SchemaProps{Type: spec.StringOrArray{"boolean"}}}
	ref := spec.Schema{SchemaProps: spec.SchemaProps{Type: spec.StringOrArray{"object"}, Required: []string{"uid"}, Properties: map[string]spec.Schema{
		"apiVersion": str, "kind": str, "name": str, "uid": str, "controller": boolean, "blockOwnerDeletion": boolean,
	}}}
	ref.AddExtension("x-kubernetes-map-type", "atomic")
	owners := spec.Schema{SchemaProps: spec.SchemaProps{Type: spec.StringOrArray{"array"}, Items: &spec.SchemaOrArray{Schema: &ref}}}
	owners.AddExtension("x-kubernetes-list-type", "map")
	owners.AddExtension("x-kubernetes-list-map-keys", []any{"uid"})
	md := spec.Schema{SchemaProps: spec.SchemaProps{Type: spec.StringOrArray{"object"}, Properties: map[string]spec.Schema{
		"name": str, "namespace": str, "generateName": str,
		"labels": strMap, "annotations": strMap,
		"finalizers": finalizers, "ownerReferences": owners,
	}}}
	md.AddExtension("x-kubernetes-preserve-unknown-fields", true)
	return md
}
