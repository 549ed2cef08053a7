package apiserver

import (
	"bytes"
	"sort"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kschema "k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
)

// recordUpdated sets the managedFields of an update of a built-in object
// by manager to what kube-apiserver's field manager (UpdateNoErrors)
// records, in the common case, and says false, having changed nothing,
// when the field manager must decide.
//
// The field manager decodes every entry's field set from JSON, walks each
// against the schema (turning the whole live object into unstructured
// maps once per entry on the way), compares the objects, and encodes
// every set again. Here the decoded, schema-reconciled set of an entry's
// bytes comes from managedSets, entries the update does not touch keep
// their bytes, and only the comparison and the set arithmetic run on
// each write. Those are the field manager's own steps for an Update:
//   - each entry loses the fields the update added or changed (it no
//     longer owns what someone else set) and the fields it removed;
//     entries left empty go;
//   - the manager's own entry for this operation and subresource gains
//     the fields added or changed, but the object's identity and
//     bookkeeping (neverManaged), and takes the current time if it gained
//     any;
//   - fields the strategy resets (resetFilter) count as neither.
//
// The common case: the live object has entries, all of the kind's version
// and well formed, each manager once; the request brings the live entries
// back or none (a main resource's update may replace them, which the
// field manager honours); and the result keeps within the cap of ten
// Update entries. live and obj are what the field manager would compare,
// equal the top-level fields both hold equal (equalFields), which the
// comparison leaves out; target gets the entries.
func (r *resource) recordUpdated(live, obj, target runtime.Object, subresource, manager string, equal []int) bool {
	if r.custom != nil || r.typeConverter() != builtinTypeConverter() {
		return false
	}
	gvk := r.gvk()
	if live.GetObjectKind().GroupVersionKind() != gvk || obj.GetObjectKind().GroupVersionKind() != gvk {
		return false
	}
	lm, err := metaOf(live)
	if err != nil {
		return false
	}
	tm, err := metaOf(target)
	if err != nil {
		return false
	}
	entries := lm.GetManagedFields()
	if len(entries) == 0 {
		return false // the field manager's skipNonApplied decides
	}
	if subresource == "" {
		if sent := tm.GetManagedFields(); len(sent) > 0 && !sameEntries(sent, entries) {
			return false
		}
	}
	if manager == "" {
		manager = "unknown"
	}
	gv := gvk.GroupVersion().String()

	tc := r.typeConverter()
	// The live object's typed value, made only if needed: to reconcile
	// a set the cache does not hold, or for structured-merge-diff's
	// comparison.
	var lt *typed.TypedValue
	liveTyped := func() (*typed.TypedValue, error) {
		if lt == nil {
			var err error
			if lt, err = tc.ObjectToTyped(live, typed.AllowDuplicates); err != nil {
				return nil, err
			}
		}
		return lt, nil
	}

	type owner struct {
		entry metav1.ManagedFieldsEntry
		set   *fieldpath.Set
		// raw is the set's encoding, nil once the set changed.
		raw []byte
	}
	owners := make([]owner, 0, len(entries)+1)
	self := -1
	for _, e := range entries {
		if (e.Operation != metav1.ManagedFieldsOperationUpdate && e.Operation != metav1.ManagedFieldsOperationApply) ||
			e.APIVersion != gv || e.FieldsType != "FieldsV1" {
			return false
		}
		for _, o := range owners {
			if sameManager(o.entry, e) {
				return false // the field manager keeps the last of them
			}
		}
		raw := emptyFieldsRaw
		if e.FieldsV1 != nil {
			raw = e.FieldsV1.Raw
		}
		ms, ok := managedSets.get(gvk, raw, liveTyped)
		if !ok {
			return false
		}
		if e.Operation == metav1.ManagedFieldsOperationUpdate && e.Manager == manager && e.Subresource == subresource {
			self = len(owners)
		}
		owners = append(owners, owner{entry: e, set: ms.set, raw: ms.raw})
	}

	cmp, err := compareObjects(tc, liveTyped, live, obj, equal)
	if err != nil {
		return false
	}
	cmp = cmp.FilterFields(r.resetFilter(subresource))
	changed := cmp.Modified.Union(cmp.Added)
	kept := owners[:0]
	selfKept := -1
	for i, o := range owners {
		if taken := o.set.Intersection(changed); !taken.Empty() {
			o.set, o.raw = o.set.Difference(taken), nil
		}
		if !cmp.Removed.Empty() {
			if gone := o.set.Intersection(cmp.Removed); !gone.Empty() {
				o.set, o.raw = o.set.Difference(cmp.Removed), nil
			}
		}
		if o.set.Empty() {
			continue
		}
		if i == self {
			selfKept = len(kept)
		}
		kept = append(kept, o)
	}
	owners = kept

	if gained := changed.Difference(neverManaged); !gained.Empty() {
		now := &metav1.Time{Time: time.Now().UTC()}
		if selfKept >= 0 {
			o := &owners[selfKept]
			if set := gained.Union(o.set); !set.Equals(o.set) {
				o.set, o.raw = set, nil
			}
			o.entry.Time = now
		} else {
			owners = append(owners, owner{
				entry: metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: gv, Subresource: subresource, Time: now},
				set:   gained,
			})
		}
	}

	updaters := 0
	for _, o := range owners {
		if o.entry.Operation == metav1.ManagedFieldsOperationUpdate {
			updaters++
		}
	}
	if updaters > maxUpdateManagers {
		return false // the field manager merges the oldest
	}

	out := make([]metav1.ManagedFieldsEntry, 0, len(owners))
	for _, o := range owners {
		raw := o.raw
		if raw == nil {
			if raw, err = o.set.ToJSON(); err != nil {
				return false
			}
		}
		out = append(out, metav1.ManagedFieldsEntry{
			Manager:     o.entry.Manager,
			Operation:   o.entry.Operation,
			APIVersion:  gv,
			Time:        o.entry.Time,
			FieldsType:  "FieldsV1",
			FieldsV1:    &metav1.FieldsV1{Raw: raw},
			Subresource: o.entry.Subresource,
		})
	}
	sortManagedFields(out)
	if len(out) == 0 {
		out = nil
	}
	tm.SetManagedFields(out)
	return true
}

