package apiserver

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"bonsai.dev/bonsai/store"
)

// TestWatchersGetTheWrittenObject checks the hand-over of a writer's
// object to the watchers of its event: what a protobuf and a JSON watcher
// see after a create, a binding, a status write and an update is what
// the write answered (or a GET then reads), resourceVersion and
// managedFields included; and none of those events was decoded from the
// store's bytes, so the hand-over happened and the writer's later changes
// (its resourceVersion) did not reach the watchers (with -race, it would
// also catch them racing).
func TestWatchersGetTheWrittenObject(t *testing.T) {
	e := newTestEnv(t)
	jsonCfg := *e.cfg
	jsonCfg.ContentType = "application/json"
	jsonCfg.AcceptContentTypes = "application/json"
	pbCfg := *e.cfg
	pbCfg.ContentType = "application/vnd.kubernetes.protobuf"
	pbCfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf"
	var watches []watch.Interface
	for _, cfg := range []*kubernetesConfig{{"json", &jsonCfg}, {"protobuf", &pbCfg}} {
		w, err := kubernetes.NewForConfigOrDie(cfg.rest).CoreV1().Pods("default").Watch(e.ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		watches = append(watches, w)
	}
	before := e.s.events.decoded.Load()
	pods := kubernetes.NewForConfigOrDie(&pbCfg).CoreV1().Pods("default")
	var want []*corev1.Pod
	p, err := pods.Create(e.ctx, labelledPod("p"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, p)
	if err := pods.Bind(e.ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Target: corev1.ObjectReference{Kind: "Node", Name: "n1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if p, err = pods.Get(e.ctx, "p", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	want = append(want, p)
	p = p.DeepCopy()
	p.Status.Phase = corev1.PodRunning
	p.Status.PodIP = "10.42.0.5"
	if p, err = pods.UpdateStatus(e.ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want = append(want, p)
	p = p.DeepCopy()
	p.Labels["tier"] = "web"
	if p, err = pods.Update(e.ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want = append(want, p)

	for i, w := range watches {
		for j, wp := range want {
			select {
			case ev := <-w.ResultChan():
				got, ok := ev.Object.(*corev1.Pod)
				if !ok {
					t.Fatalf("watch %d, event %d: %T %v", i, j, ev.Object, ev.Object)
				}
				if got.ResourceVersion != wp.ResourceVersion || !apiequality.Semantic.DeepEqual(got, wp) {
					t.Errorf("watch %d, event %d (%s):\n got %+v\nwant %+v", i, j, ev.Type, got, wp)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("watch %d: event %d not seen", i, j)
			}
		}
	}
	if n := e.s.events.decoded.Load() - before; n != 0 {
		t.Errorf("%d of %d events were decoded again, not handed over by their writer", n, len(want))
	}
}

type kubernetesConfig struct {
	name string
	rest *rest.Config
}

// TestEventCacheKeepsRecentEvents checks what the cache lets go of: the
// oldest when full; past the newest keep, those older than age.
func TestEventCacheKeepsRecentEvents(t *testing.T) {
	now := time.Unix(1000, 0)
	c := newEventCache(2, 4, time.Second)
	c.now = func() time.Time { return now }
	res := &resource{}
	add := func(rev uint64) {
		c.mu.Lock()
		c.addLocked(sharedEventKey{res, rev})
		c.mu.Unlock()
	}
	has := func(revs ...uint64) {
		t.Helper()
		c.mu.Lock()
		defer c.mu.Unlock()
		if len(c.m) != len(revs) {
			t.Errorf("cache holds %d events, want %v", len(c.m), revs)
		}
		for _, r := range revs {
			if _, ok := c.m[sharedEventKey{res, r}]; !ok {
				t.Errorf("event %d dropped; want %v kept", r, revs)
			}
		}
	}
	for rev := uint64(1); rev <= 5; rev++ {
		add(rev)
	}
	has(2, 3, 4, 5) // full: the oldest went
	now = now.Add(2 * time.Second)
	add(6)
	has(4, 5, 6) // the old ones went, down to the newest two, then 6
	add(7)
	has(5, 6, 7) // 4 went too; 6 and 7 are young enough to stay past keep
	add(8)
	has(6, 7, 8)
}

// TestEventCacheDropsOldRevisionsFirst: a watcher far behind the others
// reads old events; they must not push out the newest ones, which writes
// read their objects from.
func TestEventCacheDropsOldRevisionsFirst(t *testing.T) {
	c := newEventCache(2, 4, time.Hour)
	res := &resource{}
	add := func(rev uint64) *sharedEvent {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.addLocked(sharedEventKey{res, rev})
	}
	kept := func() []uint64 {
		c.mu.Lock()
		defer c.mu.Unlock()
		var revs []uint64
		for k := range c.m {
			revs = append(revs, k.rev)
		}
		slices.Sort(revs)
		return revs
	}
	for _, rev := range []uint64{10, 11, 12} {
		add(rev)
	}
	add(3) // a lagging watcher's event, with room for it
	if got := kept(); !slices.Equal(got, []uint64{3, 10, 11, 12}) {
		t.Fatalf("kept %v", got)
	}
	add(13) // full: the lowest revision goes, not the one added first
	if got := kept(); !slices.Equal(got, []uint64{10, 11, 12, 13}) {
		t.Fatalf("after 13: kept %v, want [10 11 12 13]", got)
	}
	// Older than everything a full cache holds: the caller's alone.
	if e := add(4); e == nil {
		t.Fatal("no entry for an old event")
	}
	if got := kept(); !slices.Equal(got, []uint64{10, 11, 12, 13}) {
		t.Fatalf("an old event pushed out a newer one: kept %v", got)
	}
}

// TestProtobufBytes checks the one-buffer encoding against the
// serializer's own: the same bytes, and no spare capacity a later append
// could write into.
func TestProtobufBytes(t *testing.T) {
	for _, obj := range []runtime.Object{
		&corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"a": "b"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}},
		&corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "c"}},
		&metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Code: 404, Message: "gone"},
	} {
		var want bytes.Buffer
		if err := protobufSerializer.Encode(obj, &want); err != nil {
			t.Fatal(err)
		}
		got, err := protobufBytes(obj)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want.Bytes()) {
			t.Errorf("%T: %x, want %x", obj, got, want.Bytes())
		}
		if cap(got) != len(got) {
			t.Errorf("%T: cap %d for %d bytes", obj, cap(got), len(got))
		}
	}
}

// TestOfferedObjectStaysWithItsKind checks that a core/v1 Event being
// written is handed only to watchers of core/v1 Events: watchers of
// events.k8s.io/v1 Events, stored as core ones, share the store's event
// but must decode their own shape.
func TestOfferedObjectStaysWithItsKind(t *testing.T) {
	s, _ := newTestServer(t)
	core, newer := s.reg.byGVR[gvr("", "v1", "events")], s.reg.byGVR[gvr("events.k8s.io", "v1", "events")]
	if core == nil || newer == nil || newer.storage != core {
		t.Fatalf("events.k8s.io/v1 events are not stored as core/v1 ones: %v %v", core, newer)
	}
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: "default"}, Reason: "Tested"}
	data, err := encodeForStore(core, ev)
	if err != nil {
		t.Fatal(err)
	}
	done := s.events.offer(core, data, ev)
	defer done(0)
	stored := store.Event{Type: store.Added, Key: "/registry/events/default/e", Value: data, Revision: 7}
	if got := s.events.taken(newer, stored); got != nil {
		t.Errorf("an events.k8s.io watcher got the writer's %T", got)
	}
	got, ok := s.events.taken(core, stored).(*corev1.Event)
	if !ok || got.Reason != "Tested" || got.ResourceVersion != "7" {
		t.Errorf("a core watcher got %#v, want the writer's Event at revision 7", got)
	}
}

