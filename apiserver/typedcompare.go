package apiserver

import (
	"bytes"
	"encoding/base64"
	"reflect"
	"slices"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/schema"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
	smdvalue "sigs.k8s.io/structured-merge-diff/v6/value"
)

// compareTyped is what typed.TypedValue.Compare says of two objects of
// one built-in Go type, as fastTypeConverter makes their typed values
// (metadata.managedFields left out), without wrapping every field of
// both objects in structured-merge-diff's reflection values: a Pod's
// status write spent more time in that comparison than anywhere else in
// the field manager.
//
// It walks the two objects along the schema with the comparison's own
// rules: a field is absent when structured-merge-diff's reflection
// omits it; scalars are leaves; atomic maps and lists, and maps and
// lists empty or null on both sides, are leaves too, compared whole;
// other maps and structs go field by field, associative lists element
// by element under their keys (or values, for sets; duplicates as the
// comparison treats them); an absent side makes the path added or
// removed. Anything the comparison would reject or that this walk does
// not model (an ambiguous schema type, a non-scalar value of a custom
// JSON type, a value that does not match its schema) gives false, and the caller asks
// structured-merge-diff itself.
//
// The top-level fields at indices skip (equalFields') are left out of
// both sides, as withoutFields' copies would have them.
func compareTyped(sch *schema.Schema, tr schema.TypeRef, lhs, rhs runtime.Object, skip []int) (*typed.Comparison, bool) {
	lv, rv := reflect.ValueOf(lhs), reflect.ValueOf(rhs)
	if lv.Kind() != reflect.Pointer || lv.Type() != rv.Type() || lv.IsNil() || rv.IsNil() || lv.Elem().Kind() != reflect.Struct {
		return nil, false
	}
	c := &typedComparer{sch: sch, skip: jsonNames(lv.Elem().Type(), skip), cmp: &typed.Comparison{
		Removed: fieldpath.NewSet(), Modified: fieldpath.NewSet(), Added: fieldpath.NewSet(),
	}}
	if !c.compare(tr, cmpNode{kind: nodeStruct, v: lv.Elem()}, cmpNode{kind: nodeStruct, v: rv.Elem()}) {
		return nil, false
	}
	return c.cmp, true
}

type typedComparer struct {
	sch  *schema.Schema
	skip []string // top-level fields left out
	path fieldpath.Path
	cmp  *typed.Comparison
}

// cmpNode is one side's value at a path, as structured-merge-diff's
// reflection would see it.
type cmpNode struct {
	kind nodeKind
	v    reflect.Value // dereferenced, for reflected kinds
	u    any           // a custom type's unstructured scalar (nodeConverted)
}

type nodeKind uint8

const (
	nodeAbsent nodeKind = iota
	nodeNull
	nodeStruct
	nodeMap
	nodeList
	nodeScalar    // a Go scalar: string, bool, integer, float, or []byte
	nodeConverted // a custom type's scalar (a Time, a Quantity)
	nodeUnknown   // anything else: the caller falls back
)

// node is v as structured-merge-diff's reflection wraps a present value
// of the type entry e describes.
func node(v reflect.Value, e *smdvalue.TypeReflectCacheEntry) cmpNode {
	if e.CanConvertToUnstructured() {
		u, err := e.ToUnstructured(v)
		switch u.(type) {
		case nil:
			if err != nil {
				return cmpNode{kind: nodeUnknown}
			}
			return cmpNode{kind: nodeNull}
		case string, bool, int64, float64:
			return cmpNode{kind: nodeConverted, u: u}
		}
		return cmpNode{kind: nodeUnknown}
	}
	if k := v.Kind(); k == reflect.Pointer || k == reflect.Interface {
		if v.IsNil() {
			return cmpNode{kind: nodeNull}
		}
		v = v.Elem()
	}
	switch v.Kind() {
	case reflect.Struct:
		return cmpNode{kind: nodeStruct, v: v}
	case reflect.Map:
		if v.IsNil() {
			return cmpNode{kind: nodeNull}
		}
		if v.Type().Key().Kind() != reflect.String {
			return cmpNode{kind: nodeUnknown}
		}
		return cmpNode{kind: nodeMap, v: v}
	case reflect.Slice:
		if v.IsNil() {
			return cmpNode{kind: nodeNull}
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return cmpNode{kind: nodeScalar, v: v}
		}
		return cmpNode{kind: nodeList, v: v}
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Float32, reflect.Float64:
		return cmpNode{kind: nodeScalar, v: v}
	}
	return cmpNode{kind: nodeUnknown}
}

