package openapi

import (
	"reflect"
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
	props := map[string]spec.Schema{}
	for k, v := range s.Properties {
		props[k] = v
	}
	props["apiVersion"] = stringProp(apiVersionDoc)
	props["kind"] = stringProp(kindDoc)
	md := b.ref(reflect.TypeOf(metav1.ObjectMeta{}))
	md.Description = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
	props["metadata"] = md
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
