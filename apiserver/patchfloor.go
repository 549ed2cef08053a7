package apiserver

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"sync"

	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
)

// patchFloor is the least size the stored encoding of a merge patch's
// (or a strategic merge patch's, or an apply configuration's) result can
// have, read from the patch alone, in one pass that keeps nothing but
// the path it is on. Every member a patch sets to a value the object's
// schema keeps is in the result, so a patch whose floor is over the
// object limit is refused before the patch libraries and the decoders
// build it, which takes tens of times its size: a 3 MB merge patch of
// small members cost 130 MB of resident memory before it was refused.
//
// The floor counts only what is certain: members the schema keeps (not
// unknown fields, which decoding and pruning drop; not status and
// managedFields, which a write of the main resource does not take; not a
// strategic merge patch's directives, its deletions, or its merged
// lists, whose items may merge with others), each at what protobuf, the
// most compact of the stored encodings, needs at least. ok is false for
// a document it cannot read (malformed, or nested past the decoders'
// limit): the patch libraries then refuse it with their own messages.
//
// nesting is the sum over the patch's objects and arrays of their
// lengths: every byte counted once for each level it is nested at. The
// JSON merge patch library keeps a copy of each object's bytes at each
// level it expands, so this is what a merge patch makes it hold.
func patchFloor(body []byte, root shape, strategic bool) (floor int, nesting int64, ok bool) {
	w := floorWalker{dec: json.NewDecoder(bytes.NewReader(body)), strategic: strategic}
	w.dec.UseNumber()
	n, err := w.value(root, 0, true)
	if err != nil {
		return 0, 0, false
	}
	return n, w.nesting, true
}

// maxPatchDepth is the nesting depth the JSON decoders refuse past.
const maxPatchDepth = 10000

type floorWalker struct {
	dec       *json.Decoder
	strategic bool
	nesting   int64
}

type floorError struct{}

func (floorError) Error() string { return "unreadable patch" }

// value reads one JSON value of shape sh and returns its floor.
func (w *floorWalker) value(sh shape, depth int, root bool) (int, error) {
	if depth > maxPatchDepth {
		return 0, floorError{}
	}
	tok, err := w.dec.Token()
	if err != nil {
		return 0, err
	}
	switch t := tok.(type) {
	case nil:
		return 0, nil // deletes
	case string:
		return sh.stringCost(t), nil
	case json.Number, bool:
		if sh.opaque() || sh.isValue() {
			return 1, nil
		}
		return 0, nil
	case json.Delim:
		start := w.dec.InputOffset()
		defer func() { w.nesting += w.dec.InputOffset() - start }()
		if t == '[' {
			item, counted := sh.item(w.strategic)
			total := 0
			for w.dec.More() {
				n, err := w.value(item, depth+1, false)
				if err != nil {
					return 0, err
				}
				if counted {
					total += n + 1
				}
			}
			_, err := w.dec.Token()
			return total, err
		}
		total, deleted := 0, false
		for w.dec.More() {
			kt, err := w.dec.Token()
			if err != nil {
				return 0, err
			}
			key, _ := kt.(string)
			if w.strategic && strings.HasPrefix(key, "$") {
				d, err := w.dec.Token()
				if err != nil {
					return 0, err
				}
				if key == "$patch" && d == "delete" {
					deleted = true
				}
				if d, ok := d.(json.Delim); ok {
					if err := w.skip(d, depth+1); err != nil {
						return 0, err
					}
				}
				continue
			}
			msh, cost, kept := sh.member(key, root)
			n, err := w.value(msh, depth+1, false)
			if err != nil {
				return 0, err
			}
			if kept && n > 0 {
				total += n + cost
			}
		}
		if _, err := w.dec.Token(); err != nil {
			return 0, err
		}
		if deleted {
			return 0, nil
		}
		if total == 0 && sh.opaque() {
			return 1, nil
		}
		return total, nil
	}
	return 0, floorError{}
}

// skip reads past the rest of an object or array whose opening d was read.
func (w *floorWalker) skip(d json.Delim, depth int) error {
	if depth > maxPatchDepth {
		return floorError{}
	}
	for w.dec.More() {
		if d == '{' {
			if _, err := w.dec.Token(); err != nil {
				return err
			}
		}
		tok, err := w.dec.Token()
		if err != nil {
			return err
		}
		if inner, ok := tok.(json.Delim); ok {
			if err := w.skip(inner, depth+1); err != nil {
				return err
			}
		}
	}
	_, err := w.dec.Token()
	return err
}

// shape is what a patch's floor needs of a schema.
type shape interface {
	// member is the shape of an object's member, what keeping it costs
	// besides its value, and whether the result keeps it at all.
	member(key string, root bool) (shape, int, bool)
	// item is the shape of a list's items, and whether the result
	// surely keeps each of them.
	item(strategic bool) (shape, bool)
	// stringCost is the floor of a string value.
	stringCost(s string) int
	// opaque says the value is kept in a form the floor does not follow
	// (a quantity, a time, raw JSON): it counts a byte.
	opaque() bool
	// isValue says the shape is a scalar the result keeps.
	isValue() bool
}

// dropped is the shape of what the result does not keep.
type dropped struct{}

