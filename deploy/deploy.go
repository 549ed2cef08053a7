package deploy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/yaml"

	"bonsai.dev/bonsai/client"
)

const (
	// FieldManager owns the fields the directory's files set.
	FieldManager = "bonsai-deploy"
	// LabelManifest marks every object a file made, and its Addon, with
	// the Addon's name: `kubectl get all -l bonsai.dev/manifest=NAME`.
	LabelManifest = "bonsai.dev/manifest"
	// AnnotationSource is the path of the file an object came from.
	AnnotationSource = "bonsai.dev/manifest-source"
	// Namespace holds the Addons, and the namespaced objects of a file
	// that name no namespace, as in k3s.
	Namespace = metav1.NamespaceSystem
	// DefaultInterval is how often the directory is read.
	DefaultInterval = 2 * time.Second
)

var addonGVR = schema.GroupVersionResource{Group: "k3s.cattle.io", Version: "v1", Resource: "addons"}

// addonCRD is k3s's Addon kind: one per file, spec.source its path and
// spec.checksum the sha256 of its content. status.objects lists what
// was applied, so that a file's removal deletes exactly that.
const addonCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: addons.k3s.cattle.io
  labels: {app.kubernetes.io/managed-by: bonsai}
spec:
  group: k3s.cattle.io
  scope: Namespaced
  names: {kind: Addon, listKind: AddonList, plural: addons, singular: addon}
  versions:
  - name: v1
    served: true
    storage: true
    additionalPrinterColumns:
    - {name: Source, type: string, jsonPath: .spec.source}
    - {name: Checksum, type: string, jsonPath: .spec.checksum, priority: 1}
    - {name: Error, type: string, jsonPath: .status.error}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              source: {type: string}
              checksum: {type: string}
          status:
            type: object
            x-kubernetes-preserve-unknown-fields: true
`

// Config is a Controller's.
type Config struct {
	// RESTConfig must be allowed everything (system:masters): the
	// files may hold any kind.
	RESTConfig *rest.Config
	Dir        string
	// Disabled names files (without extension) not to deploy; what they
	// deployed before is deleted, as k3s's --disable does.
	Disabled []string
	// Interval between reads of Dir; DefaultInterval if 0.
	Interval time.Duration
	Logger   *slog.Logger
}

// Controller deploys Config.Dir.
type Controller struct {
	cfg    Config
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
	events record.EventRecorder
	log    *slog.Logger
	files  map[string]*fileState // by Addon name
	// clashes are files ignored for another's Addon name, said once.
	clashes map[string]string
}

// ref is one applied object, as recorded in its Addon's status.
type ref struct {
	Group     string `json:"group,omitempty"`
	Version   string `json:"version"`
	Resource  string `json:"resource"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

func (r ref) gvr() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource}
}

func (r ref) String() string {
	if r.Namespace == "" {
		return r.Kind + " " + r.Name
	}
	return r.Kind + " " + r.Namespace + "/" + r.Name
}

// fileState is what the controller last did with one file.
type fileState struct {
	path  string
	sum   string
	mtime time.Time
	size  int64
	done  bool // applied, or refused for good, at sum
	// failures since the last success or change; the next try is at
	// retryAt.
	failures int
	retryAt  time.Time
	objects  []ref
	lastErr  string
}

// New checks cfg.
func New(cfg Config) (*Controller, error) {
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	dyn, err := dynamic.NewForConfig(cfg.RESTConfig)
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg.RESTConfig)
	if err != nil {
		return nil, err
	}
	return &Controller{
		cfg: cfg, dyn: dyn, log: cfg.Logger.With("component", "deploy", "dir", cfg.Dir),
		mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)),
		files:  map[string]*fileState{}, clashes: map[string]string{},
	}, nil
}

