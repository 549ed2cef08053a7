package apiserver

import (
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"testing"

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
			upstream, err := managedfields.NewDefaultFieldManager(plain, scheme.Scheme, defaulter{}, scheme.Scheme, res.gvk(), res.gvk().GroupVersion(), sub, res.resetFields(sub))
			if err != nil {
				t.Fatal(err)
			}
			for seed := int64(0); seed < 20; seed++ {
				fill := func(seed int64) runtime.Object {
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
				if pl, pn, ok := withoutEqualFields(live.DeepCopyObject(), obj.DeepCopyObject()); ok {
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
	c := sameVersion{scheme.Scheme}
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
