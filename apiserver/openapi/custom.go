package openapi

import (
	"reflect"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// customDefName is the definition name upstream gives a custom resource's
// kind: its group reversed, then version and kind
// (stable.example.com/v1 CronTab → com.example.stable.v1.CronTab).
func customDefName(gvk schema.GroupVersionKind) string {
	parts := strings.Split(gvk.Group, ".")
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return strings.Join(parts, ".") + "." + gvk.Version + "." + gvk.Kind
}

// customKinds defines a custom resource's kind from its CRD schema, with
// the standard apiVersion, kind and metadata, and its list kind, and
// returns references to both.
func (b *builder) customKinds(r Resource) (obj, list spec.Schema) {
	name := customDefName(r.GVK)
	s := *r.Schema
	if !b.v3 {
		s = *swagger2Schema(&s)
	}
	props := map[string]spec.Schema{}
	for k, v := range s.Properties {
		props[k] = v
	}
	props["apiVersion"] = stringProp(apiVersionDoc)
	props["kind"] = stringProp(kindDoc)
	// Described as upstream describes it (kubectl explain <crd>.metadata
	// shows it), wrapped in allOf in OpenAPI v3 as built-in kinds' described
	// references are.
	props["metadata"] = b.field(reflect.TypeOf(metav1.ObjectMeta{}), "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata")
	s.Properties = props
	if len(s.Type) == 0 {
		s.Type = spec.StringOrArray{"object"}
	}
	b.defs[name] = &s
	b.gvks[name] = append(b.gvks[name], r.GVK)

	listName := customDefName(r.GVK.GroupVersion().WithKind(r.ListKind))
	ls := &spec.Schema{SchemaProps: spec.SchemaProps{
		Description: r.ListKind + " is a list of " + r.GVK.Kind,
		Type:        spec.StringOrArray{"object"},
		Required:    []string{"items"},
		Properties: map[string]spec.Schema{
			"apiVersion": stringProp(apiVersionDoc),
			"kind":       stringProp(kindDoc),
			"metadata":   b.ref(reflect.TypeOf(metav1.ListMeta{})),
			"items": {SchemaProps: spec.SchemaProps{
				Description: "List of " + strings.ToLower(r.GVK.Kind) + "s. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md",
				Type:        spec.StringOrArray{"array"},
				Items:       &spec.SchemaOrArray{Schema: &spec.Schema{SchemaProps: spec.SchemaProps{Ref: b.refTo(name)}}},
			}},
		},
	}}
	b.defs[listName] = ls
	b.gvks[listName] = append(b.gvks[listName], r.GVK.GroupVersion().WithKind(r.ListKind))
	return spec.Schema{SchemaProps: spec.SchemaProps{Ref: b.refTo(name)}}, spec.Schema{SchemaProps: spec.SchemaProps{Ref: b.refTo(listName)}}
}

var (
	typeMetaDoc   = metav1.TypeMeta{}.SwaggerDoc()
	apiVersionDoc = typeMetaDoc["apiVersion"]
	kindDoc       = typeMetaDoc["kind"]
)

func stringProp(desc string) spec.Schema {
	return spec.Schema{SchemaProps: spec.SchemaProps{Description: desc, Type: spec.StringOrArray{"string"}}}
}

// swagger2Schema is a CRD's schema as kube-apiserver publishes it in
// Swagger 2.0, which kubectl's client-side validation parses strictly:
// without the junctors (allOf, oneOf, anyOf, not: int-or-string fields
// carry anyOf), nullable fields untyped (and not required), and fields
// that preserve unknown fields, or arrays left without items, untyped so
// that kubectl accepts any value there. It works on a copy.
func swagger2Schema(in *spec.Schema) *spec.Schema {
	if in == nil {
		return nil
	}
	out := *in
	out.AllOf, out.OneOf, out.AnyOf, out.Not = nil, nil, nil, nil
	preserve, _ := in.Extensions.GetBool("x-kubernetes-preserve-unknown-fields")
	if in.Nullable {
		out.Type, out.Nullable = nil, false
		out.Items, out.Properties = nil, nil
	}
	if preserve {
		out.Items, out.Properties = nil, nil
		if out.Type.Contains("object") {
			out.Type = nil
		}
	}
	if out.Properties != nil {
		props := make(map[string]spec.Schema, len(out.Properties))
		for k, v := range out.Properties {
			props[k] = *swagger2Schema(&v)
			if v.Nullable {
				out.Required = slices.DeleteFunc(slices.Clone(out.Required), func(r string) bool { return r == k })
			}
		}
		out.Properties = props
	}
	if ap := out.AdditionalProperties; ap != nil && ap.Schema != nil {
		if ap.Schema.Nullable {
			out.Required = nil
		}
		out.AdditionalProperties = &spec.SchemaOrBool{Allows: ap.Allows, Schema: swagger2Schema(ap.Schema)}
	}
	if it := out.Items; it != nil && it.Schema != nil {
		out.Items = &spec.SchemaOrArray{Schema: swagger2Schema(it.Schema)}
	}
	if out.Items == nil && out.Type.Contains("array") {
		out.Type = nil
	}
	return &out
}
