package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/typed/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"

	"bonsai.dev/bonsai/apiserver/apiextensions"
	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/store"
)

// CustomResourceDefinitions and what serving their versions takes live
// in apiserver/apiextensions, which reaches the server only through
// apiextensions.Env and apiextensions.Server. This file is the server's
// side of that line, and stays here because it is the server's resource
// table: the custom part of it, kept from a watch of the CRDs (each
// served version an entry the generic handlers serve like any other, with
// its apiextensions.Version), the lookups over built-in and custom
// entries, the CRD controller's apiextensions.Server, and the request
// checks of custom objects the generic handlers make.

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
		r.custom.Stop()
	}
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
	case had && !apiextensions.ServingChanged(old.crd, crd):
		// Conditions moved: what is served is the same, and so are
		// its open watches.
		c.crds[name] = &crdEntry{crd: crd, rv: crd.ResourceVersion, resources: old.resources}
	default:
		e := &crdEntry{crd: crd, rv: crd.ResourceVersion}
		if apiextensions.Servable(crd) {
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
	res := s.reg.byGVR[apiextensions.GVR]
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
				s.crdController.Enqueue(crd.Name)
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
			s.crdController.Enqueue(n)
		}
		w.Stop()
	}
}

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

// customResourcesOf builds the table entries of crd's served versions.
func customResourcesOf(s *Server, crd *apiextensionsv1.CustomResourceDefinition) ([]*resource, error) {
	rs, err := apiextensions.Resources(apiextensions.Env{Ctx: s.ctx, Service: s.service}, crd)
	if err != nil {
		return nil, err
	}
	out := make([]*resource, len(rs))
	for i := range rs {
		out[i] = newResource(&rs[i].Kind)
		out[i].custom = rs[i].Version
	}
	return out, nil
}

// storageResource is a table entry for a CRD's stored objects, served or
// not: what the finalizer lists and deletes.
func storageResource(s *Server, crd *apiextensionsv1.CustomResourceDefinition) (*resource, error) {
	cp := crd.DeepCopy()
	for i := range cp.Spec.Versions {
		cp.Spec.Versions[i].Served = cp.Spec.Versions[i].Storage
	}
	rs, err := customResourcesOf(s, cp)
	if err != nil {
		return nil, err
	}
	if len(rs) == 0 {
		return nil, fmt.Errorf("%s has no storage version", crd.Name)
	}
	newRegistry(rs)
	return rs[0], nil
}

// apiserverUser is the API server's identity for its own writes (upstream's
// loopback client).
var apiserverUser = &authn.User{Name: "system:apiserver", Groups: []string{authn.GroupMasters}}

// newCRDController makes the controller of the CRDs' status, writing as
// the API server itself.
func (s *Server) newCRDController() *apiextensions.Controller {
	return apiextensions.NewController(crdServer{s}, crdclient.NewForConfigOrDie(s.ClientConfig(apiserverUser)), s.log)
}

// crdServer is the server as the CRD controller sees it.
type crdServer struct{ s *Server }

func (c crdServer) CRD(ctx context.Context, name string) (*apiextensionsv1.CustomResourceDefinition, error) {
	obj, _, err := c.s.getObject(ctx, c.s.reg.byGVR[apiextensions.GVR], "", name)
	if err != nil {
		return nil, err
	}
	return obj.(*apiextensionsv1.CustomResourceDefinition), nil
}

func (c crdServer) CRDs() []*apiextensionsv1.CustomResourceDefinition { return c.s.crs.all() }

func (c crdServer) NoteCRD(crd *apiextensionsv1.CustomResourceDefinition) { c.s.noteCRD(crd) }

func (c crdServer) Storage(crd *apiextensionsv1.CustomResourceDefinition) (apiextensions.Storage, error) {
	res, err := storageResource(c.s, crd)
	if err != nil {
		return nil, err
	}
	return crdStorage{c.s, res}, nil
}

// crdStorage is a CRD's stored objects, through the generic handlers'
// list and delete.
type crdStorage struct {
	s   *Server
	res *resource
}

func (c crdStorage) List(ctx context.Context, limit int64) ([]runtime.Object, error) {
	items, _, err := c.s.listObjects(ctx, c.res, "", listOptions{limit: limit})
	return items, err
}

func (c crdStorage) Delete(ctx context.Context, namespace, name string) error {
	_, _, err := c.s.deleteObject(ctx, c.res, namespace, name, &metav1.DeleteOptions{})
	return err
}

// customTerminating refuses new objects of a CRD being deleted, as
// upstream does.
func customTerminating(res *resource, verb string) error {
	if res.custom == nil || !res.custom.Terminating() {
		return nil
	}
	err := apierrors.NewMethodNotSupported(qualified(res), verb)
	err.ErrStatus.Message = fmt.Sprintf("%s not allowed while custom resource definition is terminating", verb)
	return err
}

// checkCustomFields reports and drops the unknown fields of a decoded
// custom object (a no-op for built-in kinds, whose decoder does that).
func checkCustomFields(w http.ResponseWriter, res *resource, obj runtime.Object, fv fieldValidation) error {
	u, ok := obj.(*unstructured.Unstructured)
	if res.custom == nil || !ok {
		return nil
	}
	msgs, err := res.custom.PruneUnknown(u, fv != validationIgnore)
	if err != nil {
		return err
	}
	return reportStrict(w, msgs, fv)
}