// labelledPod is a one-container pod labelled app=a.
func labelledPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "a"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
}

// TestWritesReadTheirObjectFromTheEventCache checks that a read of an
// object a recent write left takes the writer's object from the event
// cache: after a create, a binding, a status write, an update, a patch
// and an apply (of a pod and of a custom object) what the cache gives is
// exactly what decoding the stored bytes gives, it is the reader's own
// (changing it changes nothing cached), and an update of each of those
// read it from the cache rather than decoding it.
func TestWritesReadTheirObjectFromTheEventCache(t *testing.T) {
	e := newTestEnv(t)
	pods := e.cs.CoreV1().Pods("default")
	res := e.s.reg.byGVR[gvr("", "v1", "pods")]
	check := func(step string) {
		t.Helper()
		kv, err := e.st.Get(e.ctx, res.key("default", "p"))
		if err != nil {
			t.Fatal(err)
		}
		want, err := decodeStored(res, kv)
		if err != nil {
			t.Fatal(err)
		}
		got, stored := e.s.events.current(res, kv.Revision)
		if got == nil {
			t.Fatalf("%s: the cache has no object at revision %d", step, kv.Revision)
		}
		if !bytes.Equal(stored, kv.Value) {
			t.Fatalf("%s: the cache's stored value differs from the store's", step)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: cached object differs from the decoded one:\n got %+v\nwant %+v", step, got, want)
		}
		p := got.(*corev1.Pod)
		p.Labels["changed"] = "yes"
		p.Spec.Containers[0].Image = "changed"
		p.ResourceVersion = "1"
		if again, _ := e.s.events.current(res, kv.Revision); !reflect.DeepEqual(again, want) {
			t.Fatalf("%s: a reader's change reached the cache: %+v", step, again)
		}
	}
	p, err := pods.Create(e.ctx, labelledPod("p"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	check("create")
	if err := pods.Bind(e.ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Target: corev1.ObjectReference{Kind: "Node", Name: "n1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	check("binding")
	if p, err = pods.Get(e.ctx, "p", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if p, err = pods.UpdateStatus(e.ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	check("status")
	p.Labels["tier"] = "web"
	if _, err = pods.Update(e.ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	check("update")
	if _, err = pods.Patch(e.ctx, "p", types.StrategicMergePatchType, []byte(`{"metadata":{"annotations":{"a":"b"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	check("patch")
	if _, err = pods.Patch(e.ctx, "p", types.ApplyPatchType, []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","labels":{"owner":"me"}}}`), metav1.PatchOptions{FieldManager: "me"}); err != nil {
		t.Fatal(err)
	}
	check("apply")
	// The last three writes and the next read the object the write
	// before them left.
	before := e.s.events.reused.Load()
	if _, err = pods.Patch(e.ctx, "p", types.MergePatchType, []byte(`{"metadata":{"labels":{"tier":"db"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := e.s.events.reused.Load() - before; n != 1 {
		t.Errorf("the patch read %d objects from the cache, want 1", n)
	}
}

// TestWatchBurstOverHTTP2: a burst of events reaches a protobuf watch over
// TLS and HTTP/2 whole, and so does a lone event after it: frames stay
// buffered only while more are waiting, and the last is always flushed.
func TestWatchBurstOverHTTP2(t *testing.T) {
	s, _ := newTestServer(t)
	srv := httptest.NewUnstartedServer(s.Handler())
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: -1}
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf"
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cms := cs.CoreV1().ConfigMaps("default")
	w, err := cms.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	const burst = 300
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := i; j < burst; j += 16 {
				if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("b-%03d", j)}}, metav1.CreateOptions{}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	seen := map[string]bool{}
	wait := func(n int) {
		t.Helper()
		timeout := time.After(5 * time.Second)
		for len(seen) < n {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					t.Fatalf("watch ended after %d events", len(seen))
				}
				if ev.Type == watch.Added {
					seen[ev.Object.(*corev1.ConfigMap).Name] = true
				}
			case <-timeout:
				t.Fatalf("%d of %d events after 5 s", len(seen), n)
			}
		}
	}
	wait(burst)
	wg.Wait()
	// One more, alone: nothing after it would push it out of a buffer.
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "lone"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait(burst + 1)
}

// TestWatchFrameParts checks a watch frame written in parts against the
// WatchEvent marshalled whole, for objects on both sides of each varint
// length boundary, and the JSON line around an object.
func TestWatchFrameParts(t *testing.T) {
	for _, n := range []int{0, 1, 120, 121, 122, 127, 128, 16375, 16376, 16383, 16384, 2097140, 2097152} {
		obj := bytes.Repeat([]byte{0x6b}, n)
		for _, typ := range []watch.EventType{watch.Added, watch.Modified, watch.Deleted, watch.Bookmark, watch.Error} {
			we := metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: obj}}
			whole, err := we.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			want := binary.BigEndian.AppendUint32(nil, uint32(len(whole)))
			want = append(want, whole...)
			head := protobufFrameHead(typ, n)
			if got := append(append([]byte(nil), head...), obj...); !bytes.Equal(got, want) {
				t.Errorf("%s, %d bytes: head %x, want the frame to start %x", typ, n, head, want[:min(len(want), len(head)+4)])
			}
		}
	}
	head, tail := jsonFrameParts(watch.Modified)
	js := []byte(`{"kind":"Pod"}`)
	line := string(head) + string(js) + string(tail)
	var ev struct {
		Type   string          `json:"type"`
		Object json.RawMessage `json:"object"`
	}
	if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.Type != "MODIFIED" || string(ev.Object) != string(js) || line[len(line)-1] != '\n' {
		t.Errorf("JSON line %q: %+v, %v", line, ev, err)
	}
}

// skipCounter counts the reads of keys with suffix that left the value
// out, and the others.
type skipCounter struct {
	store.Store
	suffix        string
	skipped, read atomic.Int64
}

func (c *skipCounter) Get(ctx context.Context, key string) (store.KeyValue, error) {
	if strings.HasSuffix(key, c.suffix) {
		c.read.Add(1)
	}
	return c.Store.Get(ctx, key)
}

func (c *skipCounter) GetUnless(ctx context.Context, key string, have func(uint64) bool) (store.KeyValue, error) {
	kv, err := store.GetUnless(ctx, c.Store, key, have)
	switch {
	case !strings.HasSuffix(key, c.suffix):
	case err == nil && kv.Value == nil:
		c.skipped.Add(1)
	default:
		c.read.Add(1)
	}
	return kv, err
}

// TestWritesSkipTheStoredValue checks that a write of an object a recent
// write left reads only its revision from the store, the event cache
// giving the object and its stored bytes: a binding after a create, a
// read and status writes after it, a repeated status write found to
// change nothing (the stored bytes compared) and left at its
// resourceVersion.
func TestWritesSkipTheStoredValue(t *testing.T) {
	st, err := store.OpenBadger(store.BadgerOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	counted := &skipCounter{Store: st, suffix: "/pods/default/p"}
	_, cs := newServerOn(t, counted, Config{})
	ctx := context.Background()
	pods := cs.CoreV1().Pods("default")
	if _, err := pods.Create(ctx, labelledPod("p"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	skipped, read := counted.skipped.Load(), counted.read.Load()
	if err := pods.Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Target: corev1.ObjectReference{Kind: "Node", Name: "n1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := pods.Get(ctx, "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue})
	if p, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	same, err := pods.UpdateStatus(ctx, p.DeepCopy(), metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if same.ResourceVersion != p.ResourceVersion {
		t.Errorf("a status write changing nothing moved the resourceVersion from %s to %s", p.ResourceVersion, same.ResourceVersion)
	}
	if n := counted.skipped.Load() - skipped; n != 4 {
		t.Errorf("%d requests read only the revision, want 4 (the binding, the GET, both status writes)", n)
	}
	if n := counted.read.Load() - read; n != 0 {
		t.Errorf("%d reads of the value, want none", n)
	}
	got, err := pods.Get(ctx, "p", metav1.GetOptions{})
	if err != nil || got.Spec.NodeName != "n1" || got.Status.Phase != corev1.PodRunning || got.ResourceVersion != p.ResourceVersion {
		t.Errorf("after the writes: %v %+v", err, got)
	}
}
