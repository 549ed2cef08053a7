package apiserver

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/client-go/applyconfigurations"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/randfill"
)

// TestCreateShortcutAgreesWithTheFieldManager: for random objects of every
// built-in kind, when recordCreated takes a create's managedFields into
// its own hands it records exactly what kube-apiserver's field manager
// records, and when it declines it leaves the object alone.
func TestCreateShortcutAgreesWithTheFieldManager(t *testing.T) {
	s, _ := newTestServer(t)
	var names []string
	for gvr, r := range s.reg.byGVR {
		if r.custom == nil {
			names = append(names, gvr.String())
		}
	}
	sort.Strings(names)
	taken := map[string]int{}
	for _, name := range names {
		var res *resource
		for gvr, r := range s.reg.byGVR {
			if gvr.String() == name {
				res = r
			}
		}
		fm, err := res.fieldManager("")
		if err != nil {
			t.Fatal(err)
		}
		for seed := int64(0); seed < 30; seed++ {
			f := randfill.NewWithSeed(seed).NilChance(0.6).NumElements(0, 2).MaxDepth(6).Funcs(
				func(r *runtime.RawExtension, c randfill.Continue) {
					if c.Bool() {
						r.Raw = []byte(`{"k":"v"}`)
					}
				})
			obj := res.newObject()
			if seed > 0 {
				f.Fill(obj)
			}
			m, err := metaOf(obj)
			if err != nil {
				t.Fatal(err)
			}
			m.SetManagedFields(nil)
			m.SetName("x")
			obj.GetObjectKind().SetGroupVersionKind(res.gvk())
			fast := obj.DeepCopyObject()
			if !res.recordCreated(fast, "tester") {
				if !cmp.Equal(fast, obj, cmp.Exporter(func(reflect.Type) bool { return true })) {
					t.Fatalf("%s seed %d: declined but changed the object", name, seed)
				}
				continue
			}
			taken[name]++
			live := res.newObject()
			live.GetObjectKind().SetGroupVersionKind(res.gvk())
			slow := fm.UpdateNoErrors(live, obj.DeepCopyObject(), "tester")
			if diff := cmp.Diff(managedFieldsOf(t, slow), managedFieldsOf(t, fast)); diff != "" {
				t.Fatalf("%s seed %d: field manager vs shortcut:\n%s", name, seed, diff)
			}
		}
	}
	for _, must := range []string{"/v1, Resource=configmaps", "/v1, Resource=secrets", "coordination.k8s.io/v1, Resource=leases", "/v1, Resource=namespaces"} {
		if taken[must] == 0 {
			t.Errorf("the shortcut never served %s", must)
		}
	}
	t.Logf("shortcut taken: %v", taken)
}

// managedFieldsOf is obj's managedFields without their times.
func managedFieldsOf(t *testing.T, obj runtime.Object) []metav1.ManagedFieldsEntry {
	m, err := metaOf(obj)
	if err != nil {
		t.Fatal(err)
	}
	out := append([]metav1.ManagedFieldsEntry(nil), m.GetManagedFields()...)
	for i := range out {
		out[i].Time = nil
	}
	return out
}