// Run reads the directory every Interval until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	core, err := client.Core(c.cfg.RESTConfig)
	if err != nil {
		return err
	}
	c.events = client.NewRecorder(ctx, core, FieldManager)
	if err := c.ensureAddonKind(ctx); err != nil {
		return err
	}
	if err := c.loadAddons(ctx); err != nil {
		return err
	}
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		c.sync(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// ensureAddonKind applies the Addon CRD and waits until it is served.
func (c *Controller) ensureAddonKind(ctx context.Context) error {
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(addonCRD), &u.Object); err != nil {
		return err
	}
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	for {
		_, err := c.dyn.Resource(crds).Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
		if err == nil {
			_, err = c.dyn.Resource(addonGVR).Namespace(Namespace).List(ctx, metav1.ListOptions{Limit: 1})
		}
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// loadAddons reads what earlier runs applied, so that a file removed
// while bonsai was stopped has its objects deleted now.
func (c *Controller) loadAddons(ctx context.Context) error {
	l, err := c.dyn.Resource(addonGVR).Namespace(Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelManifest})
	if err != nil {
		return fmt.Errorf("list addons: %w", err)
	}
	for _, a := range l.Items {
		src, _, _ := unstructured.NestedString(a.Object, "spec", "source")
		st := &fileState{path: src}
		if objs, ok, _ := unstructured.NestedSlice(a.Object, "status", "objects"); ok {
			for _, o := range objs {
				var r ref
				if m, ok := o.(map[string]any); ok && runtime.DefaultUnstructuredConverter.FromUnstructured(m, &r) == nil {
					st.objects = append(st.objects, r)
				}
			}
		}
		c.files[a.GetName()] = st
	}
	return nil
}

// sync brings the cluster to the directory: changed files applied,
// removed (or disabled) files' objects deleted.
func (c *Controller) sync(ctx context.Context) {
	ents, err := os.ReadDir(c.cfg.Dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		c.log.Error("cannot read the manifests directory", "err", err)
		return // a passing fault must not delete everything
	}
	present := map[string]bool{}
	names := map[string]bool{}
	for _, e := range ents {
		names[e.Name()] = true
	}
	for _, e := range ents {
		if e.IsDir() || !manifestFile(e.Name()) {
			continue
		}
		name := AddonName(e.Name())
		path := filepath.Join(c.cfg.Dir, e.Name())
		if slices.Contains(c.cfg.Disabled, name) {
			continue
		}
		if present[name] {
			// a.yaml and a.json, or A.yaml and a.yaml: one Addon
			// cannot record both.
			if c.clashes[path] != name {
				c.log.Error("a manifest is ignored: another file of the directory has its name", "file", path, "addon", name)
				c.clashes[path] = name
			}
			continue
		}
		delete(c.clashes, path)
		present[name] = true
		if names[e.Name()+".skip"] {
			continue // left as it is, applied or not
		}
		c.syncFile(ctx, name, path)
	}
	for name, st := range c.files {
		if !present[name] {
			c.remove(ctx, name, st)
		}
	}
}

// AddonName is the Addon of file base: the name without extension, as
// k3s's, made a valid object name.
func AddonName(base string) string {
	n := strings.ToLower(strings.TrimSuffix(base, filepath.Ext(base)))
	n = invalidName.ReplaceAllString(n, "-")
	n = strings.Trim(n, "-.")
	if n == "" {
		n = "manifest"
	}
	if len(n) > 253 {
		n = n[:253]
	}
	return n
}

var invalidName = regexp.MustCompile(`[^a-z0-9.-]+`)

// labelValue is LabelManifest's value for an Addon: its name if that is
// a valid label value, else a shortened name with a hash.
func labelValue(addon string) string {
	if len(addon) <= 63 && !strings.Contains(addon, ".") {
		return addon
	}
	sum := sha256.Sum256([]byte(addon))
	p := strings.ReplaceAll(addon, ".", "-")
	if len(p) > 50 {
		p = p[:50]
	}
	return strings.Trim(p, "-") + "-" + hex.EncodeToString(sum[:])[:12]
}

func (c *Controller) syncFile(ctx context.Context, name, path string) {
	st := c.files[name]
	if st == nil {
		st = &fileState{}
		c.files[name] = st
	}
	fi, err := os.Stat(path)
	if err != nil {
		return // gone since the listing: the next pass deletes
	}
	// Done, or failed and waiting for its next try: read again only
	// when the file may have changed.
	waiting := st.done || time.Now().Before(st.retryAt)
	if waiting && st.path == path && fi.ModTime().Equal(st.mtime) && fi.Size() == st.size {
		return
	}
	data, err := os.ReadFile(path)
	if err != nil {
		c.log.Error("cannot read a manifest", "file", path, "err", err)
		return
	}
	h := sha256.Sum256(data)
	sum := hex.EncodeToString(h[:])
	st.mtime, st.size = fi.ModTime(), fi.Size()
	if st.path == path && sum == st.sum {
		if waiting {
			return
		}
	} else {
		st.failures = 0
	}
	st.path, st.sum = path, sum
	start := time.Now()
	applied, err := c.apply(ctx, name, path, data, st)
	var pe *parseError
	switch {
	case err == nil:
		st.done, st.failures = true, 0
	case errors.As(err, &pe):
		// Nothing to try again until the file changes, or the next start.
		st.done = true
	default:
		// The API refused, or a kind is not served yet (a custom
		// resource before its CRD, a namespace another file makes):
		// tried again, sooner at first.
		st.done = false
		st.failures++
		st.retryAt = time.Now().Add(min(c.cfg.Interval<<min(st.failures-1, 8), maxRetry))
	}
	if err != nil && err.Error() == st.lastErr {
		return // as on the last try: nothing new to record or say
	}
	addon, aerr := c.writeAddon(ctx, name, st, err)
	if aerr != nil {
		c.log.Error("cannot record a manifest's Addon", "file", path, "addon", Namespace+"/"+name, "err", aerr)
	}
	var notServed *notServedError
	switch {
	case err == nil:
		st.lastErr = ""
		c.log.Info("applied a manifest", "file", path, "objects", applied, "took", time.Since(start).Round(time.Millisecond))
		if addon != nil {
			c.events.Eventf(addon, corev1.EventTypeNormal, "AppliedManifest", "applied %s: %d objects", filepath.Base(path), applied)
		}
	case errors.As(err, &notServed):
		st.lastErr = err.Error()
		c.log.Info("a manifest's kind is not served yet; trying again", "file", path, "err", err)
	default:
		st.lastErr = err.Error()
		c.log.Warn("cannot apply a manifest", "file", path, "err", err)
		if addon != nil {
			// k3s's reasons, for what watches its Addons' events.
			reason := "ApplyManifestFailed"
			if errors.As(err, &pe) {
				reason = "ParseManifestFailed"
			}
			c.events.Event(addon, corev1.EventTypeWarning, reason, err.Error())
		}
	}
}

// maxRetry bounds the wait before a failed file is tried again.
const maxRetry = 2 * time.Minute

// parseError is a file that does not decode: nothing of it is applied.
type parseError struct{ err error }

func (e *parseError) Error() string { return e.err.Error() }

type notServedError struct{ err error }

func (e *notServedError) Error() string { return e.err.Error() }

// apply applies a file's objects; st.objects becomes what the file holds
// now (what it held before and no longer does is deleted). The error
// names file:line; the other objects are still applied.
func (c *Controller) apply(ctx context.Context, name, path string, data []byte, st *fileState) (int, error) {
	objs, err := decode(filepath.Base(path), data)
	if err != nil {
		return 0, &parseError{err} // nothing applied, nothing deleted
	}
	label := labelValue(name)
	var errs []error
	var now []ref
	applied := 0
	for _, o := range objs {
		u := o.obj
		at := fmt.Sprintf("%s:%d", filepath.Base(path), o.line)
		gvk := u.GroupVersionKind()
		m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) {
			c.mapper.Reset()
			m, err = c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		}
		if err != nil {
			if meta.IsNoMatchError(err) {
				err = &notServedError{fmt.Errorf("%s: kind %s of %s is not served", at, gvk.Kind, gvk.GroupVersion())}
			} else {
				err = fmt.Errorf("%s: %s %q: %v", at, gvk.Kind, u.GetName(), err)
			}
			errs = append(errs, err)
			// Kept: not deleted for being unknown for now.
			now = append(now, keepRefs(st.objects, gvk, u)...)
			continue
		}
		r := ref{Group: m.Resource.Group, Version: m.Resource.Version, Resource: m.Resource.Resource, Kind: gvk.Kind, Name: u.GetName()}
		res := dynamic.ResourceInterface(c.dyn.Resource(m.Resource))
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			if u.GetNamespace() == "" {
				u.SetNamespace(Namespace)
			}
			r.Namespace = u.GetNamespace()
			res = c.dyn.Resource(m.Resource).Namespace(r.Namespace)
		} else {
			u.SetNamespace("")
		}
		labels := u.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels[LabelManifest] = label
		u.SetLabels(labels)
		ann := u.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann[AnnotationSource] = path
		u.SetAnnotations(ann)
		now = append(now, r)
		if _, err := res.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
			errs = append(errs, fmt.Errorf("%s: apply %s: %v", at, r, err))
			continue
		}
		applied++
	}
	for _, old := range st.objects {
		if !slices.Contains(now, old) {
			c.deleteObject(ctx, name, old)
		}
	}
	st.objects = now
	if len(errs) == 0 {
		return applied, nil
	}
	// One not-served kind and nothing worse: tried again next pass.
	for _, e := range errs {
		var ns *notServedError
		if !errors.As(e, &ns) {
			return applied, errors.Join(errs...)
		}
	}
	return applied, &notServedError{errors.Join(errs...)}
}