// scalar is a scalar node's unstructured value.
func (n cmpNode) scalar() any {
	if n.kind == nodeConverted {
		return n.u
	}
	v := n.v
	switch v.Kind() {
	case reflect.String:
		return v.String()
	case reflect.Bool:
		return v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32:
		return int64(v.Uint())
	case reflect.Float32, reflect.Float64:
		return v.Float()
	case reflect.Slice:
		return base64.StdEncoding.EncodeToString(v.Bytes())
	}
	return nil
}

// smdValue is the node as a structured-merge-diff value, for the
// comparison's own equality on whole leaves.
func (n cmpNode) smdValue() smdvalue.Value {
	switch n.kind {
	case nodeNull:
		return smdvalue.NewValueInterface(nil)
	case nodeScalar, nodeConverted:
		return smdvalue.NewValueInterface(n.scalar())
	}
	p := reflect.New(n.v.Type())
	p.Elem().Set(n.v)
	v, err := smdvalue.NewValueReflect(p.Interface())
	if err != nil {
		return nil
	}
	return v
}

// equal is structured-merge-diff's equality of two present nodes.
func equal(l, r cmpNode) (eq, ok bool) {
	if l.kind == nodeScalar && r.kind == nodeScalar && l.v.Kind() == r.v.Kind() {
		switch l.v.Kind() {
		case reflect.String:
			return l.v.String() == r.v.String(), true
		case reflect.Bool:
			return l.v.Bool() == r.v.Bool(), true
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			return l.v.Int() == r.v.Int(), true
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32:
			return l.v.Uint() == r.v.Uint(), true
		case reflect.Slice:
			return bytes.Equal(l.v.Bytes(), r.v.Bytes()), true
		}
	}
	if (l.kind == nodeScalar || l.kind == nodeConverted) && (r.kind == nodeScalar || r.kind == nodeConverted) {
		a, b := l.scalar(), r.scalar()
		switch a := a.(type) {
		case string:
			if b, same := b.(string); same {
				return a == b, true
			}
		case bool:
			if b, same := b.(bool); same {
				return a == b, true
			}
		case int64:
			if b, same := b.(int64); same {
				return a == b, true
			}
		}
		return smdvalue.Equals(smdvalue.NewValueInterface(a), smdvalue.NewValueInterface(b)), true
	}
	lv, rv := l.smdValue(), r.smdValue()
	if lv == nil || rv == nil {
		return false, false
	}
	return smdvalue.Equals(rv, lv), true
}

// omits says whether structured-merge-diff leaves out field f, of
// value fv, of the struct at the comparer's path: what its reflection
// omits, the top-level fields skipped, and the object's own
// managedFields, which the typed values leave out (withoutManagedFields).
func (c *typedComparer) omits(f *smdvalue.FieldCacheEntry, fv reflect.Value) bool {
	if f.CanOmit(fv) {
		return true
	}
	if len(c.path) == 0 {
		return slices.Contains(c.skip, f.JsonName)
	}
	return len(c.path) == 1 && f.JsonName == "managedFields" && c.path[0].FieldName != nil && *c.path[0].FieldName == "metadata"
}

