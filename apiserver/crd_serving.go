package apiserver

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"

	"bonsai.dev/bonsai/store"
)

// customResources is the part of the resource table that comes from
// CustomResourceDefinitions. It follows the CRDs in the store through a
// watch, so a CRD is served, listed in discovery and described in OpenAPI
// as soon as its names are accepted, and stops being served when it goes,
// without a restart.
type customResources struct {
	mu sync.RWMutex
	// reg indexes the served versions of every CRD whose names are
	// accepted; it is replaced, never changed.
	reg *resourceIndex
	// crds are the CRDs as last read from the store, by name, with the
	// table entries built from each (built once per resourceVersion:
	// compiling schemas and CEL rules is the expensive part).
	crds map[string]*crdEntry
	// synced is set once the CRDs stored at start are served.
	synced atomic.Bool
}

type crdEntry struct {
	crd       *apiextensionsv1.CustomResourceDefinition
	rv        string
	resources []*resource
}

// stop ends the watches of the entry's resources.
func (e *crdEntry) stop() {
	for _, r := range e.resources {
		close(r.custom.gone)
	}
}

// servingChanged: what upstream rebuilds a CRD's serving for (its spec,
// its accepted names), plus whether it is served and terminating.
func servingChanged(a, b *apiextensionsv1.CustomResourceDefinition) bool {
	return !apiequality.Semantic.DeepEqual(a.Spec, b.Spec) ||
		!apiequality.Semantic.DeepEqual(a.Status.AcceptedNames, b.Status.AcceptedNames) ||
		servable(a) != servable(b) || (a.DeletionTimestamp == nil) != (b.DeletionTimestamp == nil)
}

func newCustomResources() *customResources {
	return &customResources{reg: newRegistry(nil), crds: map[string]*crdEntry{}}
}

func (c *customResources) index() *resourceIndex {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.reg
}

// crd returns the CRD named name as last seen, if any.
func (c *customResources) crd(name string) (*apiextensionsv1.CustomResourceDefinition, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.crds[name]
	if !ok {
		return nil, false
	}
	return e.crd, true
}

// all returns every CRD as last seen.
func (c *customResources) all() []*apiextensionsv1.CustomResourceDefinition {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(c.crds))
	for _, e := range c.crds {
		out = append(out, e.crd)
	}
	return out
}

// servable: upstream serves a CRD once its names are accepted (or it was
// established before a later names conflict).
func servable(crd *apiextensionsv1.CustomResourceDefinition) bool {
	return apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.NamesAccepted) || apihelpers.IsCRDConditionTrue(crd, apiextensionsv1.Established)
}

// set records crd (nil: deleted) and rebuilds the table.
func (s *Server) setCRD(name string, crd *apiextensionsv1.CustomResourceDefinition) {
	c := s.crs
	c.mu.Lock()
	old, had := c.crds[name]
	switch {
	case crd == nil:
		delete(c.crds, name)
		if had {
			old.stop()
		}
	case had && revisionOf(old.rv) >= revisionOf(crd.ResourceVersion):
		// Seen already (noteCRD may run ahead of the watch).
	case had && !servingChanged(old.crd, crd):
		// Conditions moved: what is served is the same, and so are
		// its open watches.
		c.crds[name] = &crdEntry{crd: crd, rv: crd.ResourceVersion, resources: old.resources}
	default:
		e := &crdEntry{crd: crd, rv: crd.ResourceVersion}
		if servable(crd) {
			rs, err := customResourcesOf(s, crd)
			if err != nil {
				s.log.Warn("custom resource not served", "crd", name, "err", err)
			}
			e.resources = rs
		}
		c.crds[name] = e
		if had {
			old.stop()
		}
	}
	var all []*resource
	for _, e := range c.crds {
		all = append(all, e.resources...)
	}
	// Groups by name; in a group, versions by Kubernetes' version
	// priority (v2 > v1 > v1beta1 > v1alpha1), as upstream lists them.
	sort.Slice(all, func(i, j int) bool {
		a, b := all[i].gvr, all[j].gvr
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		if a.Version != b.Version {
			return version.CompareKubeAwareVersionStrings(a.Version, b.Version) > 0
		}
		return a.Resource < b.Resource
	})
	c.reg = newRegistry(all)
	c.mu.Unlock()
	s.openapi.Invalidate()
	// CRD group versions have APIServices of their own.
	s.aggregator.Wake()
}

