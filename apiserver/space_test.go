package apiserver

import (
	"errors"
	"fmt"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"bonsai.dev/bonsai/store"
)

// TestEventsExpireThroughBothAPIs: with an event TTL, Events written
// through core/v1 and through events.k8s.io/v1 go once the TTL has passed
// since their last write, and watchers of both APIs see them deleted; an
// update restarts the TTL; other objects stay.
func TestEventsExpireThroughBothAPIs(t *testing.T) {
	const ttl = 2 * time.Second
	st, err := store.OpenBadger(store.BadgerOptions{Dir: t.TempDir(), Expire: []store.ExpiryRule{EventExpiry(ttl)}})
	if err != nil {
		t.Fatal(err)
	}
	_, cs := newServerOn(t, st, Config{})
	ctx := t.Context()
	coreW, err := cs.CoreV1().Events("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer coreW.Stop()
	newW, err := cs.EventsV1().Events("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer newW.Stop()

	written := map[string]time.Time{}
	written["core"] = time.Now()
	core, err := cs.CoreV1().Events("default").Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "core"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "p", Namespace: "default"},
		Reason:         "Pulled", Message: "pulled", Type: "Normal", Count: 1,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	written["new"] = time.Now()
	if _, err := cs.EventsV1().Events("default").Create(ctx, &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: "new"}, EventTime: metav1.NowMicro(), Regarding: corev1.ObjectReference{Kind: "Node", Name: "n"},
		Reason: "Started", Note: "started", Type: "Normal", Action: "Start", ReportingController: "bonsai/kubelet", ReportingInstance: "n",
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm("stays", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl / 2)
	// The kubelet's way: the count goes up, the TTL starts again.
	core.Count = 2
	written["core"] = time.Now()
	if _, err := cs.CoreV1().Events("default").Update(ctx, core, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	for _, w := range []struct {
		api string
		w   watch.Interface
	}{{"core/v1", coreW}, {"events.k8s.io/v1", newW}} {
		gone := map[string]time.Time{}
		timeout := time.After(ttl + 15*time.Second)
		for len(gone) < 2 {
			select {
			case ev, ok := <-w.w.ResultChan():
				if !ok {
					t.Fatalf("%s watch ended", w.api)
				}
				if ev.Type != watch.Deleted {
					continue
				}
				m, err := metaOf(ev.Object)
				if err != nil {
					t.Fatal(err)
				}
				if _, seen := gone[m.GetName()]; !seen {
					gone[m.GetName()] = time.Now()
				}
			case <-timeout:
				t.Fatalf("%s watch: after %v only %v were deleted", w.api, ttl+15*time.Second, gone)
			}
		}
		for name, at := range gone {
			lived := at.Sub(written[name])
			t.Logf("%s watch: event %s deleted %v after its last write (TTL %v)", w.api, name, lived.Round(10*time.Millisecond), ttl)
			if lived < ttl {
				t.Errorf("%s: event %s deleted %v after its last write, before the TTL", w.api, name, lived)
			}
		}
	}
	for _, name := range []string{"core", "new"} {
		if _, err := cs.CoreV1().Events("default").Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("core/v1 get of expired %s: %v, want 404", name, err)
		}
		if _, err := cs.EventsV1().Events("default").Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("events.k8s.io get of expired %s: %v, want 404", name, err)
		}
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "stays", metav1.GetOptions{}); err != nil {
		t.Errorf("a ConfigMap under no TTL: %v", err)
	}
}