// structFields calls fn with each field of the struct v at the
// comparer's path that structured-merge-diff does not omit.
func (c *typedComparer) structFields(v reflect.Value, fn func(f *smdvalue.FieldCacheEntry, fv reflect.Value) bool) bool {
	for _, f := range smdvalue.TypeReflectEntryOf(v.Type()).OrderedFields() {
		fv := f.GetFrom(v)
		if c.omits(f, fv) {
			continue
		}
		if !fn(f, fv) {
			return false
		}
	}
	return true
}

// emptyMap says whether a map node at the comparer's path (null, absent,
// struct or map) has no entries.
func (c *typedComparer) emptyMap(n cmpNode) bool {
	switch n.kind {
	case nodeStruct:
		return c.structFields(n.v, func(*smdvalue.FieldCacheEntry, reflect.Value) bool { return false })
	case nodeMap:
		return n.v.Len() == 0
	}
	return true
}

func (c *typedComparer) compare(tr schema.TypeRef, l, r cmpNode) bool {
	if l.kind == nodeUnknown || r.kind == nodeUnknown {
		return false
	}
	a, ok := c.sch.Resolve(tr)
	if !ok {
		return false
	}
	leaf := false
	switch {
	case a.Map != nil && a.Scalar == nil && a.List == nil:
		leaf, ok = c.doMap(a.Map, l, r)
	case a.List != nil && a.Scalar == nil && a.Map == nil:
		leaf, ok = c.doList(a.List, l, r)
	case a.Scalar != nil && a.List == nil && a.Map == nil:
		leaf, ok = true, scalarFits(*a.Scalar, l) && scalarFits(*a.Scalar, r) && c.doLeaf(l, r)
	default:
		return false
	}
	if !ok {
		return false
	}
	if !leaf {
		if l.kind == nodeAbsent {
			c.cmp.Added.Insert(c.path)
		} else if r.kind == nodeAbsent {
			c.cmp.Removed.Insert(c.path)
		}
	}
	return true
}

// scalarFits says whether a node is valid for a scalar of type t, as the
// comparison checks it.
func scalarFits(t schema.Scalar, n cmpNode) bool {
	var numeric, str, boolean bool
	switch n.kind {
	case nodeAbsent, nodeNull:
		return true
	case nodeScalar:
		switch n.v.Kind() {
		case reflect.String, reflect.Slice:
			str = true
		case reflect.Bool:
			boolean = true
		default:
			numeric = true
		}
	case nodeConverted:
		switch n.u.(type) {
		case string:
			str = true
		case bool:
			boolean = true
		default:
			numeric = true
		}
	default:
		return false
	}
	switch t {
	case schema.Numeric:
		return numeric
	case schema.String:
		return str
	case schema.Boolean:
		return boolean
	case schema.Untyped:
		return true
	}
	return false
}

// doLeaf records a leaf: added, removed, or modified when unequal.
func (c *typedComparer) doLeaf(l, r cmpNode) bool {
	switch {
	case l.kind == nodeAbsent:
		c.cmp.Added.Insert(c.path)
	case r.kind == nodeAbsent:
		c.cmp.Removed.Insert(c.path)
	default:
		eq, ok := equal(l, r)
		if !ok {
			return false
		}
		if !eq {
			c.cmp.Modified.Insert(c.path)
		}
	}
	return true
}

func isMapNode(n cmpNode) bool {
	switch n.kind {
	case nodeAbsent, nodeNull, nodeStruct, nodeMap:
		return true
	}
	return false
}

