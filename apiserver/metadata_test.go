package apiserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

// The garbage collector and the namespace controller work through
// client-go's metadata client: every verb answers with
// PartialObjectMetadata, and a delete's propagationPolicy sets the
// collector's finalizers as kube-apiserver does.
func TestMetadataClient(t *testing.T) {
	e := newTestEnv(t)
	mc, err := metadata.NewForConfig(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	cms := mc.Resource(corev1.SchemeGroupVersion.WithResource("configmaps")).Namespace("default")
	for _, name := range []string{"plain", "foreground", "orphan", "background"} {
		c := cm(name, map[string]string{"big": "value"})
		c.Labels = map[string]string{"app": "gc"}
		if _, err := e.cs.CoreV1().ConfigMaps("default").Create(e.ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	w, err := cms.Watch(e.ctx, metav1.ListOptions{LabelSelector: "app=gc"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	got, err := cms.Get(e.ctx, "plain", metav1.GetOptions{})
	if err != nil || got.Name != "plain" || got.UID == "" || got.Labels["app"] != "gc" {
		t.Fatalf("get: %+v %v", got, err)
	}
	// What the metadata client asks for is what the server sends:
	// protobuf first, JSON to a client that takes only JSON.
	hc, err := rest.HTTPClientFor(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ accept, contentType string }{
		{"application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json", "application/vnd.kubernetes.protobuf"},
		{"application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json", "application/json"},
	} {
		req, _ := http.NewRequestWithContext(e.ctx, "GET", e.cfg.Host+"/api/v1/namespaces/default/configmaps/plain", nil)
		req.Header.Set("Accept", c.accept)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || resp.Header.Get("Content-Type") != c.contentType {
			t.Fatalf("PartialObjectMetadata get as %s: %s %s %v", c.accept, resp.Status, resp.Header.Get("Content-Type"), err)
		}
		var m metav1.PartialObjectMetadata
		if c.contentType == "application/json" {
			err = json.Unmarshal(raw, &m)
		} else {
			_, _, err = protobufSerializer.Decode(raw, nil, &m)
		}
		if err != nil || !bytes.Contains(raw, []byte("PartialObjectMetadata")) || m.Name != "plain" || bytes.Contains(raw, []byte("value")) {
			t.Fatalf("PartialObjectMetadata get as %s: %q %v", c.contentType, raw, err)
		}
	}
	list, err := cms.List(e.ctx, metav1.ListOptions{LabelSelector: "app=gc"})
	if err != nil || len(list.Items) != 4 || list.ResourceVersion == "" {
		t.Fatalf("list: %d items, %v", len(list.Items), err)
	}
	// Decoded from the metadata alone, it is the whole objects' metadata.
	whole, err := e.cs.CoreV1().ConfigMaps("default").List(e.ctx, metav1.ListOptions{LabelSelector: "app=gc"})
	if err != nil || len(whole.Items) != len(list.Items) {
		t.Fatalf("typed list: %v", err)
	}
	for i := range whole.Items {
		if !cmp.Equal(list.Items[i].ObjectMeta, whole.Items[i].ObjectMeta) {
			t.Errorf("metadata list item %d differs from the object's metadata: %s", i, cmp.Diff(whole.Items[i].ObjectMeta, list.Items[i].ObjectMeta))
		}
	}
	if one, err := cms.List(e.ctx, metav1.ListOptions{FieldSelector: "metadata.name=plain"}); err != nil || len(one.Items) != 1 || one.Items[0].Name != "plain" {
		t.Fatalf("metadata list by field: %+v %v", one, err)
	}
	patched, err := cms.Patch(e.ctx, "plain", types.MergePatchType,
		[]byte(fmt.Sprintf(`{"metadata":{"uid":%q,"resourceVersion":%q,"finalizers":["example.com/hold"]}}`, got.UID, got.ResourceVersion)), metav1.PatchOptions{})
	if err != nil || !cmp.Equal(patched.Finalizers, []string{"example.com/hold"}) {
		t.Fatalf("patch: %+v %v", patched, err)
	}
	// A merge patch pinning a resourceVersion no longer current conflicts.
	if _, err := cms.Patch(e.ctx, "plain", types.MergePatchType,
		[]byte(fmt.Sprintf(`{"metadata":{"resourceVersion":%q,"finalizers":null}}`, got.ResourceVersion)), metav1.PatchOptions{}); !apierrors.IsConflict(err) {
		t.Fatalf("stale patch: %v, want Conflict", err)
	}

	for name, want := range map[string][]string{
		"foreground": {metav1.FinalizerDeleteDependents},
		"orphan":     {metav1.FinalizerOrphanDependents},
	} {
		policy := metav1.DeletePropagationForeground
		if name == "orphan" {
			policy = metav1.DeletePropagationOrphan
		}
		if err := cms.Delete(e.ctx, name, metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil {
			t.Fatal(err)
		}
		got, err := cms.Get(e.ctx, name, metav1.GetOptions{})
		if err != nil || got.DeletionTimestamp == nil || !cmp.Equal(got.Finalizers, want) {
			t.Errorf("%s delete: %+v %v, want finalizers %v", policy, got, err, want)
		}
	}
	background := metav1.DeletePropagationBackground
	uid := types.UID("not-its-uid")
	if err := cms.Delete(e.ctx, "background", metav1.DeleteOptions{PropagationPolicy: &background, Preconditions: &metav1.Preconditions{UID: &uid}}); !apierrors.IsConflict(err) {
		t.Fatalf("delete with another uid as precondition: %v, want Conflict", err)
	}
	if err := cms.Delete(e.ctx, "background", metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Get(e.ctx, "background", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("background delete: %v", err)
	}
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-w.ResultChan():
			if ev.Type == watch.Deleted {
				if m, ok := ev.Object.(*metav1.PartialObjectMetadata); !ok || m.Name != "background" {
					t.Fatalf("watch event %s %T %+v", ev.Type, ev.Object, ev.Object)
				}
				return
			}
			if _, ok := ev.Object.(*metav1.PartialObjectMetadata); !ok {
				t.Fatalf("watch event %s of %T", ev.Type, ev.Object)
			}
		case <-timeout:
			t.Fatal("no delete event on the metadata watch")
		}
	}
}

// deletecollection deletes what the selector picks, in parallel, and
// leaves objects held by finalizers marked for deletion.
func TestDeleteCollection(t *testing.T) {
	e := newTestEnv(t)
	cms := e.cs.CoreV1().ConfigMaps("default")
	const n = 200
	for i := range n {
		c := cm(fmt.Sprintf("cm-%03d", i), nil)
		if i%2 == 0 {
			c.Labels = map[string]string{"doomed": "yes"}
		}
		if i%50 == 0 {
			c.Finalizers = []string{"example.com/hold"}
		}
		if _, err := cms.Create(e.ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cms.DeleteCollection(e.ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "doomed=yes"}); err != nil {
		t.Fatal(err)
	}
	list, err := cms.List(e.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var held, kept []string
	for _, c := range list.Items {
		switch {
		case c.Labels["doomed"] == "yes" && c.DeletionTimestamp != nil:
			held = append(held, c.Name)
		case c.Labels["doomed"] == "yes":
			t.Errorf("%s picked by the selector was not deleted", c.Name)
		case c.DeletionTimestamp != nil:
			t.Errorf("%s not picked by the selector was deleted", c.Name)
		default:
			kept = append(kept, c.Name)
		}
	}
	if d := cmp.Diff([]string{"cm-000", "cm-050", "cm-100", "cm-150"}, held); d != "" {
		t.Errorf("objects held by finalizers (-want +got):\n%s", d)
	}
	if len(kept) != n/2 {
		t.Errorf("%d objects outside the selector left, want %d", len(kept), n/2)
	}
}

// A delete without preconditions racing unconditional writes to the same
// object succeeds, as on kube-apiserver: the store may refuse its
// compare-and-swap while the write that won is still on its way to disk,
// and the delete must wait for it rather than give up.
func TestDeleteRacingWrites(t *testing.T) {
	e := newTestEnv(t)
	cms := e.cs.CoreV1().ConfigMaps("default")
	for round := range 20 {
		name := fmt.Sprintf("raced-%d", round)
		if _, err := cms.Create(e.ctx, cm(name, nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					patch := fmt.Sprintf(`{"data":{"w%d":"%d"}}`, w, i)
					if _, err := cms.Patch(e.ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); apierrors.IsNotFound(err) {
						return
					}
				}
			}()
		}
		time.Sleep(20 * time.Millisecond)
		err := cms.Delete(e.ctx, name, metav1.DeleteOptions{})
		close(stop)
		wg.Wait()
		if err != nil {
			t.Fatalf("round %d: delete racing 8 writers: %v", round, err)
		}
	}
}

// TestDeleteCollectionAnswersTheList: deletecollection answers a list of
// the kind with what it deleted, as listed, as kube-apiserver does (the
// clients' typed calls read it as a Status; their raw answers are the
// list). bonsai answered a bare Success Status.
func TestDeleteCollectionAnswersTheList(t *testing.T) {
	e := newTestEnv(t)
	cms := e.cs.CoreV1().ConfigMaps("default")
	for _, name := range []string{"a", "b", "keep"} {
		c := cm(name, nil)
		if name != "keep" {
			c.Labels = map[string]string{"doomed": "yes"}
		}
		if _, err := cms.Create(e.ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := e.cs.CoreV1().RESTClient().Delete().Namespace("default").Resource("configmaps").
		Param("labelSelector", "doomed=yes").Do(e.ctx).Raw()
	if err != nil {
		t.Fatal(err)
	}
	var got corev1.ConfigMapList
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range got.Items {
		names = append(names, c.Name)
	}
	if got.Kind != "ConfigMapList" || got.APIVersion != "v1" || got.ResourceVersion == "" || !slices.Equal(names, []string{"a", "b"}) {
		t.Errorf("deletecollection answered %s %s resourceVersion %q items %v; want a ConfigMapList of a and b", got.APIVersion, got.Kind, got.ResourceVersion, names)
	}
	left, err := cms.List(e.ctx, metav1.ListOptions{})
	if err != nil || len(left.Items) != 1 || left.Items[0].Name != "keep" {
		t.Errorf("after deletecollection: %v %v", left, err)
	}
}