// TestQuotaThroughTheAPI: past the store's quota a create is answered as
// kube-apiserver answers etcd's NOSPACE alarm, a 500 with no reason, and
// with a message that says what is full and what to do; reads and
// deletes go on, and once objects are deleted creates succeed again
// without a restart.
func TestQuotaThroughTheAPI(t *testing.T) {
	st, err := store.OpenBadger(store.BadgerOptions{Dir: t.TempDir(), MemoryMB: 6, QuotaBytes: 40 << 20})
	if err != nil {
		t.Fatal(err)
	}
	_, cs := newServerOn(t, st, Config{})
	ctx := t.Context()
	rnd := rand.New(rand.NewSource(1))
	big := func(name string) *corev1.ConfigMap {
		b := make([]byte, 900<<10)
		rnd.Read(b)
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, BinaryData: map[string][]byte{"blob": b}}
	}
	var names []string
	var refused error
	for i := 0; i < 80; i++ {
		name := fmt.Sprintf("big-%02d", i)
		if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, big(name), metav1.CreateOptions{}); err != nil {
			refused = err
			break
		}
		names = append(names, name)
	}
	var se *apierrors.StatusError
	if !errors.As(refused, &se) {
		t.Fatalf("create past the quota after %d objects: %v, want a Status", len(names), refused)
	}
	s := se.Status()
	t.Logf("after %d objects of 900 KiB: %d %q %q", len(names), s.Code, s.Reason, s.Message)
	if s.Code != http.StatusInternalServerError || s.Reason != metav1.StatusReasonUnknown {
		t.Errorf("code %d reason %q, want 500 and no reason (kube-apiserver's answer to etcd's NOSPACE)", s.Code, s.Reason)
	}
	for _, want := range []string{"database space exceeded", "--quota-backend-bytes", "Delete objects"} {
		if !strings.Contains(s.Message, want) {
			t.Errorf("message %q does not say %q", s.Message, want)
		}
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, names[0], metav1.GetOptions{}); err != nil {
		t.Fatalf("get over the quota: %v", err)
	}
	if l, err := cs.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) < len(names) {
		t.Fatalf("list over the quota: %v", err)
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm("small", map[string]string{"a": strings.Repeat("x", 600<<10)}), metav1.CreateOptions{}); err == nil {
		t.Log("(a smaller object still fit)")
	}
	deleted := time.Now()
	for _, n := range names {
		if err := cs.CoreV1().ConfigMaps("default").Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete over the quota: %v", err)
		}
	}
	for {
		_, err := cs.CoreV1().ConfigMaps("default").Create(ctx, big("after"), metav1.CreateOptions{})
		if err == nil {
			break
		}
		if time.Since(deleted) > 60*time.Second {
			t.Fatalf("creates still refused 60 s after the deletes: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("creates resumed %v after the deletes", time.Since(deleted).Round(100*time.Millisecond))
}

// TestStorageSpaceStatus: a store's space refusal, however wrapped and
// on whichever path it reaches the client, is a 500 with no reason whose
// message is the store's.
func TestStorageSpaceStatus(t *testing.T) {
	res := builtinResourceFor(t, "configmaps")
	for _, se := range []*store.SpaceError{
		{Cause: store.ErrQuotaExceeded, Where: "/var/lib/bonsai/db", Have: 3 << 30, Limit: 2 << 30, Deletes: true},
		{Cause: store.ErrDiskFull, Where: "/var/lib/bonsai/db", Have: 1 << 20, Limit: 40 << 20, Deletes: true},
		{Cause: store.ErrQuotaExceeded, Where: "http://127.0.0.1:2379", Deletes: true, Backend: errors.New("etcdserver: mvcc: database space exceeded")},
	} {
		for _, err := range []error{se, fmt.Errorf("update status: %w", se)} {
			got := storeError(err, res, "x")
			var st apierrors.APIStatus
			if !errors.As(got, &st) {
				t.Fatalf("storeError(%v) = %T", err, got)
			}
			if s := st.Status(); s.Code != 500 || s.Reason != metav1.StatusReasonUnknown || s.Message != se.Error() {
				t.Errorf("storeError: %d %q %q, want 500, no reason, %q", s.Code, s.Reason, s.Message, se.Error())
			}
			rec := httptest.NewRecorder()
			writeError(rec, err)
			if rec.Code != 500 || !strings.Contains(rec.Body.String(), "space") || strings.Contains(rec.Body.String(), "Internal error occurred") {
				t.Errorf("writeError: %d %s", rec.Code, rec.Body)
			}
		}
	}
}

func builtinResourceFor(t *testing.T, resource string) *resource {
	t.Helper()
	for _, r := range builtinResources() {
		if r.gvr.Resource == resource && r.gvr.Group == "" {
			return r
		}
	}
	t.Fatalf("no resource %s", resource)
	return nil
}