// TestUpdateShortcutsAgree: for random updates of every built-in kind, on
// the main resource and on status, the managedFields bonsai records (from
// the objects without the top-level fields the update left equal, through
// fastTypeConverter) are those kube-apiserver's field manager records from
// the whole objects through client-go's type converter.
func TestUpdateShortcutsAgree(t *testing.T) {
	s, _ := newTestServer(t)
	plain := applyconfigurations.NewTypeConverter(scheme.Scheme)
	pruned := map[string]int{}
	for gvr, res := range s.reg.byGVR {
		if res.custom != nil || res.typeConverter() != builtinTypeConverter() {
			continue
		}
		for _, sub := range []string{"", "status"} {
			fm, err := res.fieldManager(sub)
			if err != nil {
				t.Fatal(err)
			}
			upstream, err := managedfields.NewDefaultFieldManager(plain, scheme.Scheme, res.defaulter, scheme.Scheme, res.gvk(), res.gvk().GroupVersion(), sub, res.resetFields(sub))
			if err != nil {
				t.Fatal(err)
			}
			for seed := int64(0); seed < 20; seed++ {
				fill := func(seed int64) runtime.Object { return randomObject(res, seed) }
				empty := res.newObject()
				empty.GetObjectKind().SetGroupVersionKind(res.gvk())
				live := upstream.UpdateNoErrors(empty, fill(seed), "creator")
				// The update: each top-level field but the metadata kept
				// or taken from another random object.
				other := reflect.ValueOf(fill(seed + 1000)).Elem()
				obj := live.DeepCopyObject()
				ov := reflect.ValueOf(obj).Elem()
				for i := 0; i < ov.NumField(); i++ {
					if tf := ov.Type().Field(i); tf.Type != typeMetaType && tf.Type != objectMetaType && (seed+int64(i))%3 == 0 {
						ov.Field(i).Set(other.Field(i))
					}
				}
				if seed%4 == 0 {
					m, _ := metaOf(obj)
					m.SetLabels(map[string]string{"changed": "yes"})
				}
				slow := upstream.UpdateNoErrors(live.DeepCopyObject(), obj.DeepCopyObject(), "updater")
				fast := obj.DeepCopyObject()
				l, o := live.DeepCopyObject(), obj.DeepCopyObject()
				if pl, pn, ok := withoutFields(l, o, equalFields(l, o)); ok {
					pruned[gvr.Resource+"/"+sub]++
					if err := copyManagedFields(fm.UpdateNoErrors(pl, pn, "updater"), fast); err != nil {
						t.Fatal(err)
					}
				} else {
					fast = fm.UpdateNoErrors(live.DeepCopyObject(), fast, "updater")
				}
				if diff := cmp.Diff(entriesWithoutTimes(t, slow), entriesWithoutTimes(t, fast)); diff != "" {
					t.Fatalf("%s %q seed %d: whole objects vs without equal fields:\n%s", gvr, sub, seed, diff)
				}
			}
		}
	}
	for _, must := range []string{"pods/status", "pods/", "nodes/status", "deployments/", "configmaps/"} {
		if pruned[must] == 0 {
			t.Errorf("%s: no update ran without equal fields", must)
		}
	}
}

// randomObject is a random object of res's kind named x, without
// managedFields, for the field manager tests.
func randomObject(res *resource, seed int64) runtime.Object {
	f := randfill.NewWithSeed(seed).NilChance(0.5).NumElements(0, 2).MaxDepth(5).Funcs(
		func(r *runtime.RawExtension, c randfill.Continue) {
			if c.Bool() {
				r.Raw = []byte(`{"k":"v"}`)
			}
		})
	obj := res.newObject()
	f.Fill(obj)
	m, _ := metaOf(obj)
	m.SetManagedFields(nil)
	m.SetName("x")
	obj.GetObjectKind().SetGroupVersionKind(res.gvk())
	return obj
}

// entriesWithoutTimes is obj's managedFields with each time replaced by
// whether there was one.
func entriesWithoutTimes(t *testing.T, obj runtime.Object) []metav1.ManagedFieldsEntry {
	out := managedFieldsOf(t, obj)
	m, _ := metaOf(obj)
	for i, e := range m.GetManagedFields() {
		if e.Time != nil {
			out[i].Manager += " (timed)"
		}
	}
	return out
}

// TestSameVersionConvertsOnlyWhatNeedsIt checks the field manager's
// converter: a typed object of the target version comes back as it is,
// not copied; an unstructured one of that version becomes a typed one;
// a typed one of another version is converted by the scheme.
func TestSameVersionConvertsOnlyWhatNeedsIt(t *testing.T) {
	c := sameVersion{ObjectConvertor: scheme.Scheme}
	gv := corev1.SchemeGroupVersion
	pod := labelledPod("p")
	pod.SetGroupVersionKind(gv.WithKind("Pod"))
	if out, err := c.ConvertToVersion(pod, gv); err != nil || out != runtime.Object(pod) {
		t.Errorf("a v1 Pod to v1: %p %v, want the very object %p", out, err, pod)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "p"}}}
	out, err := c.ConvertToVersion(u, gv)
	if p, ok := out.(*corev1.Pod); err != nil || !ok || p.Name != "p" {
		t.Errorf("an unstructured v1 Pod to v1: %T %v, want a typed Pod", out, err)
	}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d"}}
	dep.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("Deployment"))
	if _, err := c.ConvertToVersion(dep, gv); err == nil {
		t.Error("a Deployment converted to core v1")
	}
}

