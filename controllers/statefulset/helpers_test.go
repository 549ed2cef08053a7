package statefulset

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/kubelet/simulator"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

const timeout = 60 * time.Second

// start runs the controller in e and returns its informers (started).
func start(t *testing.T, e *clustertest.Env) *client.Informers {
	t.Helper()
	inf, _ := clustertest.Start(e, func(inf *client.Informers) (*Controller, error) {
		return New(Config{Client: e.Client, Informers: inf, Logger: e.Log})
	})
	return inf
}

// newSet is a StatefulSet "web" of n replicas selecting app=web, behind
// service "web"; mods change it.
func newSet(n int32, mods ...func(*appsv1.StatefulSet)) *appsv1.StatefulSet {
	s := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    &n,
			ServiceName: "web",
			Selector:    &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1"}}},
			},
		},
	}
	for _, m := range mods {
		m(s)
	}
	return s
}

func readyDelay(d string) func(*appsv1.StatefulSet) {
	return func(s *appsv1.StatefulSet) {
		s.Spec.Template.Annotations = map[string]string{simulator.AnnotationReadyDelay: d}
	}
}

func parallel(s *appsv1.StatefulSet) { s.Spec.PodManagementPolicy = appsv1.ParallelPodManagement }

func claimTemplate(s *appsv1.StatefulSet) {
	s.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Labels: map[string]string{"tier": "db"}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}}
}

func create(t *testing.T, e *clustertest.Env, s *appsv1.StatefulSet) *appsv1.StatefulSet {
	t.Helper()
	out, err := e.Client.Apps.StatefulSets(s.Namespace).Create(e.Ctx, s, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// modify reads, changes and writes set web, retrying on conflict.
func modify(t *testing.T, e *clustertest.Env, mod func(*appsv1.StatefulSet)) {
	t.Helper()
	clustertest.Eventually(t, timeout, func() error {
		s, err := e.Client.Apps.StatefulSets("default").Get(e.Ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		mod(s)
		_, err = e.Client.Apps.StatefulSets("default").Update(e.Ctx, s, metav1.UpdateOptions{})
		return err
	})
}

func getSet(t *testing.T, e *clustertest.Env) *appsv1.StatefulSet {
	t.Helper()
	s, err := e.Client.Apps.StatefulSets("default").Get(e.Ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func pods(t *testing.T, e *clustertest.Env) map[string]corev1.Pod {
	t.Helper()
	list, err := e.Client.Core.Pods("default").List(e.Ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]corev1.Pod{}
	for _, p := range list.Items {
		out[p.Name] = p
	}
	return out
}

// waitPods waits until exactly the named pods exist, Running and Ready,
// each passing check (may be nil), and returns them.
func waitPods(t *testing.T, e *clustertest.Env, check func(*corev1.Pod) error, names ...string) map[string]corev1.Pod {
	t.Helper()
	want := slices.Clone(names)
	sort.Strings(want)
	var got map[string]corev1.Pod
	clustertest.Eventually(t, timeout, func() error {
		got = pods(t, e)
		var have []string
		for name, p := range got {
			have = append(have, name)
			if !isHealthy(&p) {
				return fmt.Errorf("pod %s not Running and Ready", name)
			}
			if check != nil {
				if err := check(&p); err != nil {
					return fmt.Errorf("pod %s: %w", name, err)
				}
			}
		}
		sort.Strings(have)
		if !slices.Equal(have, want) {
			return fmt.Errorf("pods %v, want %v", have, want)
		}
		return nil
	})
	return got
}

func image(img string) func(*corev1.Pod) error {
	return func(p *corev1.Pod) error {
		if got := p.Spec.Containers[0].Image; got != img {
			return fmt.Errorf("image %s, want %s", got, img)
		}
		return nil
	}
}

// podLog checks, through an informer, a condition on the set's pods at
// each of their events and keeps the violations.
type podLog struct {
	mu   sync.Mutex
	errs []string
}

// watchPods calls check (under the log's lock) on every pod event with
// the event's pod and all of web's pods the informer holds after it;
// check returns a violation or "".
func watchPods(t *testing.T, inf *client.Informers, check func(event string, p *corev1.Pod, all map[string]*corev1.Pod) string) *podLog {
	t.Helper()
	l := &podLog{}
	podInf := inf.For(&corev1.Pod{})
	sel := labels.SelectorFromSet(labels.Set{"app": "web"})
	on := func(event string) func(obj any) {
		return func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			p := obj.(*corev1.Pod)
			if !sel.Matches(labels.Set(p.Labels)) {
				return
			}
			all := map[string]*corev1.Pod{}
			for _, o := range podInf.GetStore().List() {
				if q := o.(*corev1.Pod); sel.Matches(labels.Set(q.Labels)) {
					all[q.Name] = q
				}
			}
			l.mu.Lock()
			defer l.mu.Unlock()
			if v := check(event, p, all); v != "" {
				l.errs = append(l.errs, v)
			}
		}
	}
	if _, err := podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    on("add"),
		UpdateFunc: func(_, o any) { on("update")(o) },
		DeleteFunc: on("delete"),
	}); err != nil {
		t.Fatal(err)
	}
	return l
}

func (l *podLog) violations() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.errs)
}

func ptr[T any](v T) *T { return &v }