// noteCRD records a CRD this server just wrote, ahead of its watch event,
// so that the naming of the next CRD sees its accepted names. Only a CRD
// known and older is replaced: the watch has the last word on deletions.
func (s *Server) noteCRD(crd *apiextensionsv1.CustomResourceDefinition) {
	s.crs.mu.RLock()
	e, ok := s.crs.crds[crd.Name]
	s.crs.mu.RUnlock()
	if ok && revisionOf(e.rv) < revisionOf(crd.ResourceVersion) {
		s.setCRD(crd.Name, crd)
	}
}

func revisionOf(rv string) uint64 {
	n, _ := strconv.ParseUint(rv, 10, 64)
	return n
}

// runCustomResources lists and then watches the CRDs until ctx ends,
// re-listing whenever the watch ends, keeping the custom part of the table
// and the CRD controller's queue up to date.
func (s *Server) runCustomResources(ctx context.Context) {
	res := s.reg.byGVR[crdGVR]
	prefix := res.prefix("")
	name := func(key string) string { return strings.TrimPrefix(key, prefix) }
	decode := func(kv store.KeyValue) *apiextensionsv1.CustomResourceDefinition {
		obj, err := decodeStored(res, kv)
		if err != nil {
			s.log.Warn("undecodable CustomResourceDefinition", "key", kv.Key, "err", err)
			return nil
		}
		return obj.(*apiextensionsv1.CustomResourceDefinition)
	}
	for ctx.Err() == nil {
		l, err := s.cfg.Store.List(ctx, prefix, store.ListOptions{})
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		seen := map[string]bool{}
		for _, kv := range l.Items {
			if crd := decode(kv); crd != nil {
				seen[crd.Name] = true
				s.setCRD(crd.Name, crd)
				s.crdController.enqueue(crd.Name)
			}
		}
		for _, crd := range s.crs.all() {
			if !seen[crd.Name] {
				s.setCRD(crd.Name, nil)
			}
		}
		s.crs.synced.Store(true)
		s.aggregator.Wake()
		w, err := s.cfg.Store.Watch(ctx, prefix, l.Revision)
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for ev := range w.Events() {
			n := name(ev.Key)
			if ev.Type == store.Deleted {
				s.setCRD(n, nil)
			} else if crd := decode(store.KeyValue{Key: ev.Key, Value: ev.Value, Revision: ev.Revision}); crd != nil {
				s.setCRD(n, crd)
			}
			s.crdController.enqueue(n)
		}
		w.Stop()
	}
}

var crdGVR = gvr("apiextensions.k8s.io", "v1", "customresourcedefinitions")

// lookup finds the table entry of a group version resource: built-in
// first (a CRD cannot claim a built-in group), then custom.
func (s *Server) lookup(g schema.GroupVersionResource) *resource {
	if r := s.reg.byGVR[g]; r != nil {
		return r
	}
	return s.crs.index().byGVR[g]
}

// registries are the built-in table and the current custom one, in
// discovery order.
func (s *Server) registries() []*resourceIndex { return []*resourceIndex{s.reg, s.crs.index()} }

// groups lists every served group, built-in ones first.
func (s *Server) groups() []apiGroup {
	var out []apiGroup
	for _, reg := range s.registries() {
		out = append(out, reg.groups...)
	}
	return out
}

func (s *Server) group(name string) (apiGroup, bool) {
	for _, reg := range s.registries() {
		if g, ok := reg.group(name); ok {
			return g, true
		}
	}
	return apiGroup{}, false
}

func (s *Server) resourcesIn(gv schema.GroupVersion) []*resource {
	if _, ok := s.reg.group(gv.Group); ok {
		return s.reg.resourcesIn(gv)
	}
	return s.crs.index().resourcesIn(gv)
}
