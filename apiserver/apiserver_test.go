package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"k8s.io/client-go/kubernetes/scheme"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/apiserver/registry/core"
	"bonsai.dev/bonsai/store"
)

type testEnv struct {
	s     *Server
	st    store.Store
	cs    *kubernetes.Clientset
	dyn   *dynamic.DynamicClient
	cfg   *rest.Config
	ctx   context.Context
	close func()
}

// newTestServer is a server over a fresh badger store, both closed when
// the test or benchmark ends.
// protobufRaw reads the frames of protobuf watch streams: WatchEvents
// without the envelope (protobufFrameHead starts them), their objects with it.
var protobufRaw = protobuf.NewRawSerializer(scheme.Scheme, scheme.Scheme)

func newTestServer(tb testing.TB) (*Server, store.Store) {
	tb.Helper()
	st, err := store.OpenBadger(store.BadgerOptions{Dir: tb.TempDir()})
	if err != nil {
		tb.Fatal(err)
	}
	s, _ := newServerOn(tb, st, Config{})
	return s, st
}

// newServerOn starts a server on st (closed with it) with cfg's other
// settings, and an admin clientset of it.
func newServerOn(tb testing.TB, st store.Store, cfg Config) (*Server, *kubernetes.Clientset) {
	tb.Helper()
	cfg.Store, cfg.AdvertiseAddress, cfg.SecurePort = st, netip.MustParseAddr("127.0.0.1"), 6443
	s, err := New(cfg)
	if err != nil {
		st.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Shutdown(); st.Close() })
	return s, kubernetes.NewForConfigOrDie(s.ClientConfig(&authn.User{Name: "test-admin", Groups: []string{authn.GroupMasters}}))
}

func newTestEnv(t *testing.T) *testEnv {
	t.Helper()
	s, st := newTestServer(t)
	cfg := s.ClientConfig(&authn.User{Name: "test-admin", Groups: []string{authn.GroupMasters}})
	cs := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	env := &testEnv{s: s, st: st, cs: cs, dyn: dyn, cfg: cfg, ctx: ctx}
	t.Cleanup(cancel)
	return env
}

func cm(name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}
}