// TestUpdateFastPathAgrees: for random updates of every built-in kind, on
// the main resource and on status, by a new manager and by one that
// already owns fields, over live objects with several managers (an
// applier among them), recordUpdated either records exactly what
// kube-apiserver's field manager records from the whole objects, times
// included (which entries keep theirs and which take the write's), or
// declines and leaves the object alone.
func TestUpdateFastPathAgrees(t *testing.T) {
	s, _ := newTestServer(t)
	plain := applyconfigurations.NewTypeConverter(scheme.Scheme)
	past := metav1.NewTime(time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC))
	taken, declined := map[string]int{}, map[string]int{}
	for gvr, res := range s.reg.byGVR {
		if res.custom != nil || res.typeConverter() != builtinTypeConverter() {
			continue
		}
		for _, sub := range []string{"", "status"} {
			upstream, err := managedfields.NewDefaultFieldManager(plain, scheme.Scheme, res.defaulter, scheme.Scheme, res.gvk(), res.gvk().GroupVersion(), sub, res.resetFields(sub))
			if err != nil {
				t.Fatal(err)
			}
			creator, err := managedfields.NewDefaultFieldManager(plain, scheme.Scheme, res.defaulter, scheme.Scheme, res.gvk(), res.gvk().GroupVersion(), "", res.resetFields(""))
			if err != nil {
				t.Fatal(err)
			}
			for seed := int64(0); seed < 24; seed++ {
				fill := func(seed int64) runtime.Object {
					obj := randomObject(res, seed)
					m, _ := metaOf(obj)
					m.SetUID("uid-x")
					return obj
				}
				empty := res.newObject()
				empty.GetObjectKind().SetGroupVersionKind(res.gvk())
				live := creator.UpdateNoErrors(empty, fill(seed), "creator")
				// A second manager, on the main resource or status, owns
				// what it changed; with seed%3 == 1 it is the updater.
				second := "other"
				if seed%3 == 1 {
					second = "updater"
				}
				next := fill(seed + 500)
				copyTopLevel(live, next, seed)
				if m, _ := metaOf(next); m != nil {
					m.SetManagedFields(nil)
				}
				live = upstream.UpdateNoErrors(live, next, second)
				lm, _ := metaOf(live)
				entries := lm.GetManagedFields()
				// An applier owning what the creator set.
				if seed%4 == 2 && len(entries) > 0 {
					a := entries[0]
					a.Manager, a.Operation = "applier", metav1.ManagedFieldsOperationApply
					entries = append(entries, a)
				}
				// Irregular entries the fast path must leave to the field
				// manager: another version, a manager twice.
				switch seed % 12 {
				case 5:
					if len(entries) > 0 {
						e := entries[0]
						e.APIVersion = "other.example/v9"
						entries = append(entries, e)
					}
				case 11:
					if len(entries) > 0 {
						entries = append(entries, entries[0])
					}
				}
				for i := range entries {
					entries[i].Time = &past
				}
				lm.SetManagedFields(entries)

				// The update: some top-level fields from another random
				// object, sometimes new labels; the request brings the
				// entries back, or none.
				obj := live.DeepCopyObject()
				copyTopLevel(obj, fill(seed+1000), seed+1)
				m, _ := metaOf(obj)
				if seed%4 == 0 {
					m.SetLabels(map[string]string{"changed": "yes"})
				}
				if seed%2 == 0 {
					// As the server bumps it: never anyone's field.
					m.SetGeneration(m.GetGeneration() + 1)
				}
				if seed%5 == 0 {
					m.SetManagedFields(nil)
				}
				manager := "updater"
				if seed%6 == 3 {
					manager = "creator"
				}
				slow := upstream.UpdateNoErrors(live.DeepCopyObject(), obj.DeepCopyObject(), manager)

				fast := obj.DeepCopyObject()
				before := live.DeepCopyObject()
				key := gvr.Resource + "/" + sub
				if !res.recordUpdated(before, fast, fast, sub, manager, equalFields(before, fast)) {
					declined[key]++
					if !cmp.Equal(fast, obj, cmp.Exporter(func(reflect.Type) bool { return true })) {
						t.Fatalf("%s seed %d: declined but changed the object", key, seed)
					}
					continue
				}
				taken[key]++
				want, got := managedFieldsOf(t, slow), managedFieldsOf(t, fast)
				if diff := cmp.Diff(want, got); diff != "" {
					t.Fatalf("%s seed %d, manager %s: field manager vs fast path:\n%s", key, seed, manager, diff)
				}
				sm, _ := metaOf(slow)
				fm, _ := metaOf(fast)
				for i, e := range sm.GetManagedFields() {
					wantPast := e.Time != nil && e.Time.Equal(&past)
					g := fm.GetManagedFields()[i].Time
					if gotPast := g != nil && g.Equal(&past); wantPast != gotPast || (e.Time == nil) != (g == nil) {
						t.Fatalf("%s seed %d: entry %d (%s) time %v, field manager's %v", key, seed, i, e.Manager, g, e.Time)
					}
				}
			}
		}
	}
	t.Logf("fast path taken: %v", taken)
	t.Logf("declined: %v", declined)
	for _, must := range []string{"pods/status", "pods/", "nodes/status", "leases/", "deployments/", "configmaps/"} {
		if taken[must] == 0 {
			t.Errorf("%s: the fast path never served it (declined %d)", must, declined[must])
		}
	}
	for _, must := range []string{"pods/status", "configmaps/"} {
		if declined[must] == 0 {
			t.Errorf("%s: the fast path never declined", must)
		}
	}
}