func (dropped) member(string, bool) (shape, int, bool) { return dropped{}, 0, false }
func (dropped) item(bool) (shape, bool)                { return dropped{}, false }
func (dropped) stringCost(string) int                  { return 0 }
func (dropped) opaque() bool                           { return false }
func (dropped) isValue() bool                          { return false }

// goShape is a built-in kind's Go type, as its protobuf encoding keeps
// it. mergedList marks a list a strategic merge patch merges.
type goShape struct {
	t          reflect.Type
	mergedList bool
}

// serverMetadata are the metadata a write does not take from a patch:
// the server sets or clears them.
var serverMetadata = map[string]bool{"managedFields": true, "resourceVersion": true, "uid": true, "selfLink": true,
	"creationTimestamp": true, "generation": true, "deletionTimestamp": true, "deletionGracePeriodSeconds": true}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

func newGoShape(t reflect.Type, tag reflect.StructTag) goShape {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return goShape{t: t, mergedList: t.Kind() == reflect.Slice && strings.Contains(tag.Get("patchStrategy"), "merge")}
}

func (g goShape) opaque() bool {
	return reflect.PointerTo(g.t).Implements(unmarshalerType) || g.t.Kind() == reflect.Interface
}

func (g goShape) isValue() bool {
	switch g.t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

func (g goShape) stringCost(s string) int {
	switch {
	case g.opaque():
		return 1
	case g.t.Kind() == reflect.String:
		return len(s) + 1 // and its length
	case g.t.Kind() == reflect.Slice && g.t.Elem().Kind() == reflect.Uint8:
		// base64: three bytes for every four characters, padding aside.
		return max(len(s)*3/4-2, 0) + 1
	}
	return 0
}

func (g goShape) member(key string, root bool) (shape, int, bool) {
	if g.opaque() {
		return dropped{}, 0, false
	}
	switch g.t.Kind() {
	case reflect.Map:
		// An entry's tag and length, its key's tag and length, the key.
		return newGoShape(g.t.Elem(), ""), len(key) + 4, true
	case reflect.Struct:
		if root && (key == "status" || key == "apiVersion" || key == "kind") {
			return dropped{}, 0, false
		}
		if g.t == objectMetaType && serverMetadata[key] {
			return dropped{}, 0, false
		}
		f, ok := structFields(g.t)[key]
		if !ok {
			return dropped{}, 0, false
		}
		return newGoShape(f.Type, f.Tag), 1, true
	}
	return dropped{}, 0, false
}

func (g goShape) item(strategic bool) (shape, bool) {
	if g.opaque() || g.t.Kind() != reflect.Slice || (strategic && g.mergedList) {
		return dropped{}, false
	}
	return newGoShape(g.t.Elem(), ""), true
}

var structFieldCache sync.Map // reflect.Type -> map[string]reflect.StructField

// structFields are a struct's members by JSON name, inlined ones
// included.
func structFields(t reflect.Type) map[string]reflect.StructField {
	if m, ok := structFieldCache.Load(t); ok {
		return m.(map[string]reflect.StructField)
	}
	m := map[string]reflect.StructField{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct || strings.Contains(opts, "inline") && ft.Kind() == reflect.Struct {
			for k, v := range structFields(ft) {
				if _, taken := m[k]; !taken {
					m[k] = v
				}
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = f
	}
	m2, _ := structFieldCache.LoadOrStore(t, m)
	return m2.(map[string]reflect.StructField)
}

// customShape is a custom kind's structural schema, as its JSON encoding
// keeps it; s nil keeps everything.
type customShape struct{ s *structuralschema.Structural }

func (c customShape) opaque() bool  { return false }
func (c customShape) isValue() bool { return true }

func (c customShape) stringCost(s string) int { return len(s) + 2 }

func (c customShape) member(key string, root bool) (shape, int, bool) {
	cost := len(key) + 3
	if root || (c.s != nil && c.s.XEmbeddedResource) {
		switch key {
		case "apiVersion", "kind":
			return dropped{}, 0, false // set by the server whatever the patch says
		case "metadata":
			return newGoShape(objectMetaType, ""), cost + 1, true
		case "status":
			if root {
				return dropped{}, 0, false
			}
		}
	}
	if c.s == nil {
		return customShape{}, cost, true
	}
	if p, ok := c.s.Properties[key]; ok {
		return customShape{&p}, cost, true
	}
	if ap := c.s.AdditionalProperties; ap != nil {
		if ap.Structural != nil {
			return customShape{ap.Structural}, cost, true
		}
		if ap.Bool {
			return customShape{}, cost, true
		}
	}
	if c.s.XPreserveUnknownFields {
		return customShape{}, cost, true
	}
	return dropped{}, 0, false
}

func (c customShape) item(bool) (shape, bool) {
	if c.s == nil {
		return customShape{}, true
	}
	if c.s.Items != nil {
		return customShape{c.s.Items}, true
	}
	return customShape{}, true
}

// patchShape is the shape a patch of res's main resource is read by.
func patchShape(res *resource) shape {
	if res.custom != nil {
		return customShape{res.custom.Structural()}
	}
	return newGoShape(reflect.TypeOf(res.newObject()), "")
}
