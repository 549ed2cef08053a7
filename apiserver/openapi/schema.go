package openapi

import (
	"reflect"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// The optional methods API types use to describe themselves. Kubernetes'
// openapi-gen reads the same methods, so honouring them gives the shapes
// kube-apiserver publishes.
type (
	swaggerDoc      interface{ SwaggerDoc() map[string]string }
	modelNamer      interface{ OpenAPIModelName() string }
	schemaTyper     interface{ OpenAPISchemaType() []string }
	schemaFormatter interface{ OpenAPISchemaFormat() string }
	v3OneOfTyper    interface{ OpenAPIV3OneOfTypes() []string }
)

// objectTypes marshal themselves as arbitrary JSON objects; reflection over
// their Go fields would describe the wrong thing.
var objectTypes = map[string]bool{
	"io.k8s.apimachinery.pkg.runtime.RawExtension":  true,
	"io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1": true,
	"io.k8s.apimachinery.pkg.runtime.Unknown":       true,
}

// defName is the name Kubernetes gives a Go type's definition: the type's own
// OpenAPIModelName when it has one, otherwise its package path with the
// domain reversed (k8s.io/api/apps/v1.Deployment →
// io.k8s.api.apps.v1.Deployment).
func defName(t reflect.Type) string {
	if n, ok := reflect.New(t).Interface().(modelNamer); ok {
		if name := n.OpenAPIModelName(); name != "" {
			return name
		}
	}
	parts := strings.Split(t.PkgPath(), "/")
	if len(parts) > 0 {
		host := strings.Split(parts[0], ".")
		for i, j := 0, len(host)-1; i < j; i, j = i+1, j-1 {
			host[i], host[j] = host[j], host[i]
		}
		parts[0] = strings.Join(host, ".")
	}
	return strings.Join(parts, ".") + "." + t.Name()
}

// builder collects the definitions reachable from the types it is asked
// about, in the dialect of one document (v2 or v3).
type builder struct {
	v3   bool
	defs map[string]*spec.Schema
	gvks map[string][]schema.GroupVersionKind
}

func newBuilder(v3 bool) *builder {
	return &builder{v3: v3, defs: map[string]*spec.Schema{}, gvks: map[string][]schema.GroupVersionKind{}}
}

func (b *builder) refTo(name string) spec.Ref {
	if b.v3 {
		return spec.MustCreateRef("#/components/schemas/" + name)
	}
	return spec.MustCreateRef("#/definitions/" + name)
}

// kind defines t as the type of gvk and returns a reference to it.
func (b *builder) kind(t reflect.Type, gvk schema.GroupVersionKind) spec.Schema {
	name := b.define(t)
	for _, have := range b.gvks[name] {
		if have == gvk {
			return spec.Schema{SchemaProps: spec.SchemaProps{Ref: b.refTo(name)}}
		}
	}
	b.gvks[name] = append(b.gvks[name], gvk)
	return spec.Schema{SchemaProps: spec.SchemaProps{Ref: b.refTo(name)}}
}

// ref defines t and returns a reference to it.
func (b *builder) ref(t reflect.Type) spec.Schema {
	return spec.Schema{SchemaProps: spec.SchemaProps{Ref: b.refTo(b.define(t))}}
}

// definitions returns the collected schemas with their
// x-kubernetes-group-version-kind, which is only known once every kind has
// been added.
func (b *builder) definitions() map[string]*spec.Schema {
	for name, gvks := range b.gvks {
		sort.Slice(gvks, func(i, j int) bool {
			a, c := gvks[i], gvks[j]
			if a.Group != c.Group {
				return a.Group < c.Group
			}
			if a.Version != c.Version {
				return a.Version < c.Version
			}
			return a.Kind < c.Kind
		})
		var list []any
		for _, gvk := range gvks {
			list = append(list, map[string]any{"group": gvk.Group, "version": gvk.Version, "kind": gvk.Kind})
		}
		b.defs[name].AddExtension("x-kubernetes-group-version-kind", list)
	}
	return b.defs
}

// define makes sure the named struct type t has a definition and returns
// its name.
func (b *builder) define(t reflect.Type) string {
	name := defName(t)
	if _, ok := b.defs[name]; ok {
		return name
	}
	s := &spec.Schema{}
	b.defs[name] = s // before recursing: types may refer to themselves
	*s = b.namedSchema(t, name)
	return name
}

func (b *builder) namedSchema(t reflect.Type, name string) spec.Schema {
	v := reflect.New(t).Interface()
	var s spec.Schema
	if d, ok := v.(swaggerDoc); ok {
		s.Description = d.SwaggerDoc()[""]
	}
	if typer, ok := v.(schemaTyper); ok {
		s.Type = typer.OpenAPISchemaType()
		if f, ok := v.(schemaFormatter); ok {
			s.Format = f.OpenAPISchemaFormat()
		}
		if o, ok := v.(v3OneOfTyper); ok && b.v3 {
			// Kubernetes leaves the type out in v3 so that clients see
			// every alternative (kubectl explain then prints the type's
			// name, as it does for IntOrString and Quantity).
			s.Type = nil
			for _, alt := range o.OpenAPIV3OneOfTypes() {
				s.OneOf = append(s.OneOf, spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{alt}}})
			}
		}
		if s.Format == "int-or-string" && b.v3 {
			s.AddExtension("x-kubernetes-int-or-string", true)
		}
		return s
	}
	if objectTypes[name] {
		s.Type = []string{"object"}
		return s
	}
	s.Type = []string{"object"}
	b.addFields(&s, t)
	return s
}