func TestBootstrapObjects(t *testing.T) {
	e := newTestEnv(t)
	for _, ns := range systemNamespaces {
		got, err := e.cs.CoreV1().Namespaces().Get(e.ctx, ns, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Phase != corev1.NamespaceActive || got.Labels[core.NamespaceNameLabel] != ns {
			t.Errorf("namespace %s: phase %q labels %v", ns, got.Status.Phase, got.Labels)
		}
	}
	svc, err := e.cs.CoreV1().Services("default").Get(e.ctx, "kubernetes", metav1.GetOptions{})
	if err != nil || svc.Spec.ClusterIP != "10.43.0.1" {
		t.Fatalf("kubernetes service: %v %v", svc, err)
	}
	ep, err := e.cs.CoreV1().Endpoints("default").Get(e.ctx, "kubernetes", metav1.GetOptions{})
	if err != nil || ep.Subsets[0].Addresses[0].IP != "127.0.0.1" || ep.Subsets[0].Ports[0].Port != 6443 {
		t.Fatalf("kubernetes endpoints: %+v %v", ep, err)
	}
	if _, err := e.cs.DiscoveryV1().EndpointSlices("default").Get(e.ctx, "kubernetes", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	pc, err := e.cs.SchedulingV1().PriorityClasses().Get(e.ctx, "system-node-critical", metav1.GetOptions{})
	if err != nil || pc.Value != 2000001000 {
		t.Fatalf("priority class: %+v %v", pc, err)
	}
}

func TestCRUDAndErrors(t *testing.T) {
	e := newTestEnv(t)
	cms := e.cs.CoreV1().ConfigMaps("default")
	c, err := cms.Create(e.ctx, cm("a", map[string]string{"k": "v"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.UID == "" || c.ResourceVersion == "" || c.CreationTimestamp.IsZero() || len(c.ManagedFields) == 0 {
		t.Fatalf("create did not set system fields: %+v", c.ObjectMeta)
	}
	if _, err := cms.Create(e.ctx, cm("a", nil), metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("second create: %v", err)
	}
	if _, err := cms.Get(e.ctx, "missing", metav1.GetOptions{}); !apierrors.IsNotFound(err) || err.Error() != `configmaps "missing" not found` {
		t.Fatalf("get missing: %v", err)
	}
	stale := c.DeepCopy()
	c.Data["k"] = "v2"
	c2, err := cms.Update(e.ctx, c, metav1.UpdateOptions{})
	if err != nil || c2.ResourceVersion == c.ResourceVersion {
		t.Fatalf("update: %v", err)
	}
	stale.Data["k"] = "v3"
	if _, err := cms.Update(e.ctx, stale, metav1.UpdateOptions{}); !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "the object has been modified") {
		t.Fatalf("stale update: %v", err)
	}
	// A no-op update keeps the resourceVersion.
	c3, err := cms.Update(e.ctx, c2, metav1.UpdateOptions{})
	if err != nil || c3.ResourceVersion != c2.ResourceVersion {
		t.Fatalf("no-op update changed rv %s -> %s (%v)", c2.ResourceVersion, c3.ResourceVersion, err)
	}
	// generateName.
	g, err := cms.Create(e.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "gen-"}}, metav1.CreateOptions{})
	if err != nil || !strings.HasPrefix(g.Name, "gen-") || len(g.Name) != len("gen-")+5 {
		t.Fatalf("generateName: %q %v", g.Name, err)
	}
	// Invalid names: 422 with a cause on metadata.name.
	_, err = cms.Create(e.ctx, cm("Not_Valid", nil), metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) {
		t.Fatalf("invalid name: %v", err)
	}
	if st := err.(apierrors.APIStatus).Status(); len(st.Details.Causes) != 1 || st.Details.Causes[0].Field != "metadata.name" {
		t.Fatalf("invalid name causes: %+v", st.Details)
	}
	// Missing and terminating namespaces.
	if _, err := e.cs.CoreV1().ConfigMaps("nope").Create(e.ctx, cm("x", nil), metav1.CreateOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("create in missing namespace: %v", err)
	}
	// Delete.
	if err := cms.Delete(e.ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(e.ctx, "a", metav1.DeleteOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("second delete: %v", err)
	}
	// Dry run stores nothing.
	if _, err := cms.Create(e.ctx, cm("dry", nil), metav1.CreateOptions{DryRun: []string{"All"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Get(e.ctx, "dry", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("dry-run create was stored: %v", err)
	}
}

func TestFinalizersAndTerminatingNamespace(t *testing.T) {
	e := newTestEnv(t)
	cms := e.cs.CoreV1().ConfigMaps("default")
	c := cm("f", nil)
	c.Finalizers = []string{"example.com/hold"}
	if _, err := cms.Create(e.ctx, c, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(e.ctx, "f", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := cms.Get(e.ctx, "f", metav1.GetOptions{})
	if err != nil || got.DeletionTimestamp == nil {
		t.Fatalf("object with a finalizer after delete: %+v %v", got, err)
	}
	got.Finalizers = nil
	if _, err := cms.Update(e.ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Get(e.ctx, "f", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("object still there after its last finalizer went: %v", err)
	}

	if _, err := e.cs.CoreV1().Namespaces().Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.cs.CoreV1().Namespaces().Delete(e.ctx, "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ns, _ := e.cs.CoreV1().Namespaces().Get(e.ctx, "doomed", metav1.GetOptions{})
	if ns.Status.Phase != corev1.NamespaceTerminating {
		t.Fatalf("deleted namespace phase %q", ns.Status.Phase)
	}
	_, err = e.cs.CoreV1().ConfigMaps("doomed").Create(e.ctx, cm("x", nil), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "because it is being terminated") || !apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		t.Fatalf("create in a terminating namespace: %v", err)
	}
}

func TestPatchTypes(t *testing.T) {
	e := newTestEnv(t)
	deps := e.cs.AppsV1().Deployments("default")
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"app": "web"}},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36", Env: []corev1.EnvVar{{Name: "A", Value: "1"}}}}},
			},
		},
	}
	created, err := deps.Create(e.ctx, d, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.Generation != 1 || *created.Spec.Replicas != 1 || created.Spec.Strategy.RollingUpdate.MaxSurge.StrVal != "25%" || *created.Spec.RevisionHistoryLimit != 10 || *created.Spec.ProgressDeadlineSeconds != 600 {
		t.Fatalf("deployment defaults: gen %d spec %+v", created.Generation, created.Spec)
	}
	if c := created.Spec.Template.Spec.Containers[0]; c.ImagePullPolicy != corev1.PullIfNotPresent || c.TerminationMessagePath != "/dev/termination-log" {
		t.Fatalf("container defaults: %+v", c)
	}
	// JSON patch.
	p, err := deps.Patch(e.ctx, "web", types.JSONPatchType, []byte(`[{"op":"replace","path":"/spec/replicas","value":3}]`), metav1.PatchOptions{})
	if err != nil || *p.Spec.Replicas != 3 || p.Generation != 2 {
		t.Fatalf("json patch: %v gen %d", err, p.Generation)
	}
	// Merge patch of labels does not bump generation.
	p, err = deps.Patch(e.ctx, "web", types.MergePatchType, []byte(`{"metadata":{"labels":{"tier":"front"}}}`), metav1.PatchOptions{})
	if err != nil || p.Labels["tier"] != "front" || p.Generation != 2 {
		t.Fatalf("merge patch: %v %v gen %d", err, p.Labels, p.Generation)
	}
	// Strategic merge patch merges containers by name.
	p, err = deps.Patch(e.ctx, "web", types.StrategicMergePatchType, []byte(`{"spec":{"template":{"spec":{"containers":[{"name":"c","env":[{"name":"B","value":"2"}]}]}}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if env := p.Spec.Template.Spec.Containers[0].Env; len(env) != 2 || p.Spec.Template.Spec.Containers[0].Image != "busybox:1.36" {
		t.Fatalf("strategic merge patch: %+v", p.Spec.Template.Spec.Containers)
	}
	// A bad JSON patch is 422 or 400, never a 500.
	_, err = deps.Patch(e.ctx, "web", types.JSONPatchType, []byte(`[{"op":"replace","path":"/spec/nope/x","value":3}]`), metav1.PatchOptions{})
	if st, ok := err.(apierrors.APIStatus); !ok || st.Status().Code >= 500 || st.Status().Code < 400 {
		t.Fatalf("bad json patch: %v", err)
	}
	// Selector is immutable.
	_, err = deps.Patch(e.ctx, "web", types.MergePatchType, []byte(`{"spec":{"selector":{"matchLabels":{"app":"other"}},"template":{"metadata":{"labels":{"app":"other"}}}}}`), metav1.PatchOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "field is immutable") {
		t.Fatalf("selector change: %v", err)
	}
	// Scale subresource.
	sc, err := deps.GetScale(e.ctx, "web", metav1.GetOptions{})
	if err != nil || sc.Spec.Replicas != 3 || sc.Status.Selector != "app=web" {
		t.Fatalf("get scale: %+v %v", sc, err)
	}
	sc.Spec.Replicas = 5
	if _, err := deps.UpdateScale(e.ctx, "web", sc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := deps.Get(e.ctx, "web", metav1.GetOptions{}); *got.Spec.Replicas != 5 {
		t.Fatalf("replicas after scale: %d", *got.Spec.Replicas)
	}
	// Status subresource: status changes, spec does not.
	got, _ := deps.Get(e.ctx, "web", metav1.GetOptions{})
	got.Status.ReadyReplicas = 2
	got.Spec.Replicas = ptrTo[int32](9)
	st, err := deps.UpdateStatus(e.ctx, got, metav1.UpdateOptions{})
	if err != nil || st.Status.ReadyReplicas != 2 || *st.Spec.Replicas != 5 {
		t.Fatalf("status update: %v ready %d replicas %d", err, st.Status.ReadyReplicas, *st.Spec.Replicas)
	}
	// And the main resource ignores status.
	st.Status.ReadyReplicas = 0
	main, err := deps.Update(e.ctx, st, metav1.UpdateOptions{})
	if err != nil || main.Status.ReadyReplicas != 2 {
		t.Fatalf("main update touched status: %v %d", err, main.Status.ReadyReplicas)
	}
}

func TestServerSideApply(t *testing.T) {
	e := newTestEnv(t)
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	apply := func(manager string, data map[string]any, force bool) (*unstructured.Unstructured, error) {
		obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "ssa", "namespace": "default"}, "data": data}}
		return e.dyn.Resource(gvr).Namespace("default").Apply(e.ctx, "ssa", obj, metav1.ApplyOptions{FieldManager: manager, Force: force})
	}
	if _, err := apply("alice", map[string]any{"a": "1"}, false); err != nil {
		t.Fatal(err)
	}
	out, err := apply("bob", map[string]any{"b": "2"}, false)
	if err != nil {
		t.Fatal(err)
	}
	data, _, _ := unstructured.NestedStringMap(out.Object, "data")
	if diff := cmp.Diff(map[string]string{"a": "1", "b": "2"}, data); diff != "" {
		t.Fatalf("two managers' fields: %s", diff)
	}
	_, err = apply("bob", map[string]any{"a": "changed"}, false)
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "alice") {
		t.Fatalf("conflicting apply: %v", err)
	}
	out, err = apply("bob", map[string]any{"a": "changed"}, true)
	if err != nil {
		t.Fatal(err)
	}
	data, _, _ = unstructured.NestedStringMap(out.Object, "data")
	if data["a"] != "changed" {
		t.Fatalf("forced apply: %v", data)
	}
	// Applying the same again changes nothing.
	again, err := apply("bob", map[string]any{"a": "changed"}, true)
	if err != nil || again.GetResourceVersion() != out.GetResourceVersion() {
		t.Fatalf("idempotent apply changed rv %s -> %s (%v)", out.GetResourceVersion(), again.GetResourceVersion(), err)
	}
}

func TestSelectorsAndPaging(t *testing.T) {
	e := newTestEnv(t)
	cms := e.cs.CoreV1().ConfigMaps("default")
	for i := 0; i < 25; i++ {
		c := cm(fmt.Sprintf("cm-%02d", i), nil)
		c.Labels = map[string]string{"parity": []string{"even", "odd"}[i%2], "idx": fmt.Sprint(i)}
		if _, err := cms.Create(e.ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	count := func(opts metav1.ListOptions) int {
		t.Helper()
		l, err := cms.List(e.ctx, opts)
		if err != nil {
			t.Fatalf("list %+v: %v", opts, err)
		}
		return len(l.Items)
	}
	for sel, want := range map[string]int{
		"parity=even": 13, "parity!=even": 12, "parity in (odd)": 12, "parity notin (odd,even)": 0,
		"idx": 25, "!idx": 0, "parity=odd,idx in (1,3,5)": 3,
	} {
		if got := count(metav1.ListOptions{LabelSelector: sel}); got != want {
			t.Errorf("labelSelector %q: %d items, want %d", sel, got, want)
		}
	}
	if got := count(metav1.ListOptions{FieldSelector: "metadata.name=cm-03"}); got != 1 {
		t.Errorf("field selector by name: %d", got)
	}
	if _, err := cms.List(e.ctx, metav1.ListOptions{FieldSelector: "spec.nope=1"}); !apierrors.IsBadRequest(err) {
		t.Errorf("unsupported field selector: %v", err)
	}
	// Paging: 4 pages of 7, one revision, remainingItemCount counting down.
	var names []string
	opts := metav1.ListOptions{Limit: 7}
	pages := 0
	var rv string
	for {
		l, err := cms.List(e.ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if rv == "" {
			rv = l.ResourceVersion
		} else if l.ResourceVersion != rv {
			t.Fatalf("page %d at rv %s, first at %s", pages, l.ResourceVersion, rv)
		}
		for _, it := range l.Items {
			names = append(names, it.Name)
		}
		if l.Continue == "" {
			break
		}
		if l.RemainingItemCount == nil || *l.RemainingItemCount != int64(25-7*pages) {
			t.Fatalf("page %d remainingItemCount %v", pages, l.RemainingItemCount)
		}
		// Writes between pages do not show up in later pages.
		cms.Create(e.ctx, cm(fmt.Sprintf("cm-late-%d", pages), nil), metav1.CreateOptions{})
		opts.Continue = l.Continue
	}
	if pages != 4 || len(names) != 25 {
		t.Fatalf("%d pages, %d items", pages, len(names))
	}
	// Paging with a label selector fills pages with matches.
	l, err := cms.List(e.ctx, metav1.ListOptions{LabelSelector: "parity=odd", Limit: 5})
	if err != nil || len(l.Items) != 5 || l.Continue == "" {
		t.Fatalf("filtered page: %d items, continue %q, %v", len(l.Items), l.Continue, err)
	}
	l2, err := cms.List(e.ctx, metav1.ListOptions{LabelSelector: "parity=odd", Limit: 50, Continue: l.Continue})
	if err != nil || len(l2.Items) != 7 {
		t.Fatalf("filtered rest: %d items, %v", len(l2.Items), err)
	}
	if _, err := cms.List(e.ctx, metav1.ListOptions{Continue: "not-a-token"}); !apierrors.IsBadRequest(err) {
		t.Fatalf("garbage continue token: %v", err)
	}
}

func TestWatchAndInformerSurvivesExpiry(t *testing.T) {
	e := newTestEnv(t)
	cms := e.cs.CoreV1().ConfigMaps("default")
	// Raw watch with a selector: objects entering and leaving the
	// selection become ADDED and DELETED.
	w, err := cms.Watch(e.ctx, metav1.ListOptions{LabelSelector: "watched=yes", ResourceVersion: "1"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	c, _ := cms.Create(e.ctx, cm("w", nil), metav1.CreateOptions{})
	c.Labels = map[string]string{"watched": "yes"}
	c, _ = cms.Update(e.ctx, c, metav1.UpdateOptions{})
	c.Labels["watched"] = "no"
	c, _ = cms.Update(e.ctx, c, metav1.UpdateOptions{})
	var types []watch.EventType
	for len(types) < 2 {
		select {
		case ev := <-w.ResultChan():
			types = append(types, ev.Type)
		case <-time.After(5 * time.Second):
			t.Fatalf("events so far: %v", types)
		}
	}
	if diff := cmp.Diff([]watch.EventType{watch.Added, watch.Deleted}, types); diff != "" {
		t.Fatalf("selector transitions: %s", diff)
	}

	// An informer keeps working across a 410: compact history, end its
	// watch, and it must re-list and go on.
	factory := informers.NewSharedInformerFactoryWithOptions(e.cs, 0, informers.WithNamespace("default"))
	inf := factory.Core().V1().ConfigMaps().Informer()
	seen := make(chan string, 100)
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) { seen <- obj.(*corev1.ConfigMap).Name }})
	stop := make(chan struct{})
	defer close(stop)
	factory.Start(stop)
	if !cache.WaitForCacheSync(stop, inf.HasSynced) {
		t.Fatal("informer did not sync")
	}
	cms.Create(e.ctx, cm("before", nil), metav1.CreateOptions{})
	waitSeen(t, seen, "before")
	cur, _ := e.st.CurrentRevision(e.ctx)
	for i := 0; i < 5; i++ {
		cms.Create(e.ctx, cm(fmt.Sprintf("filler-%d", i), nil), metav1.CreateOptions{})
	}
	if err := e.st.Compact(e.ctx, cur+5); err != nil {
		t.Fatal(err)
	}
	old := fmt.Sprint(cur)
	// A watch from the compacted revision gets a 410 ERROR event.
	w2, err := cms.Watch(e.ctx, metav1.ListOptions{ResourceVersion: old})
	if err != nil {
		t.Fatal(err)
	}
	ev := <-w2.ResultChan()
	if st, ok := ev.Object.(*metav1.Status); ev.Type != watch.Error || !ok || st.Code != http.StatusGone {
		t.Fatalf("watch from a compacted rv: %v %+v", ev.Type, ev.Object)
	}
	w2.Stop()
	e.s.endWatches()
	cms.Create(e.ctx, cm("after", nil), metav1.CreateOptions{})
	waitSeen(t, seen, "after")
}

func waitSeen(t *testing.T, seen chan string, name string) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case n := <-seen:
			if n == name {
				return
			}
		case <-timeout:
			t.Fatalf("informer never saw %s", name)
		}
	}
}

func TestDiscoveryAndTables(t *testing.T) {
	e := newTestEnv(t)
	groups, resources, err := e.cs.Discovery().ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) < 10 {
		t.Fatalf("%d groups", len(groups))
	}
	found := map[string]metav1.APIResource{}
	for _, rl := range resources {
		for _, r := range rl.APIResources {
			found[rl.GroupVersion+"/"+r.Name] = r
		}
	}
	for _, want := range []string{"v1/pods", "v1/pods/status", "v1/pods/binding", "apps/v1/deployments/scale", "v1/namespaces/finalize", "batch/v1/cronjobs", "coordination.k8s.io/v1/leases"} {
		if _, ok := found[want]; !ok {
			t.Errorf("discovery lacks %s", want)
		}
	}
	if p := found["v1/pods"]; !cmp.Equal(p.ShortNames, []string{"po"}) || !p.Namespaced || p.Kind != "Pod" || !contains(p.Categories, "all") {
		t.Errorf("pods in discovery: %+v", p)
	}
	// Aggregated discovery, as recent kubectl asks for it.
	req, _ := http.NewRequest("GET", "/apis", nil)
	req.Header.Set("Accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json")
	rr := httptest.NewRecorder()
	e.s.Handler().ServeHTTP(rr, req)
	if !strings.Contains(rr.Header().Get("Content-Type"), "as=APIGroupDiscoveryList") || !strings.Contains(rr.Body.String(), `"resource":"deployments"`) {
		t.Fatalf("aggregated discovery: %s %.300s", rr.Header().Get("Content-Type"), rr.Body.String())
	}
	// A server-side table of pods.
	req, _ = http.NewRequest("GET", "/api/v1/namespaces/default/configmaps", nil)
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
	rr = httptest.NewRecorder()
	e.s.Handler().ServeHTTP(rr, req)
	var tbl metav1.Table
	if err := json.Unmarshal(rr.Body.Bytes(), &tbl); err != nil || tbl.Kind != "Table" || tbl.ColumnDefinitions[1].Name != "Data" {
		t.Fatalf("table: %v %.300s", err, rr.Body.String())
	}
	// Unserved resources are 404.
	rr = httptest.NewRecorder()
	e.s.Handler().ServeHTTP(rr, httptestGet("/apis/example.com/v1/widgets"))
	if rr.Code != http.StatusNotFound {
		t.Fatalf("unserved resource: %d", rr.Code)
	}
}

func httptestGet(path string) *http.Request {
	r, _ := http.NewRequest("GET", path, nil)
	return r
}

func TestPodDefaultsAndImmutability(t *testing.T) {
	e := newTestEnv(t)
	pods := e.cs.CoreV1().Pods("default")
	p, err := pods.Create(e.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := p.Spec
	if s.RestartPolicy != "Always" || s.DNSPolicy != "ClusterFirst" || s.SchedulerName != "default-scheduler" || *s.TerminationGracePeriodSeconds != 30 ||
		s.SecurityContext == nil || !*s.EnableServiceLinks || s.ServiceAccountName != "default" || *s.Priority != 0 || len(s.Tolerations) != 2 ||
		s.Containers[0].ImagePullPolicy != corev1.PullAlways || p.Status.Phase != corev1.PodPending || p.Status.QOSClass != corev1.PodQOSBestEffort {
		t.Fatalf("pod defaults: %+v status %+v", s, p.Status)
	}
	if *s.Tolerations[0].TolerationSeconds != 300 || s.Tolerations[0].Effect != corev1.TaintEffectNoExecute {
		t.Fatalf("default tolerations: %+v", s.Tolerations)
	}
	p.Spec.Containers[0].Name = "renamed"
	if _, err := pods.Update(e.ctx, p, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "pod updates may not change fields") {
		t.Fatalf("pod spec change: %v", err)
	}
	// Binding: once.
	if err := pods.Bind(e.ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Target: corev1.ObjectReference{Kind: "Node", Name: "n1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pods.Bind(e.ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Target: corev1.ObjectReference{Kind: "Node", Name: "n2"}}, metav1.CreateOptions{}); !apierrors.IsConflict(err) {
		t.Fatalf("second binding: %v", err)
	}
	// A bound pod is deleted gracefully: it stays with a deletionTimestamp.
	if err := pods.Delete(e.ctx, "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := pods.Get(e.ctx, "p", metav1.GetOptions{})
	if err != nil || got.DeletionTimestamp == nil || *got.DeletionGracePeriodSeconds != 30 {
		t.Fatalf("graceful delete: %+v %v", got, err)
	}
	if err := pods.Delete(e.ctx, "p", metav1.DeleteOptions{GracePeriodSeconds: ptrTo[int64](0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Get(e.ctx, "p", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("pod after grace 0 delete: %v", err)
	}
}

func TestServiceAllocation(t *testing.T) {
	e := newTestEnv(t)
	svcs := e.cs.CoreV1().Services("default")
	np, err := svcs.Create(e.ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "np"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ip, err := netip.ParseAddr(np.Spec.ClusterIP)
	if err != nil || !netip.MustParsePrefix("10.43.0.0/16").Contains(ip) || ip.String() == "10.43.0.1" {
		t.Fatalf("cluster IP %q", np.Spec.ClusterIP)
	}
	port := np.Spec.Ports[0]
	if port.NodePort < 30000 || port.NodePort > 32767 || port.TargetPort.IntVal != 80 || port.Protocol != "TCP" {
		t.Fatalf("port defaults: %+v", port)
	}
	if np.Spec.SessionAffinity != "None" || *np.Spec.IPFamilyPolicy != "SingleStack" || np.Spec.IPFamilies[0] != "IPv4" || np.Spec.ExternalTrafficPolicy != "Cluster" {
		t.Fatalf("service defaults: %+v", np.Spec)
	}
	// The same node port again is refused; so is an IP outside the range.
	_, err = svcs.Create(e.ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "dup"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 80, NodePort: port.NodePort}}}}, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "provided port is already allocated") {
		t.Fatalf("taken node port: %v", err)
	}
	_, err = svcs.Create(e.ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "outside"}, Spec: corev1.ServiceSpec{ClusterIP: "192.168.0.10", Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) {
		t.Fatalf("cluster IP outside the range: %v", err)
	}
	// An update that omits the allocated values keeps them.
	np.Spec.ClusterIP, np.Spec.ClusterIPs, np.Spec.Ports[0].NodePort = "", nil, 0
	up, err := svcs.Update(e.ctx, np, metav1.UpdateOptions{})
	if err != nil || up.Spec.ClusterIP != ip.String() || up.Spec.Ports[0].NodePort != port.NodePort {
		t.Fatalf("update without allocated values: %v %+v", err, up)
	}
}

func TestHTTPWatchOverTCP(t *testing.T) {
	e := newTestEnv(t)
	srv := httptest.NewServer(e.s.Handler())
	defer srv.Close()
	cs := kubernetes.NewForConfigOrDie(&rest.Config{Host: srv.URL})
	w, err := cs.CoreV1().ConfigMaps("default").Watch(e.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// Synthetic ADDED for what exists, then live events.
	if _, err := cs.CoreV1().ConfigMaps("default").Create(e.ctx, cm("tcp", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if ev.Type != watch.Added || ev.Object.(*corev1.ConfigMap).Name != "tcp" {
			t.Fatalf("event %v %v", ev.Type, ev.Object)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no event over TCP")
	}
}

func TestNamespaceLifecycleAndConfigMapValidation(t *testing.T) {
	e := newTestEnv(t)
	for _, ns := range []string{"default", "kube-system", "kube-public"} {
		err := e.cs.CoreV1().Namespaces().Delete(e.ctx, ns, metav1.DeleteOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "this namespace may not be deleted") {
			t.Errorf("delete namespace %s: %v", ns, err)
		}
	}
	_, err := e.cs.CoreV1().ConfigMaps("default").Create(e.ctx, cm("bad-key", map[string]string{"not/valid": "x"}), metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "data[not/valid]") {
		t.Fatalf("invalid configmap key: %v", err)
	}
	imm := cm("imm", map[string]string{"a": "1"})
	imm.Immutable = ptrTo(true)
	c, err := e.cs.CoreV1().ConfigMaps("default").Create(e.ctx, imm, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.Data["a"] = "2"
	if _, err := e.cs.CoreV1().ConfigMaps("default").Update(e.ctx, c, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("update of an immutable configmap: %v", err)
	}
}

func TestMoreDefaults(t *testing.T) {
	e := newTestEnv(t)
	pvc, err := e.cs.CoreV1().PersistentVolumeClaims("default").Create(e.ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "c"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: apiresource.MustParse("1Gi")}},
		},
	}, metav1.CreateOptions{})
	if err != nil || *pvc.Spec.VolumeMode != corev1.PersistentVolumeFilesystem || pvc.Status.Phase != corev1.ClaimPending {
		t.Fatalf("pvc defaults: %+v %v", pvc, err)
	}
	np, err := e.cs.NetworkingV1().NetworkPolicies("default").Create(e.ctx, &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "np"},
		Spec:       networkingv1.NetworkPolicySpec{Egress: []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{{}}}}},
	}, metav1.CreateOptions{})
	if err != nil || !cmp.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{"Ingress", "Egress"}) || *np.Spec.Egress[0].Ports[0].Protocol != corev1.ProtocolTCP {
		t.Fatalf("network policy defaults: %+v %v", np.Spec, err)
	}
	sc, err := e.cs.StorageV1().StorageClasses().Create(e.ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "local"}, Provisioner: "example.com/local"}, metav1.CreateOptions{})
	if err != nil || *sc.ReclaimPolicy != corev1.PersistentVolumeReclaimDelete || *sc.VolumeBindingMode != storagev1.VolumeBindingImmediate {
		t.Fatalf("storage class defaults: %+v %v", sc, err)
	}
}

func TestEventsShareStorageAcrossAPIs(t *testing.T) {
	e := newTestEnv(t)
	w, err := e.cs.EventsV1().Events("default").Watch(e.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	core, err := e.cs.CoreV1().Events("default").Create(e.ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "e1"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "p", Namespace: "default"},
		Reason:         "Pulled", Message: "pulled image", Type: "Normal", Count: 3,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := e.cs.EventsV1().Events("default").Get(e.ctx, "e1", metav1.GetOptions{})
	if err != nil || ev.Note != "pulled image" || ev.Regarding.Name != "p" || ev.DeprecatedCount != 3 || ev.ResourceVersion != core.ResourceVersion {
		t.Fatalf("core event through events.k8s.io: %+v %v", ev, err)
	}
	select {
	case we := <-w.ResultChan():
		if got, ok := we.Object.(*eventsv1.Event); we.Type != watch.Added || !ok || got.Note != "pulled image" {
			t.Fatalf("watch event %v %#v", we.Type, we.Object)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("events.k8s.io watch saw no event")
	}
	if _, err := e.cs.EventsV1().Events("default").Create(e.ctx, &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: "e2"}, EventTime: metav1.NowMicro(), Regarding: corev1.ObjectReference{Kind: "Node", Name: "n"},
		Reason: "Started", Note: "started", Type: "Normal", Action: "Start", ReportingController: "bonsai/kubelet", ReportingInstance: "n",
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	list, err := e.cs.CoreV1().Events("default").List(e.ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node"})
	if err != nil || len(list.Items) != 1 || list.Items[0].Message != "started" || list.Items[0].ReportingController != "bonsai/kubelet" {
		t.Fatalf("events.k8s.io event through core: %+v %v", list.Items, err)
	}
}

func TestPodResourceValidation(t *testing.T) {
	e := newTestEnv(t)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "r"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox",
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: apiresource.MustParse("2"), corev1.ResourceMemory: apiresource.MustParse("-1Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: apiresource.MustParse("1")},
		}}}}}
	_, err := e.cs.CoreV1().Pods("default").Create(e.ctx, pod, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) {
		t.Fatalf("bad resources: %v", err)
	}
	causes := map[string]bool{}
	for _, c := range err.(apierrors.APIStatus).Status().Details.Causes {
		causes[c.Field] = true
	}
	for _, f := range []string{"spec.containers[0].resources.requests[memory]", "spec.containers[0].resources.requests[cpu]"} {
		if !causes[f] {
			t.Errorf("no cause for %s in %v", f, err)
		}
	}
}

func TestEvictionHonoursDisruptionBudget(t *testing.T) {
	e := newTestEnv(t)
	pods := e.cs.CoreV1().Pods("default")
	mk := func(name string) {
		p, err := pods.Create(e.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "db"}},
			Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		if _, err := pods.UpdateStatus(e.ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mk("db-0")
	mk("db-1")
	pdbs := e.cs.PolicyV1().PodDisruptionBudgets("default")
	pdb, err := pdbs.Create(e.ctx, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptrTo(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	evict := func(name string) error {
		return pods.EvictV1(e.ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}})
	}
	// No disruption controller has computed the budget: nothing may go.
	if err := evict("db-0"); !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "would violate the pod's disruption budget") {
		t.Fatalf("eviction against an uncomputed budget: %v", err)
	}
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, DisruptionsAllowed: 1, CurrentHealthy: 2, DesiredHealthy: 1, ExpectedPods: 2}
	if _, err := pdbs.UpdateStatus(e.ctx, pdb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := evict("db-0"); err != nil {
		t.Fatalf("eviction within the budget: %v", err)
	}
	if p, _ := pods.Get(e.ctx, "db-0", metav1.GetOptions{}); p.DeletionTimestamp == nil {
		t.Fatal("evicted pod is not terminating")
	}
	got, _ := pdbs.Get(e.ctx, "db", metav1.GetOptions{})
	if got.Status.DisruptionsAllowed != 0 || got.Status.DisruptedPods["db-0"].Time.IsZero() {
		t.Fatalf("budget after eviction: %+v", got.Status)
	}
	if err := evict("db-1"); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("second eviction past the budget: %v", err)
	}
	if err := evict("missing"); !apierrors.IsNotFound(err) {
		t.Fatalf("eviction of a missing pod: %v", err)
	}
}

func TestProtobufResponses(t *testing.T) {
	e := newTestEnv(t)
	if _, err := e.cs.CoreV1().ConfigMaps("default").Create(e.ctx, cm("pb", map[string]string{"a": "1"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ accept, want string }{
		{"application/vnd.kubernetes.protobuf, application/json", "application/vnd.kubernetes.protobuf"},
		{"application/json", "application/json"},
		{"", "application/json"},
	} {
		for _, path := range []string{"/api/v1/namespaces/default/configmaps/pb", "/api/v1/namespaces/default/configmaps"} {
			r := httptestGet(path)
			r.Header.Set("Accept", tc.accept)
			rr := httptest.NewRecorder()
			e.s.Handler().ServeHTTP(rr, r)
			if rr.Code != 200 || rr.Header().Get("Content-Type") != tc.want {
				t.Fatalf("GET %s Accept %q: %d %q", path, tc.accept, rr.Code, rr.Header().Get("Content-Type"))
			}
			if tc.want == protobufContentType {
				obj, _, err := protobufSerializer.Decode(rr.Body.Bytes(), nil, nil)
				if err != nil {
					t.Fatalf("protobuf answer of %s: %v", path, err)
				}
				if c, ok := obj.(*corev1.ConfigMap); ok && c.Data["a"] != "1" {
					t.Fatalf("protobuf configmap: %+v", c)
				}
			}
		}
	}
}

// TestManyWatchersShareEvents runs JSON, table and selector watchers of
// one resource at once: each must get every event it is owed, and (under
// -race) none may change the event objects they share.
func TestManyWatchersShareEvents(t *testing.T) {
	e := newTestEnv(t)
	srv := httptest.NewServer(e.s.Handler())
	defer srv.Close()
	const writes = 30
	type result struct {
		name string
		n    int
		err  error
	}
	results := make(chan result, 32)
	watchRaw := func(name, query, accept string, want int) {
		req, _ := http.NewRequestWithContext(e.ctx, "GET", srv.URL+"/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=1&"+query, nil)
		req.Header.Set("Accept", accept)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			results <- result{name, 0, err}
			return
		}
		defer resp.Body.Close()
		dec := json.NewDecoder(resp.Body)
		n := 0
		for n < want {
			var ev struct {
				Type   string          `json:"type"`
				Object json.RawMessage `json:"object"`
			}
			if err := dec.Decode(&ev); err != nil {
				results <- result{name, n, err}
				return
			}
			if strings.HasPrefix(name, "table") && !strings.Contains(string(ev.Object), `"kind":"Table"`) {
				results <- result{name, n, fmt.Errorf("not a table: %.100s", ev.Object)}
				return
			}
			n++
		}
		results <- result{name, n, nil}
	}
	for i := 0; i < 10; i++ {
		go watchRaw(fmt.Sprintf("json-%d", i), "", "application/json", writes)
	}
	go watchRaw("table", "", "application/json;as=Table;v=v1;g=meta.k8s.io", writes)
	go watchRaw("selector", "labelSelector=even%3Dyes", "application/json", writes/2)
	time.Sleep(200 * time.Millisecond)
	for i := 0; i < writes; i++ {
		c := cm(fmt.Sprintf("s-%02d", i), nil)
		if i%2 == 0 {
			c.Labels = map[string]string{"even": "yes"}
		}
		if _, err := e.cs.CoreV1().ConfigMaps("default").Create(e.ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 12; i++ {
		select {
		case r := <-results:
			if r.err != nil {
				t.Errorf("%s: %v after %d events", r.name, r.err, r.n)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("watchers did not finish")
		}
	}
}

func TestProtobufWatchStream(t *testing.T) {
	e := newTestEnv(t)
	srv := httptest.NewServer(e.s.Handler())
	defer srv.Close()
	req, _ := http.NewRequestWithContext(e.ctx, "GET", srv.URL+"/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=1", nil)
	req.Header.Set("Accept", "application/vnd.kubernetes.protobuf;stream=watch, application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/vnd.kubernetes.protobuf;stream=watch" {
		t.Fatalf("content type %q", ct)
	}
	if _, err := e.cs.CoreV1().ConfigMaps("default").Create(e.ctx, cm("pbw", map[string]string{"a": "1"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	frames := protobuf.LengthDelimitedFramer.NewFrameReader(resp.Body)
	buf := make([]byte, 64<<10)
	n, err := frames.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	var we metav1.WatchEvent
	if _, _, err := protobufRaw.Decode(buf[:n], nil, &we); err != nil {
		t.Fatalf("frame: %v", err)
	}
	obj, _, err := protobufSerializer.Decode(we.Object.Raw, nil, nil)
	if err != nil || we.Type != "ADDED" || obj.(*corev1.ConfigMap).Name != "pbw" {
		t.Fatalf("event %s %#v %v", we.Type, obj, err)
	}
}

func TestValidationOfMoreKinds(t *testing.T) {
	e := newTestEnv(t)
	causes := func(err error) []string {
		t.Helper()
		if !apierrors.IsInvalid(err) {
			t.Fatalf("want 422 Invalid, got %v", err)
		}
		var out []string
		for _, c := range err.(apierrors.APIStatus).Status().Details.Causes {
			out = append(out, c.Field)
		}
		sort.Strings(out)
		return out
	}
	prefix := networkingv1.PathTypePrefix
	_, err := e.cs.NetworkingV1().Ingresses("default").Create(e.ctx, &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: "ing"},
		Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{Host: "Not_A_Host", IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{
			{Path: "relative", PathType: &prefix, Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Number: 70000}}}},
			{Path: "/x", Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Number: 80}}}},
		}}}}}},
	}, metav1.CreateOptions{})
	if diff := cmp.Diff([]string{
		"spec.rules[0].host", "spec.rules[0].http.paths[0].backend.service.port.number",
		"spec.rules[0].http.paths[0].path", "spec.rules[0].http.paths[1].pathType",
	}, causes(err)); diff != "" {
		t.Errorf("ingress causes: %s", diff)
	}
	_, err = e.cs.NetworkingV1().NetworkPolicies("default").Create(e.ctx, &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "np"},
		Spec: networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
			{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8", Except: []string{"192.168.0.0/16"}}},
			{IPBlock: &networkingv1.IPBlock{CIDR: "nope"}},
		}}}},
	}, metav1.CreateOptions{})
	if diff := cmp.Diff([]string{"spec.ingress[0].from[0].ipBlock.except[0]", "spec.ingress[0].from[1].ipBlock.cidr"}, causes(err)); diff != "" {
		t.Errorf("network policy causes: %s", diff)
	}
	// Ports as the enforcer reads them: a range needs a number to start
	// from, and ends at a port; a named port is a port name.
	named, num, end, bigEnd := intstr.FromString("http"), intstr.FromInt32(80), int32(90), int32(70000)
	_, err = e.cs.NetworkingV1().NetworkPolicies("default").Create(e.ctx, &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "np"},
		Spec: networkingv1.NetworkPolicySpec{Egress: []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{
			{Port: &named, EndPort: &end},
			{EndPort: &end},
			{Port: &num, EndPort: &bigEnd},
			{Port: ptrTo(intstr.FromString("Not_A_Name"))},
		}}}},
	}, metav1.CreateOptions{})
	if diff := cmp.Diff([]string{"spec.egress[0].ports[0].endPort", "spec.egress[0].ports[1].endPort", "spec.egress[0].ports[2].endPort", "spec.egress[0].ports[3].port"}, causes(err)); diff != "" {
		t.Errorf("network policy port causes: %s", diff)
	}
	_, err = e.cs.PolicyV1().PodDisruptionBudgets("default").Create(e.ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "pdb"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: ptrTo(intstr.FromString("150%")), MaxUnavailable: ptrTo(intstr.FromInt32(1))},
	}, metav1.CreateOptions{})
	if diff := cmp.Diff([]string{"spec", "spec.minAvailable"}, causes(err)); diff != "" {
		t.Errorf("pdb causes: %s", diff)
	}
	_, err = e.cs.CoordinationV1().Leases("default").Create(e.ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l"}, Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptrTo[int32](0)}}, metav1.CreateOptions{})
	if diff := cmp.Diff([]string{"spec.leaseDurationSeconds"}, causes(err)); diff != "" {
		t.Errorf("lease causes: %s", diff)
	}
	_, err = e.cs.SchedulingV1().PriorityClasses().Create(e.ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "system-mine"}, Value: 2000000000}, metav1.CreateOptions{})
	if diff := cmp.Diff([]string{"metadata.name", "value"}, causes(err)); diff != "" {
		t.Errorf("priority class causes: %s", diff)
	}
	pc, err := e.cs.SchedulingV1().PriorityClasses().Create(e.ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "high"}, Value: 1000}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pc.Value = 2000
	if _, err := e.cs.SchedulingV1().PriorityClasses().Update(e.ctx, pc, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("changing a priority class's value: %v", err)
	}
	// Valid objects of these kinds are accepted.
	if _, err := e.cs.NetworkingV1().Ingresses("default").Create(e.ctx, &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: "ok"},
		Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{Host: "*.example.com", IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{
			{Path: "/", PathType: &prefix, Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Name: "http"}}}},
		}}}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Errorf("valid ingress: %v", err)
	}
}

// TestBookmarksFollowStoreProgress: a watch of a quiet resource gets
// bookmarks at the store's revision, not its last event's.
func TestBookmarksFollowStoreProgress(t *testing.T) {
	e := newTestEnv(t)
	e.s.bookmarkEvery = 50 * time.Millisecond
	w, err := e.cs.CoreV1().ConfigMaps("default").Watch(e.ctx, metav1.ListOptions{AllowWatchBookmarks: true, ResourceVersion: "1"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	sec, err := e.cs.CoreV1().Secrets("default").Create(e.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := strconv.ParseUint(sec.ResourceVersion, 10, 64)
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-w.ResultChan():
			if ev.Type != watch.Bookmark {
				continue
			}
			rv, _ := strconv.ParseUint(ev.Object.(*corev1.ConfigMap).ResourceVersion, 10, 64)
			if rv >= want {
				return
			}
		case <-timeout:
			t.Fatalf("no bookmark reached the secret's revision %d", want)
		}
	}
}

// TestBookmarkBeforeWatchTimeout: a watch that allows bookmarks gets one
// two seconds before its timeoutSeconds end it, as from kube-apiserver,
// however rare periodic bookmarks are; one that does not allow them gets
// none. (The Python client's watch.stream(..., timeout_seconds=...) saw
// no bookmark at all from bonsai.)
func TestBookmarkBeforeWatchTimeout(t *testing.T) {
	e := newTestEnv(t)
	e.s.bookmarkEvery = time.Hour
	cm, err := e.cs.CoreV1().ConfigMaps("default").Create(e.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "quiet"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		bookmarks []time.Duration
		rv        string
		took      time.Duration
	}
	run := func(allow bool) <-chan result {
		ch := make(chan result, 1)
		go func() {
			var r result
			start := time.Now()
			timeout := int64(3)
			w, err := e.cs.CoreV1().ConfigMaps("default").Watch(e.ctx, metav1.ListOptions{
				AllowWatchBookmarks: allow, ResourceVersion: cm.ResourceVersion, TimeoutSeconds: &timeout})
			if err != nil {
				t.Error(err)
				ch <- r
				return
			}
			for ev := range w.ResultChan() {
				if ev.Type == watch.Bookmark {
					r.bookmarks = append(r.bookmarks, time.Since(start))
					r.rv = ev.Object.(*corev1.ConfigMap).ResourceVersion
				} else {
					t.Errorf("watch from the object's own revision: unexpected %s event", ev.Type)
				}
			}
			r.took = time.Since(start)
			ch <- r
		}()
		return ch
	}
	with, without := run(true), run(false)
	r := <-with
	if len(r.bookmarks) != 1 || r.bookmarks[0] < 500*time.Millisecond || r.bookmarks[0] > r.took {
		t.Errorf("allowWatchBookmarks, timeoutSeconds=3: bookmarks at %v, watch ended after %v; want one about 1s in", r.bookmarks, r.took)
	}
	if rv, _ := strconv.ParseUint(r.rv, 10, 64); len(r.bookmarks) > 0 && rv < mustParseUint(t, cm.ResourceVersion) {
		t.Errorf("bookmark resourceVersion %s is older than the watch's start %s", r.rv, cm.ResourceVersion)
	}
	if r.took < 2500*time.Millisecond {
		t.Errorf("watch with timeoutSeconds=3 ended after %v", r.took)
	}
	if r := <-without; len(r.bookmarks) != 0 {
		t.Errorf("a watch without allowWatchBookmarks got bookmarks at %v", r.bookmarks)
	}
}

// TestWatchSelectorLeaveSendsPreviousObject: an object that stops matching
// a watch's selector is DELETED for it as it was before the change (the
// labels the watcher selected it by, the data it last saw) at the
// change's resourceVersion, as kube-apiserver sends it. bonsai sent the
// object as changed, whose labels the watch did not select (the official
// Python client's watch.stream(label_selector=...) saw it).
func TestWatchSelectorLeaveSendsPreviousObject(t *testing.T) {
	e := newTestEnv(t)
	// Over HTTP, as other clients watch: not the in-process hand-over.
	srv := httptest.NewServer(e.s.Handler())
	defer srv.Close()
	cms := e.cs.CoreV1().ConfigMaps("default")
	for _, format := range []string{"json", "protobuf"} {
		t.Run(format, func(t *testing.T) {
			cfg := &rest.Config{Host: srv.URL}
			if format == "protobuf" {
				cfg.ContentType = "application/vnd.kubernetes.protobuf"
			}
			cs := kubernetes.NewForConfigOrDie(cfg)
			name := "leaving-" + format
			cm, err := cms.Create(e.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "in"}}, Data: map[string]string{"k": "1"}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			w, err := cs.CoreV1().ConfigMaps("default").Watch(e.ctx, metav1.ListOptions{LabelSelector: "app=in", ResourceVersion: cm.ResourceVersion})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			cm.Labels["app"] = "out"
			cm.Data["k"] = "2"
			out, err := cms.Update(e.ctx, cm, metav1.UpdateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			select {
			case ev := <-w.ResultChan():
				got, ok := ev.Object.(*corev1.ConfigMap)
				if ev.Type != watch.Deleted || !ok {
					t.Fatalf("event %s %T, want DELETED of the ConfigMap", ev.Type, ev.Object)
				}
				if got.Labels["app"] != "in" || got.Data["k"] != "1" || got.ResourceVersion != out.ResourceVersion {
					t.Errorf("DELETED on leaving the selector: labels %v data %v resourceVersion %s; want app=in, k=1 (as before the change) at %s",
						got.Labels, got.Data, got.ResourceVersion, out.ResourceVersion)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no event for the ConfigMap leaving the selector")
			}
		})
	}
}

// TestTooLargeResourceVersionCause: a list from a resourceVersion the store
// has not reached is a 504 Timeout with the ResourceVersionTooLarge cause,
// as from kube-apiserver: the cause is what clients match, not the
// message.
func TestTooLargeResourceVersionCause(t *testing.T) {
	e := newTestEnv(t)
	l, err := e.cs.CoreV1().ConfigMaps("default").List(e.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	future := strconv.FormatUint(mustParseUint(t, l.ResourceVersion)+1000, 10)
	for _, o := range []metav1.ListOptions{
		{ResourceVersion: future},
		{ResourceVersion: future, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan},
		{ResourceVersion: future, ResourceVersionMatch: metav1.ResourceVersionMatchExact},
		{ResourceVersion: future, Limit: 1},
	} {
		_, err := e.cs.CoreV1().ConfigMaps("default").List(e.ctx, o)
		var st apierrors.APIStatus
		if !errors.As(err, &st) || st.Status().Code != http.StatusGatewayTimeout || !apierrors.IsTimeout(err) ||
			!apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) || st.Status().Details.RetryAfterSeconds != 1 {
			t.Errorf("list %+v: %#v, want a 504 Timeout with a ResourceVersionTooLarge cause, retry after 1s", o, err)
		}
	}
}

func mustParseUint(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestTerminatingNamespaceWaitsForFinalize: a Terminating namespace goes
// only once spec.finalizers is empty (the namespace controller's
// /finalize), not on any other update.
func TestTerminatingNamespaceWaitsForFinalize(t *testing.T) {
	e := newTestEnv(t)
	nss := e.cs.CoreV1().Namespaces()
	if _, err := nss.Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "t"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := nss.Delete(e.ctx, "t", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ns, err := nss.Get(e.ctx, "t", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels["touched"] = "yes"
	if _, err := nss.Update(e.ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ns, err = nss.Get(e.ctx, "t", metav1.GetOptions{})
	if err != nil || ns.Status.Phase != corev1.NamespaceTerminating || ns.Labels["touched"] != "yes" {
		t.Fatalf("terminating namespace after a label update: %+v %v", ns, err)
	}
	ns.Spec.Finalizers = nil
	if _, err := nss.Finalize(e.ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := nss.Get(e.ctx, "t", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("namespace after finalize: %v", err)
	}
}

func TestGenerateNameRetriesCollisions(t *testing.T) {
	e := newTestEnv(t)
	calls := 0
	newGeneratedName = func(base string) string {
		calls++
		if calls <= 3 {
			return base + "taken"
		}
		return generateName(base)
	}
	defer func() { newGeneratedName = generateName }()
	if _, err := e.cs.CoreV1().ConfigMaps("default").Create(e.ctx, cm("gen-taken", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := e.cs.CoreV1().ConfigMaps("default").Create(e.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "gen-"}}, metav1.CreateOptions{})
	if err != nil || got.Name == "gen-taken" || !strings.HasPrefix(got.Name, "gen-") || calls != 4 {
		t.Fatalf("generated name after collisions: %q %v (%d tries)", got.Name, err, calls)
	}
}

func TestCreateRefusesResourceVersion(t *testing.T) {
	e := newTestEnv(t)
	c := cm("with-rv", nil)
	c.ResourceVersion = "5"
	_, err := e.cs.CoreV1().ConfigMaps("default").Create(e.ctx, c, metav1.CreateOptions{})
	if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "resourceVersion should not be set on objects to be created") {
		t.Fatalf("create with a resourceVersion: %v", err)
	}
	if _, err := e.cs.CoreV1().ConfigMaps("default").Get(e.ctx, "with-rv", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("refused create stored something: %v", err)
	}
}

// TestNoNewFinalizersWhileDeleting: once deletion has started, finalizers
// may only go, as Kubernetes' metadata validation requires.
func TestNoNewFinalizersWhileDeleting(t *testing.T) {
	e := newTestEnv(t)
	cms := e.cs.CoreV1().ConfigMaps("default")
	c := cm("fin", nil)
	c.Finalizers = []string{"example.com/a"}
	if _, err := cms.Create(e.ctx, c, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(e.ctx, "fin", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	got, _ := cms.Get(e.ctx, "fin", metav1.GetOptions{})
	got.Finalizers = append(got.Finalizers, "example.com/b")
	if _, err := cms.Update(e.ctx, got, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "no new finalizers can be added if the object is being deleted") {
		t.Fatalf("adding a finalizer while deleting: %v", err)
	}
}

// TestLegacyWatchPaths: /api/v1/watch/... streams like ?watch=true, for a
// collection and for one named object.
func TestLegacyWatchPaths(t *testing.T) {
	e := newTestEnv(t)
	srv := httptest.NewServer(e.s.Handler())
	defer srv.Close()
	for _, path := range []string{"/api/v1/watch/namespaces/default/configmaps", "/api/v1/watch/namespaces/default/configmaps/legacy"} {
		ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+path+"?resourceVersion=1", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("legacy-%d", time.Now().UnixNano())
		if strings.HasSuffix(path, "/legacy") {
			name = "legacy"
		}
		e.cs.CoreV1().ConfigMaps("default").Create(e.ctx, cm("other-"+name, nil), metav1.CreateOptions{})
		if _, err := e.cs.CoreV1().ConfigMaps("default").Create(e.ctx, cm(name, nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(resp.Body)
		var ev struct {
			Type   string
			Object corev1.ConfigMap
		}
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if strings.HasSuffix(path, "/legacy") && ev.Object.Name != "legacy" {
			t.Fatalf("%s streamed %s", path, ev.Object.Name)
		}
		if ev.Type != "ADDED" {
			t.Fatalf("%s: %s", path, ev.Type)
		}
		resp.Body.Close()
		cancel()
	}
}

// TestConcurrentUnconditionalPatches: patches without a resourceVersion
// never fail with a conflict, whatever else writes the object meanwhile
// (kube-apiserver retries them), even while the winning write is still
// waiting for its fsync.
func TestConcurrentUnconditionalPatches(t *testing.T) {
	e := newTestEnv(t)
	nodes := e.cs.CoreV1().Nodes()
	if _, err := nodes.Create(e.ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				var err error
				if g%2 == 0 {
					_, err = nodes.Patch(e.ctx, "n", types.StrategicMergePatchType, []byte(fmt.Sprintf(`{"metadata":{"labels":{"g%d":"%d"}}}`, g, i)), metav1.PatchOptions{})
				} else {
					_, err = nodes.Patch(e.ctx, "n", types.MergePatchType, []byte(fmt.Sprintf(`{"status":{"nodeInfo":{"bootID":"%d-%d"}}}`, g, i)), metav1.PatchOptions{}, "status")
				}
				if err != nil {
					t.Errorf("writer %d, patch %d: %v", g, i, err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
}

// A restart on another port and address points the kubernetes Service's
// target port, Endpoints and EndpointSlice at the new ones.
func TestBootstrapFollowsTheServersAddress(t *testing.T) {
	st, err := store.OpenBadger(store.BadgerOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	first, err := New(Config{Store: st, AdvertiseAddress: netip.MustParseAddr("127.0.0.1"), SecurePort: 6443})
	if err != nil {
		t.Fatal(err)
	}
	first.Shutdown()
	s, err := New(Config{Store: st, AdvertiseAddress: netip.MustParseAddr("127.0.0.2"), SecurePort: 7443})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	cs := kubernetes.NewForConfigOrDie(s.ClientConfig(&authn.User{Name: "test-admin", Groups: []string{authn.GroupMasters}}))
	ctx := context.Background()
	svc, err := cs.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := svc.Spec.Ports[0].TargetPort.IntValue(); got != 7443 {
		t.Errorf("kubernetes Service targetPort %d, want 7443", got)
	}
	ep, err := cs.CoreV1().Endpoints("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%s:%d", ep.Subsets[0].Addresses[0].IP, ep.Subsets[0].Ports[0].Port); got != "127.0.0.2:7443" {
		t.Errorf("kubernetes Endpoints %s, want 127.0.0.2:7443", got)
	}
	slice, err := cs.DiscoveryV1().EndpointSlices("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%s:%d", slice.Endpoints[0].Addresses[0], *slice.Ports[0].Port); got != "127.0.0.2:7443" {
		t.Errorf("kubernetes EndpointSlice %s, want 127.0.0.2:7443", got)
	}
}

// TestWatchListAsClientGoAsksIt: client-go's informers open with a
// watch-list (sendInitialEvents, resourceVersionMatch NotOlderThan and no
// resourceVersion): the existing objects come as ADDED, then a bookmark
// marks the end of the initial events, then changes follow.
func TestWatchListAsClientGoAsksIt(t *testing.T) {
	e := newTestEnv(t)
	cms := e.cs.CoreV1().ConfigMaps("default")
	for _, n := range []string{"a", "b"} {
		if _, err := cms.Create(e.ctx, cm(n, nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	yes := true
	w, err := cms.Watch(e.ctx, metav1.ListOptions{SendInitialEvents: &yes, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	next := func() watch.Event {
		t.Helper()
		select {
		case ev := <-w.ResultChan():
			return ev
		case <-time.After(10 * time.Second):
			t.Fatal("no watch event")
		}
		return watch.Event{}
	}
	var added []string
	ev := next()
	for ; ev.Type == watch.Added; ev = next() {
		added = append(added, ev.Object.(*corev1.ConfigMap).Name)
	}
	sort.Strings(added)
	if diff := cmp.Diff([]string{"a", "b"}, added); diff != "" {
		t.Fatalf("initial events: %s", diff)
	}
	if ev.Type != watch.Bookmark || ev.Object.(*corev1.ConfigMap).Annotations[metav1.InitialEventsAnnotationKey] != "true" {
		t.Fatalf("after the initial events: %v %+v", ev.Type, ev.Object)
	}
	if _, err := cms.Create(e.ctx, cm("c", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.Type != watch.Added || ev.Object.(*corev1.ConfigMap).Name != "c" {
		t.Fatalf("after the bookmark: %v %+v", ev.Type, ev.Object)
	}

	// An informer of client-go's defaults (watch-list on) gets no error
	// answer from any of its requests.
	cfg := rest.CopyConfig(e.cfg)
	var mu sync.Mutex
	var refused []string
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err == nil && resp.StatusCode >= 400 {
				mu.Lock()
				refused = append(refused, fmt.Sprintf("%s %s: %d", r.Method, r.URL, resp.StatusCode))
				mu.Unlock()
			}
			return resp, err
		})
	})
	factory := informers.NewSharedInformerFactoryWithOptions(kubernetes.NewForConfigOrDie(cfg), 0, informers.WithNamespace("default"))
	inf := factory.Core().V1().ConfigMaps().Informer()
	stop := make(chan struct{})
	defer close(stop)
	factory.Start(stop)
	if !cache.WaitForCacheSync(stop, inf.HasSynced) {
		t.Fatal("informer did not sync")
	}
	for _, n := range []string{"a", "b", "c"} {
		if _, ok, _ := inf.GetStore().GetByKey("default/" + n); !ok {
			t.Errorf("informer lacks %s", n)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(refused) > 0 {
		t.Fatalf("refused: %v", refused)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestListOptionRules: resourceVersionMatch and sendInitialEvents follow
// kube-apiserver's rules, which differ for lists and watches; a breach is
// a 422 naming the field.
func TestListOptionRules(t *testing.T) {
	e := newTestEnv(t)
	for _, c := range []struct {
		query string
		code  int
		msg   string
	}{
		{"resourceVersionMatch=NotOlderThan", 422, "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"},
		{"resourceVersion=0&resourceVersionMatch=Exact", 422, `resourceVersionMatch "exact" is forbidden for resourceVersion "0"`},
		{"resourceVersion=1&resourceVersionMatch=Newest", 422, `resourceVersionMatch: Unsupported value: "Newest"`},
		{"sendInitialEvents=true", 422, "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list"},
		{"resourceVersion=1&resourceVersionMatch=NotOlderThan", 200, ""},
		{"watch=1&resourceVersion=1&resourceVersionMatch=NotOlderThan", 422, "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"},
		{"watch=1&sendInitialEvents=true&allowWatchBookmarks=true", 422, "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"},
		{"watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan", 422, "sendInitialEvents requires setting allowWatchBookmarks to true"},
		{"watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=Exact", 422, `Unsupported value: "Exact"`},
		{"watch=1&sendInitialEvents=false&resourceVersionMatch=NotOlderThan", 200, ""},
	} {
		q, _ := url.ParseQuery(c.query + "&timeoutSeconds=1")
		req := e.cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/namespaces/default/configmaps")
		for k, v := range q {
			req = req.Param(k, v[0])
		}
		code, msg := 200, ""
		if body, err := req.SetHeader("Accept", "application/json").DoRaw(e.ctx); err != nil {
			var st metav1.Status
			if jerr := json.Unmarshal(body, &st); jerr != nil {
				t.Fatalf("%s: %v, body %q", c.query, err, body)
			}
			code, msg = int(st.Code), st.Message
		}
		if code != c.code || !strings.Contains(msg, c.msg) {
			t.Errorf("%s: %d %s, want %d %q", c.query, code, msg, c.code, c.msg)
		}
	}
}

// TestSharedFramesKeepEachWatchersType: watchers share each event's
// encoded frame, yet one store event is MODIFIED to a plain watcher and
// ADDED to a selector watcher it starts to match, in both encodings.
func TestSharedFramesKeepEachWatchersType(t *testing.T) {
	e := newTestEnv(t)
	srv := httptest.NewServer(e.s.Handler())
	defer srv.Close()
	c, err := e.cs.CoreV1().ConfigMaps("default").Create(e.ctx, cm("typed", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var bodies []io.Closer
	defer func() { // before srv.Close, which waits for open watches
		for _, b := range bodies {
			b.Close()
		}
	}()
	open := func(query, accept string) *http.Response {
		req, _ := http.NewRequestWithContext(e.ctx, "GET", srv.URL+"/api/v1/namespaces/default/configmaps?watch=1&resourceVersion="+c.ResourceVersion+query, nil)
		req.Header.Set("Accept", accept)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, resp.Body)
		return resp
	}
	const pb = "application/vnd.kubernetes.protobuf;stream=watch"
	streams := []struct {
		name, want string
		resp       *http.Response
	}{
		{"json plain", "MODIFIED", open("", "application/json")},
		{"json selector", "ADDED", open("&labelSelector=on%3Dyes", "application/json")},
		{"protobuf plain", "MODIFIED", open("", pb)},
		{"protobuf selector", "ADDED", open("&labelSelector=on%3Dyes", pb)},
	}
	c.Labels = map[string]string{"on": "yes"}
	if _, err := e.cs.CoreV1().ConfigMaps("default").Update(e.ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, s := range streams {
		var typ string
		if strings.HasPrefix(s.name, "json") {
			var ev struct{ Type string }
			if err := json.NewDecoder(s.resp.Body).Decode(&ev); err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
			typ = ev.Type
		} else {
			buf := make([]byte, 64<<10)
			n, err := protobuf.LengthDelimitedFramer.NewFrameReader(s.resp.Body).Read(buf)
			if err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
			var we metav1.WatchEvent
			if _, _, err := protobufRaw.Decode(buf[:n], nil, &we); err != nil {
				t.Fatalf("%s: frame: %v", s.name, err)
			}
			typ = we.Type
		}
		if typ != s.want {
			t.Errorf("%s watcher got %s, want %s", s.name, typ, s.want)
		}
	}
}

// TestWatchParameterSpellings: ?watch= is read as kube-apiserver's
// parameter codec reads it: the Python client's watch=True is a watch,
// as are TRUE, t, yes and the empty value; false and 0 in any case are a
// list.
func TestWatchParameterSpellings(t *testing.T) {
	e := newTestEnv(t)
	srv := httptest.NewServer(e.s.Handler())
	defer srv.Close()
	if _, err := e.cs.CoreV1().ConfigMaps("default").Create(e.ctx, cm("spell", map[string]string{"a": "1"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		value string
		watch bool
	}{{"True", true}, {"TRUE", true}, {"t", true}, {"yes", true}, {"", true}, {"False", false}, {"FALSE", false}, {"0", false}} {
		req, _ := http.NewRequestWithContext(e.ctx, "GET", srv.URL+"/api/v1/namespaces/default/configmaps?timeoutSeconds=1&watch="+tc.value, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var first struct {
			Kind string          `json:"kind"`
			Type string          `json:"type"`
			Obj  json.RawMessage `json:"object"`
		}
		if err := json.NewDecoder(bytes.NewReader(body)).Decode(&first); err != nil {
			t.Fatalf("watch=%q: %v in %.200s", tc.value, err, body)
		}
		if gotWatch := first.Type == "ADDED" && len(first.Obj) > 0; gotWatch != tc.watch || (!tc.watch && first.Kind != "ConfigMapList") {
			t.Errorf("watch=%q: answered %.120s, want a watch %v", tc.value, body, tc.watch)
		}
	}
}

// TestExpiredContinueResumesInconsistently: a continue token whose
// revision was compacted gets kube-apiserver's 410 with a token in the
// Status that resumes at the same key at the newest revision; following
// it pages through the rest at one newer revision (the conformance
// suite's chunking test walks exactly this).
func TestExpiredContinueResumesInconsistently(t *testing.T) {
	e := newTestEnv(t)
	cms := e.cs.CoreV1().ConfigMaps("default")
	for i := 0; i < 20; i++ {
		if _, err := cms.Create(e.ctx, cm(fmt.Sprintf("c%02d", i), nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	first, err := cms.List(e.ctx, metav1.ListOptions{Limit: 5})
	if err != nil || first.Continue == "" {
		t.Fatalf("first page: %v %v", first, err)
	}
	// Another write, then history up to it compacted: the token's
	// revision is gone.
	if _, err := cms.Create(e.ctx, cm("c99", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cur, _ := e.st.CurrentRevision(e.ctx)
	if err := e.st.Compact(e.ctx, cur); err != nil {
		t.Fatal(err)
	}
	_, err = cms.List(e.ctx, metav1.ListOptions{Limit: 5, Continue: first.Continue})
	var se apierrors.APIStatus
	if !apierrors.IsResourceExpired(err) || !errors.As(err, &se) {
		t.Fatalf("continue at a compacted revision: %v, want 410 Expired", err)
	}
	tok := se.Status().ListMeta.Continue
	if tok == "" {
		t.Fatalf("410 without a continue token to resume with: %+v", se.Status())
	}
	var names []string
	lastRV := ""
	for tok != "" {
		page, err := cms.List(e.ctx, metav1.ListOptions{Limit: 5, Continue: tok})
		if err != nil {
			t.Fatalf("inconsistent continue: %v", err)
		}
		if page.ResourceVersion == first.ResourceVersion || (lastRV != "" && page.ResourceVersion != lastRV) {
			t.Fatalf("page at rv %s: first page %s, previous %s", page.ResourceVersion, first.ResourceVersion, lastRV)
		}
		lastRV = page.ResourceVersion
		for _, c := range page.Items {
			if c.Name != "kube-root-ca.crt" { // when a controller made one
				names = append(names, c.Name)
			}
		}
		tok = page.Continue
	}
	// The rest after c04, with the write that came after the first page.
	want := []string{}
	for i := 5; i < 20; i++ {
		want = append(want, fmt.Sprintf("c%02d", i))
	}
	want = append(want, "c99")
	if diff := cmp.Diff(want, names); diff != "" {
		t.Fatalf("remaining items (-want +got):\n%s", diff)
	}
}
