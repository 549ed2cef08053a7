package apiserver

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"bonsai.dev/bonsai/client"
)

// plainTransport hides the in-process transport's hand-over: its
// watches are encoded, piped and decoded as over the network.
type plainTransport struct{ rt http.RoundTripper }

func (p plainTransport) RoundTrip(r *http.Request) (*http.Response, error) { return p.rt.RoundTrip(r) }

// recordedEvents are what an informer's handlers saw, in order.
type recordedEvents struct {
	mu  sync.Mutex
	evs []recordedEvent
}

type recordedEvent struct {
	typ string
	obj any
}

func (r *recordedEvents) add(typ string, obj any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, recordedEvent{typ, obj})
}

func (r *recordedEvents) get() []recordedEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recordedEvent(nil), r.evs...)
}

// TestInProcessWatchesHandOverObjects checks the hand-over of watch
// events to in-process informers: an informer on the in-process config
// sees, event for event, exactly the objects an informer whose watch is
// encoded and decoded sees (through a create, a binding, status writes,
// updates, a patch, a graceful and a final delete, and a pod that only
// the field selector lets in), and so does a metadata informer; their
// watches go through the sink, and stopping a watch ends the server's.
func TestInProcessWatchesHandOverObjects(t *testing.T) {
	e := newTestEnv(t)
	plain := rest.CopyConfig(e.cfg)
	plain.Transport = plainTransport{e.cfg.Transport}

	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	var got [2][3]recordedEvents // [handed over, decoded][all, selected, metadata]
	for i, cfg := range []*rest.Config{e.cfg, plain} {
		f := client.NewInformers(cfg)
		meta, err := metadata.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		metaInf := cache.NewSharedIndexInformer(client.MetadataListWatch(cfg, meta, corev1.SchemeGroupVersion.WithResource("pods")), &metav1.PartialObjectMetadata{}, 0, cache.Indexers{})
		go metaInf.RunWithContext(ctx)
		for j, inf := range []cache.SharedIndexInformer{f.For(&corev1.Pod{}), f.ForFields(&corev1.Pod{}, fields.OneTermEqualSelector("spec.nodeName", "n1")), metaInf} {
			rec := &got[i][j]
			if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
				AddFunc:    func(obj any) { rec.add("add", obj) },
				UpdateFunc: func(_, obj any) { rec.add("update", obj) },
				DeleteFunc: func(obj any) { rec.add("delete", obj) },
			}); err != nil {
				t.Fatal(err)
			}
		}
		f.Start(ctx)
		if !f.WaitForCacheSync(ctx) || !cache.WaitForCacheSync(ctx.Done(), metaInf.HasSynced) {
			t.Fatal("informers did not sync")
		}
	}
	if n := e.s.handingOver.Load(); n != 3 {
		t.Fatalf("%d watches handed over, want the in-process informers' 3", n)
	}

	pods := e.cs.CoreV1().Pods("default")
	p, err := pods.Create(e.ctx, labelledPod("p"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Create(e.ctx, labelledPod("other"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pods.Bind(e.ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Target: corev1.ObjectReference{Kind: "Node", Name: "n1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if p, err = pods.Get(e.ctx, "p", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.PodIP = "10.42.0.9"
	if p, err = pods.UpdateStatus(e.ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	p.Labels["tier"] = "web"
	if _, err = pods.Update(e.ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err = pods.Patch(e.ctx, "p", types.MergePatchType, []byte(`{"metadata":{"annotations":{"a":"b"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pods.Delete(e.ctx, "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pods.Delete(e.ctx, "p", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	const wantAll, wantSelected = 8, 6 // the selected watch sees p from its binding on
	deadline := time.Now().Add(10 * time.Second)
	for len(got[0][0].get()) < wantAll || len(got[1][0].get()) < wantAll || len(got[0][1].get()) < wantSelected || len(got[1][1].get()) < wantSelected ||
		len(got[0][2].get()) < wantAll || len(got[1][2].get()) < wantAll {
		if time.Now().After(deadline) {
			t.Fatalf("events seen: handed over %d/%d/%d, decoded %d/%d/%d", len(got[0][0].get()), len(got[0][1].get()), len(got[0][2].get()),
				len(got[1][0].get()), len(got[1][1].get()), len(got[1][2].get()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	for j, name := range []string{"every pod", "pods on n1", "pods' metadata"} {
		handed, decoded := got[0][j].get(), got[1][j].get()
		if len(handed) != len(decoded) {
			t.Errorf("%s: %d events handed over, %d decoded", name, len(handed), len(decoded))
			continue
		}
		for k := range handed {
			if handed[k].typ != decoded[k].typ || !reflect.DeepEqual(handed[k].obj, decoded[k].obj) {
				t.Errorf("%s, event %d: handed over %s %+v\ndecoded %s %+v", name, k, handed[k].typ, handed[k].obj, decoded[k].typ, decoded[k].obj)
			}
		}
	}

	// The informer's objects are its own: changing them (which no
	// informer user may do) changes nothing the server holds.
	for _, ev := range got[0][0].get() {
		if p, ok := ev.obj.(*corev1.Pod); ok {
			p.Labels["changed"] = "yes"
			p.Spec.Containers[0].Image = "changed"
		}
	}
	e.s.events.mu.Lock()
	for k, ev := range e.s.events.m {
		if p, ok := ev.obj.(*corev1.Pod); ok && (p.Labels["changed"] != "" || p.Spec.Containers[0].Image == "changed") {
			t.Errorf("the change of a handed-over pod reached the event cache's event %d", k.rev)
		}
	}
	e.s.events.mu.Unlock()

	// A watch stopped by its client ends at the server, even with no
	// event to send, and its events channel closes.
	rc, err := client.Core(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	now, err := pods.List(e.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	req := rc.Get().Resource("pods").VersionedParams(&metav1.ListOptions{Watch: true, ResourceVersion: now.ResourceVersion}, metav1.ParameterCodec)
	w, err := client.WatchHandedOver(e.ctx, req, runtime.Object.DeepCopyObject, func(context.Context) (watch.Interface, error) {
		return nil, errors.New("not handed over")
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := e.s.handingOver.Load(); n != 4 {
		t.Errorf("%d watches handed over, want 4", n)
	}
	w.Stop()
	for deadline := time.Now().Add(10 * time.Second); e.s.handingOver.Load() != 3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a stopped watch is still served: %d handed over", e.s.handingOver.Load())
		}
	}
	for range w.ResultChan() {
	}

	cancel()
	for deadline := time.Now().Add(10 * time.Second); e.s.handingOver.Load() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d handed-over watches still served after their informers stopped", e.s.handingOver.Load())
		}
	}
}