// keepRefs are the refs of st that name u, whose kind is not served now.
func keepRefs(refs []ref, gvk schema.GroupVersionKind, u *unstructured.Unstructured) []ref {
	var out []ref
	for _, r := range refs {
		if r.Group == gvk.Group && r.Kind == gvk.Kind && r.Name == u.GetName() {
			out = append(out, r)
		}
	}
	return out
}

// deleteObject deletes one object a file made, if it still carries the
// file's label: one a user has taken over (label removed) stays.
func (c *Controller) deleteObject(ctx context.Context, addon string, r ref) {
	res := dynamic.ResourceInterface(c.dyn.Resource(r.gvr()))
	if r.Namespace != "" {
		res = c.dyn.Resource(r.gvr()).Namespace(r.Namespace)
	}
	cur, err := res.Get(ctx, r.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return
	}
	if err != nil {
		c.log.Warn("cannot delete an object of a removed manifest", "object", r.String(), "err", err)
		return
	}
	if cur.GetLabels()[LabelManifest] != labelValue(addon) {
		return
	}
	uid := cur.GetUID()
	bg := metav1.DeletePropagationBackground
	err = res.Delete(ctx, r.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}, PropagationPolicy: &bg})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		c.log.Warn("cannot delete an object of a removed manifest", "object", r.String(), "err", err)
		return
	}
	c.log.Info("deleted an object of a removed manifest", "object", r.String(), "addon", addon)
}