// copyTopLevel sets some of to's top-level fields but its metadata to
// from's, chosen by seed.
func copyTopLevel(to, from runtime.Object, seed int64) {
	tv, fv := reflect.ValueOf(to).Elem(), reflect.ValueOf(from).Elem()
	for i := 0; i < tv.NumField(); i++ {
		if tf := tv.Type().Field(i); tf.Type != typeMetaType && tf.Type != objectMetaType && (seed+int64(i))%3 == 0 {
			tv.Field(i).Set(fv.Field(i))
		}
	}
}

// TestCreatorOwnsWhatItSent: through the whole create path, a Pod's
// creator owns the fields it sent and their defaults, but not what
// admission and the strategy added (the service-account volume and
// mounts, the default tolerations, priority, phase and QoS class), as
// kube-apiserver's field manager runs before them; and a status it sent
// on the main resource is not its field either.
func TestCreatorOwnsWhatItSent(t *testing.T) {
	e := newTestEnv(t)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "owned", Labels: map[string]string{"app": "x"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		// Sent on create, reset by the strategy.
		Status: corev1.PodStatus{Message: "from the client"},
	}
	out, err := e.cs.CoreV1().Pods("default").Create(e.ctx, pod, metav1.CreateOptions{FieldManager: "creator"})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Spec.Volumes) == 0 || len(out.Spec.Tolerations) == 0 || out.Spec.Priority == nil || out.Status.Phase == "" {
		t.Fatalf("admission and the strategy added nothing to check against: %+v", out.Spec)
	}
	if len(out.ManagedFields) != 1 || out.ManagedFields[0].Manager != "creator" {
		t.Fatalf("managedFields %+v, want one entry of creator", out.ManagedFields)
	}
	fields := string(out.ManagedFields[0].FieldsV1.Raw)
	for _, want := range []string{`"f:labels"`, `k:{\"name\":\"c\"}`, `"f:image"`, `"f:imagePullPolicy"`, `"f:dnsPolicy"`, `"f:restartPolicy"`, `"f:terminationGracePeriodSeconds"`} {
		if !strings.Contains(fields, want) {
			t.Errorf("creator does not own %s: %s", want, fields)
		}
	}
	for _, not := range []string{`"f:volumes"`, `"f:volumeMounts"`, `"f:tolerations"`, `"f:priority"`, `"f:status"`} {
		if strings.Contains(fields, not) {
			t.Errorf("creator owns %s, which it did not send: %s", not, fields)
		}
	}
}