func (c *typedComparer) doMap(t *schema.Map, l, r cmpNode) (leaf, ok bool) {
	if !isMapNode(l) || !isMapNode(r) {
		return false, false
	}
	if t.ElementRelationship == schema.Atomic || c.emptyMap(l) && c.emptyMap(r) {
		return true, c.doLeaf(l, r)
	}
	visit := func(key *string, lc, rc cmpNode) bool {
		ft := t.ElementType
		if sf, found := t.FindField(*key); found {
			ft = sf.Type
		}
		c.path = append(c.path, fieldpath.PathElement{FieldName: key})
		ok := c.compare(ft, lc, rc)
		c.path = c.path[:len(c.path)-1]
		return ok
	}
	absent := cmpNode{}
	switch {
	case l.kind == nodeStruct && r.kind == nodeStruct:
		// Both sides are the same Go type.
		for _, f := range smdvalue.TypeReflectEntryOf(l.v.Type()).OrderedFields() {
			lf, rf := f.GetFrom(l.v), f.GetFrom(r.v)
			lOmit, rOmit := c.omits(f, lf), c.omits(f, rf)
			if lOmit && rOmit {
				continue
			}
			lc, rc := absent, absent
			if !lOmit {
				lc = node(lf, f.TypeEntry)
			}
			if !rOmit {
				rc = node(rf, f.TypeEntry)
			}
			if !visit(&f.JsonName, lc, rc) {
				return false, false
			}
		}
	case l.kind == nodeStruct || r.kind == nodeStruct:
		if l.kind != nodeStruct && r.kind != nodeStruct || l.kind == nodeMap || r.kind == nodeMap {
			return false, false
		}
		one, left := r, false
		if l.kind == nodeStruct {
			one, left = l, true
		}
		if !c.structFields(one.v, func(f *smdvalue.FieldCacheEntry, fv reflect.Value) bool {
			if left {
				return visit(&f.JsonName, node(fv, f.TypeEntry), absent)
			}
			return visit(&f.JsonName, absent, node(fv, f.TypeEntry))
		}) {
			return false, false
		}
	default:
		// Go maps, or one side absent or null.
		var lm, rm reflect.Value
		if l.kind == nodeMap {
			lm = l.v
		}
		if r.kind == nodeMap {
			rm = r.v
		}
		var entry *smdvalue.TypeReflectCacheEntry
		if lm.IsValid() {
			entry = smdvalue.TypeReflectEntryOf(lm.Type().Elem())
		} else {
			entry = smdvalue.TypeReflectEntryOf(rm.Type().Elem())
		}
		if lm.IsValid() {
			it := lm.MapRange()
			for it.Next() {
				key := it.Key().String()
				rc := absent
				if rm.IsValid() {
					if v := rm.MapIndex(it.Key()); v.IsValid() {
						rc = node(v, entry)
					}
				}
				if !visit(&key, node(it.Value(), entry), rc) {
					return false, false
				}
			}
		}
		if rm.IsValid() {
			it := rm.MapRange()
			for it.Next() {
				if lm.IsValid() && lm.MapIndex(it.Key()).IsValid() {
					continue
				}
				key := it.Key().String()
				if !visit(&key, absent, node(it.Value(), entry)) {
					return false, false
				}
			}
		}
	}
	return false, true
}