// remove deletes what a removed or disabled file made, then its Addon.
func (c *Controller) remove(ctx context.Context, name string, st *fileState) {
	for _, r := range slices.Backward(st.objects) {
		c.deleteObject(ctx, name, r)
	}
	err := c.dyn.Resource(addonGVR).Namespace(Namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		c.log.Warn("cannot delete a removed manifest's Addon", "addon", Namespace+"/"+name, "err", err)
		return // tried again next pass
	}
	c.log.Info("deleted a removed manifest's objects", "file", st.path, "objects", len(st.objects))
	delete(c.files, name)
}

// writeAddon records a file's state in its Addon.
func (c *Controller) writeAddon(ctx context.Context, name string, st *fileState, applyErr error) (*unstructured.Unstructured, error) {
	objs := make([]any, 0, len(st.objects))
	for _, r := range st.objects {
		m := map[string]any{"version": r.Version, "resource": r.Resource, "kind": r.Kind, "name": r.Name}
		if r.Group != "" {
			m["group"] = r.Group
		}
		if r.Namespace != "" {
			m["namespace"] = r.Namespace
		}
		objs = append(objs, m)
	}
	status := map[string]any{"objects": objs}
	if applyErr != nil {
		status["error"] = applyErr.Error()
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "k3s.cattle.io/v1", "kind": "Addon",
		"metadata": map[string]any{
			"name": name, "namespace": Namespace,
			"labels": map[string]any{LabelManifest: labelValue(name)},
		},
		"spec":   map[string]any{"source": st.path, "checksum": st.sum},
		"status": status,
	}}
	return c.dyn.Resource(addonGVR).Namespace(Namespace).Apply(ctx, name, u, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
}