// TestWebhookBreakingManagedFields: a mutating webhook that leaves a
// create's managedFields invalid gets the field manager's entries put
// back, with kube-apiserver's warning; valid entries it writes stay.
func TestWebhookBreakingManagedFields(t *testing.T) {
	e := newTestEnv(t)
	h := newHookServer(t, func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		var cm corev1.ConfigMap
		if err := json.Unmarshal(req.Object.Raw, &cm); err != nil {
			return &admissionv1.AdmissionResponse{Allowed: false}
		}
		switch cm.Name {
		case "broken":
			return patchResponse(jsonPatch(map[string]any{"op": "replace", "path": "/metadata/managedFields/0/operation", "value": "Bogus"}))
		case "rewritten":
			return patchResponse(jsonPatch(map[string]any{"op": "replace", "path": "/metadata/managedFields/0/manager", "value": "webhook"}))
		}
		return &admissionv1.AdmissionResponse{Allowed: true}
	})
	e.mutating(t, "managedfields", mutatingHook(urlHook("mf.example.com", h, rule(opsCreate, "", "v1", "configmaps"))))
	cs, warnings := e.withWarnings()
	cms := cs.CoreV1().ConfigMaps("default")
	out, err := cms.Create(e.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "broken"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{FieldManager: "creator"})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.ManagedFields) != 1 || out.ManagedFields[0].Manager != "creator" || out.ManagedFields[0].Operation != metav1.ManagedFieldsOperationUpdate {
		t.Errorf("after an invalid patch: managedFields %+v, want creator's Update entry", out.ManagedFields)
	}
	if w := strings.Join(warnings.all(), "\n"); !strings.Contains(w, ".metadata.managedFields was in an invalid state after admission") {
		t.Errorf("warnings %q", w)
	}
	out, err = cms.Create(e.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "rewritten"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{FieldManager: "creator"})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.ManagedFields) != 1 || out.ManagedFields[0].Manager != "webhook" {
		t.Errorf("after a valid patch: managedFields %+v, want the webhook's", out.ManagedFields)
	}
}

// TestUpdateFastPathShared: replicas share their creator's entry, and so
// the fast path's decoded sets; status writes to many of them at once
// must each record their own entries (run with -race to see the sets
// shared, not written).
func TestUpdateFastPathShared(t *testing.T) {
	e := newTestEnv(t)
	pods := e.cs.CoreV1().Pods("default")
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := pods.Create(e.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("r-%d", i), Labels: map[string]string{"app": "r"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}, metav1.CreateOptions{FieldManager: "creator"})
			if err != nil {
				errs <- err
				return
			}
			for j := range 10 {
				p.Status.Phase = corev1.PodRunning
				p.Status.PodIP = fmt.Sprintf("10.42.%d.%d", i, j)
				p.Status.PodIPs = []corev1.PodIP{{IP: p.Status.PodIP}}
				p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionStatus([]string{"True", "False"}[j%2])}}
				if p, err = pods.UpdateStatus(e.ctx, p, metav1.UpdateOptions{FieldManager: "kubelet"}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range n {
		p, err := pods.Get(e.ctx, fmt.Sprintf("r-%d", i), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var managers []string
		for _, m := range p.ManagedFields {
			managers = append(managers, m.Manager+"/"+m.Subresource)
			if m.Manager == "kubelet" && !strings.Contains(string(m.FieldsV1.Raw), fmt.Sprintf(`"k:{\"ip\":\"10.42.%d.9\"}"`, i)) {
				t.Errorf("pod %d: kubelet's entry %s misses its own IP", i, m.FieldsV1.Raw)
			}
		}
		if diff := cmp.Diff([]string{"creator/", "kubelet/status"}, managers); diff != "" {
			t.Errorf("pod %d managers (-want +got):\n%s", i, diff)
		}
	}
}