func (c *typedComparer) doList(t *schema.List, l, r cmpNode) (leaf, ok bool) {
	length := func(n cmpNode) (int, bool) {
		switch n.kind {
		case nodeAbsent, nodeNull:
			return 0, true
		case nodeList:
			return n.v.Len(), true
		}
		return 0, false
	}
	ll, lok := length(l)
	rl, rok := length(r)
	if !lok || !rok {
		return false, false
	}
	if t.ElementRelationship == schema.Atomic || ll == 0 && rl == 0 {
		return true, c.doLeaf(l, r)
	}
	if t.ElementRelationship != schema.Associative {
		return false, false
	}
	// Each path element with the elements of either side that have it,
	// in the order the comparison meets them.
	type item struct {
		pe   fieldpath.PathElement
		l, r []cmpNode
	}
	items := make([]item, 0, max(ll, rl))
	index := fieldpath.MakePathElementMap(max(ll, rl))
	add := func(n cmpNode, left bool) bool {
		entry := smdvalue.TypeReflectEntryOf(n.v.Type().Elem())
		for i := 0; i < n.v.Len(); i++ {
			child := node(n.v.Index(i), entry)
			pe, ok := c.listElement(t, child)
			if !ok {
				return false
			}
			at := len(items)
			if found, ok := index.Get(pe); ok {
				at = found.(int)
			} else {
				index.Insert(pe, at)
				items = append(items, item{pe: pe})
			}
			if left {
				items[at].l = append(items[at].l, child)
			} else {
				items[at].r = append(items[at].r, child)
			}
		}
		return true
	}
	if ll > 0 && !add(l, true) || rl > 0 && !add(r, false) {
		return false, false
	}
	absent := cmpNode{}
	for _, it := range items {
		c.path = append(c.path, it.pe)
		ok := true
		switch {
		case len(it.l) <= 1 && len(it.r) <= 1:
			lc, rc := absent, absent
			if len(it.l) == 1 {
				lc = it.l[0]
			}
			if len(it.r) == 1 {
				rc = it.r[0]
			}
			ok = c.compare(t.ElementType, lc, rc)
		case len(it.l) >= 2 && len(it.r) >= 2:
			// Duplicates on both sides: one leaf, as a whole.
			same := len(it.l) == len(it.r)
			for i := 0; same && i < len(it.l); i++ {
				var eq bool
				if eq, ok = equal(it.l[i], it.r[i]); !ok {
					break
				}
				same = eq
			}
			if ok && !same {
				c.cmp.Modified.Insert(c.path)
			}
		case len(it.l) >= 2:
			// Duplicates gone: the one left is new, the duplicates go.
			if len(it.r) == 1 {
				ok = c.compare(t.ElementType, absent, it.r[0])
			}
			c.cmp.Removed.Insert(c.path)
		default:
			// New duplicates: the one there was goes.
			if len(it.l) == 1 {
				ok = c.compare(t.ElementType, it.l[0], absent)
			}
			c.cmp.Added.Insert(c.path)
		}
		c.path = c.path[:len(c.path)-1]
		if !ok {
			return false, false
		}
	}
	return false, true
}

// listElement is the path element of an associative list's element: its
// keys (with the schema's defaults for omitted ones), or its value in a
// set.
func (c *typedComparer) listElement(t *schema.List, n cmpNode) (fieldpath.PathElement, bool) {
	if len(t.Keys) == 0 {
		if n.kind != nodeScalar && n.kind != nodeConverted {
			return fieldpath.PathElement{}, false
		}
		v := smdvalue.NewValueInterface(n.scalar())
		return fieldpath.PathElement{Value: &v}, true
	}
	if n.kind != nodeStruct {
		return fieldpath.PathElement{}, false
	}
	fields := smdvalue.TypeReflectEntryOf(n.v.Type()).Fields()
	keys := make(smdvalue.FieldList, 0, len(t.Keys))
	for _, name := range t.Keys {
		if f, found := fields[name]; found {
			if fv := f.GetFrom(n.v); !f.CanOmit(fv) {
				kn := node(fv, f.TypeEntry)
				if kn.kind != nodeScalar && kn.kind != nodeConverted {
					return fieldpath.PathElement{}, false
				}
				keys = append(keys, smdvalue.Field{Name: name, Value: smdvalue.NewValueInterface(kn.scalar())})
				continue
			}
		}
		atom, ok := c.sch.Resolve(t.ElementType)
		if !ok || atom.Map == nil {
			return fieldpath.PathElement{}, false
		}
		if sf, _ := atom.Map.FindField(name); sf.Default != nil {
			keys = append(keys, smdvalue.Field{Name: name, Value: smdvalue.NewValueInterface(sf.Default)})
		}
	}
	if len(keys) == 0 {
		return fieldpath.PathElement{}, false
	}
	keys.Sort()
	return fieldpath.PathElement{Key: &keys}, true
}