// compareObjects is the comparison of live (whose typed value liveTyped
// makes) and obj, leaving out the top-level fields equal: compareTyped's,
// or structured-merge-diff's where that declines.
func compareObjects(tc managedfields.TypeConverter, liveTyped func() (*typed.TypedValue, error), live, obj runtime.Object, equal []int) (*typed.Comparison, error) {
	if ftc, ok := tc.(*fastTypeConverter); ok {
		if shape, ok, _ := ftc.shape(live.GetObjectKind().GroupVersionKind()); ok {
			if cmp, ok := compareTyped(shape.schema, shape.typeRef, live, obj, equal); ok {
				return cmp, nil
			}
		}
	}
	var lt *typed.TypedValue
	var err error
	if pl, pn, pruned := withoutFields(live, obj, equal); pruned {
		if lt, err = tc.ObjectToTyped(pl, typed.AllowDuplicates); err != nil {
			return nil, err
		}
		obj = pn
	} else if lt, err = liveTyped(); err != nil {
		return nil, err
	}
	nt, err := tc.ObjectToTyped(obj, typed.AllowDuplicates)
	if err != nil {
		return nil, err
	}
	return lt.Compare(nt)
}

// maxUpdateManagers is the field manager's cap on Update entries
// (DefaultMaxUpdateManagers).
const maxUpdateManagers = 10

// emptyFieldsRaw is an entry without fields, as the field manager reads
// one with no fieldsV1.
var emptyFieldsRaw = []byte("{}")

// sameManager says whether two entries name the same manager, as the field
// manager's identifiers do: an applier by name and subresource, an updater
// by its version too.
func sameManager(a, b metav1.ManagedFieldsEntry) bool {
	if a.Manager != b.Manager || a.Operation != b.Operation || a.Subresource != b.Subresource {
		return false
	}
	return a.Operation == metav1.ManagedFieldsOperationApply || a.APIVersion == b.APIVersion
}

// sortManagedFields orders entries as the field manager writes them:
// appliers first, then by time (whole seconds), manager, version and
// subresource.
func sortManagedFields(entries []metav1.ManagedFieldsEntry) {
	sort.Slice(entries, func(i, j int) bool {
		p, q := entries[i], entries[j]
		if p.Operation != q.Operation {
			return p.Operation < q.Operation
		}
		var ps, qs int64
		if p.Time != nil {
			ps = p.Time.Unix()
		}
		if q.Time != nil {
			qs = q.Time.Unix()
		}
		if ps != qs {
			return ps < qs
		}
		if p.Manager != q.Manager {
			return p.Manager < q.Manager
		}
		if p.APIVersion != q.APIVersion {
			return p.APIVersion < q.APIVersion
		}
		return p.Subresource < q.Subresource
	})
}

// managedSet is an entry's field set as the field manager works with it:
// decoded, reconciled with the kind's schema, and encoded again. Sets are
// shared by every write that reads the same bytes and never changed.
type managedSet struct {
	set *fieldpath.Set
	raw []byte
}

// managedSetCache holds the managedSets of the entries recent writes read,
// by version and bytes: the replicas of a workload share their creator's
// entry byte for byte, and a Lease its holder's from one renewal to the
// next. It forgets entries at random once they hold maxBytes of keys.
type managedSetCache struct {
	mu       sync.Mutex
	sets     map[string]managedSet
	bytes    int
	maxBytes int
}

var managedSets = &managedSetCache{sets: map[string]managedSet{}, maxBytes: 4 << 20}

// get is the managedSet of raw for objects of kind gvk, one of whose
// typed values typedLive makes, false when the field manager would fail
// on it.
func (c *managedSetCache) get(gvk kschema.GroupVersionKind, raw []byte, typedLive func() (*typed.TypedValue, error)) (managedSet, bool) {
	kind := gvk.String()
	key := make([]byte, 0, len(kind)+1+len(raw))
	key = append(append(append(key, kind...), 0), raw...)
	c.mu.Lock()
	ms, ok := c.sets[string(key)]
	c.mu.Unlock()
	if ok {
		return ms, true
	}
	set := &fieldpath.Set{}
	if err := set.FromJSON(bytes.NewReader(raw)); err != nil {
		return managedSet{}, false
	}
	tv, err := typedLive()
	if err != nil {
		return managedSet{}, false
	}
	reconciled, err := typed.ReconcileFieldSetWithSchema(set, tv)
	if err != nil {
		return managedSet{}, false
	}
	if reconciled != nil {
		set = reconciled
	}
	enc, err := set.ToJSON()
	if err != nil {
		return managedSet{}, false
	}
	if bytes.Equal(enc, raw) {
		enc = key[len(kind)+1:] // the key's copy: raw belongs to the caller
	}
	ms = managedSet{set: set, raw: enc}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.sets {
		if c.bytes+len(key) <= c.maxBytes {
			break
		}
		c.bytes -= len(k)
		delete(c.sets, k)
	}
	if _, dup := c.sets[string(key)]; !dup {
		c.sets[string(key)] = ms
		c.bytes += len(key)
	}
	return ms, true
}