// addFields adds t's JSON fields to s, flattening inline and embedded
// structs the way encoding/json does.
func (b *builder) addFields(s *spec.Schema, t reflect.Type) {
	var docs map[string]string
	if d, ok := reflect.New(t).Interface().(swaggerDoc); ok {
		docs = d.SwaggerDoc()
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		optSet := map[string]bool{}
		for _, o := range strings.Split(opts, ",") {
			optSet[o] = true
		}
		ft := f.Type
		if optSet["inline"] || (f.Anonymous && name == "") {
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				b.addFields(s, ft)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		prop := b.field(ft, docs[name])
		if ps := f.Tag.Get("patchStrategy"); ps != "" {
			prop.AddExtension("x-kubernetes-patch-strategy", ps)
		}
		if pk := f.Tag.Get("patchMergeKey"); pk != "" {
			prop.AddExtension("x-kubernetes-patch-merge-key", pk)
		}
		if s.Properties == nil {
			s.Properties = map[string]spec.Schema{}
		}
		s.Properties[name] = prop
		if !optSet["omitempty"] && !optSet["omitzero"] && ft.Kind() != reflect.Pointer {
			s.Required = append(s.Required, name)
		}
	}
}

// field is the schema of a property of type t.
func (b *builder) field(t reflect.Type, description string) spec.Schema {
	s := b.typeSchema(t)
	if description == "" {
		return s
	}
	if s.Ref.String() != "" && b.v3 {
		// OpenAPI v3.0 ignores siblings of $ref, so Kubernetes wraps the
		// reference to keep the field's own description.
		s = spec.Schema{SchemaProps: spec.SchemaProps{AllOf: []spec.Schema{s}}}
	}
	s.Description = description
	return s
}

func (b *builder) typeSchema(t reflect.Type) spec.Schema {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	simple := func(typ, format string) spec.Schema {
		return spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{typ}, Format: format}}
	}
	switch t.Kind() {
	case reflect.Struct:
		if t.Name() == "" {
			s := spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"object"}}}
			b.addFields(&s, t)
			return s
		}
		return b.ref(t)
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return simple("string", "byte")
		}
		items := b.typeSchema(t.Elem())
		s := simple("array", "")
		s.Items = &spec.SchemaOrArray{Schema: &items}
		return s
	case reflect.Map:
		elem := b.typeSchema(t.Elem())
		s := simple("object", "")
		s.AdditionalProperties = &spec.SchemaOrBool{Allows: true, Schema: &elem}
		return s
	case reflect.String:
		return simple("string", "")
	case reflect.Bool:
		return simple("boolean", "")
	case reflect.Int8, reflect.Int16, reflect.Int32, reflect.Uint8, reflect.Uint16:
		return simple("integer", "int32")
	case reflect.Int, reflect.Int64, reflect.Uint, reflect.Uint32, reflect.Uint64:
		return simple("integer", "int64")
	case reflect.Float32:
		return simple("number", "float")
	case reflect.Float64:
		return simple("number", "double")
	case reflect.Interface:
		return simple("object", "")
	}
	return spec.Schema{}
}
