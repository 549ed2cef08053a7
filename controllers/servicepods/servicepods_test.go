package servicepods

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"
)

func svc(ns, name string, sel map[string]string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{Selector: sel}}
}

func pod(ns, name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, ResourceVersion: "1"},
		Status: corev1.PodStatus{PodIP: "10.0.0.1", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
}

func indexes(t *testing.T, svcs []*corev1.Service, pods []*corev1.Pod) (services, podIdx cache.Indexer) {
	t.Helper()
	services = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{serviceSelectorIndex: serviceSelectorKeys})
	podIdx = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{podLabelIndex: podLabelKeys, cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, s := range svcs {
		if err := services.Add(s); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range pods {
		if err := podIdx.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	return services, podIdx
}

var testServices = []*corev1.Service{
	svc("a", "web", map[string]string{"app": "web"}),
	svc("a", "web-canary", map[string]string{"app": "web", "track": "canary"}),
	svc("a", "db", map[string]string{"app": "db"}),
	svc("a", "manual", nil),
	svc("a", "everything", map[string]string{}),
	svc("b", "web", map[string]string{"app": "web"}),
}

func TestServicesForPod(t *testing.T) {
	services, _ := indexes(t, testServices, nil)
	tests := []struct {
		pod  *corev1.Pod
		want []string
	}{
		{pod("a", "p", map[string]string{"app": "web"}), []string{"a/everything", "a/web"}},
		{pod("a", "p", map[string]string{"app": "web", "track": "canary"}), []string{"a/everything", "a/web", "a/web-canary"}},
		{pod("a", "p", map[string]string{"app": "db", "track": "canary"}), []string{"a/db", "a/everything"}},
		{pod("a", "p", nil), []string{"a/everything"}},
		{pod("b", "p", map[string]string{"app": "web"}), []string{"b/web"}},
		{pod("c", "p", map[string]string{"app": "web"}), []string{}},
	}
	for _, tc := range tests {
		got, err := ServicesForPod(services, tc.pod)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, sets.List(got)); diff != "" {
			t.Errorf("pod %s %v (-want +got):\n%s", tc.pod.Namespace, tc.pod.Labels, diff)
		}
	}
}

func TestPodsForService(t *testing.T) {
	pods := []*corev1.Pod{
		pod("a", "web-1", map[string]string{"app": "web"}),
		pod("a", "web-2", map[string]string{"app": "web", "track": "canary"}),
		pod("a", "db-1", map[string]string{"app": "db", "track": "canary"}),
		pod("b", "web-1", map[string]string{"app": "web"}),
	}
	_, podIdx := indexes(t, nil, pods)
	tests := []struct {
		svc  *corev1.Service
		want []string
	}{
		{testServices[0], []string{"web-1", "web-2"}},
		{testServices[1], []string{"web-2"}},
		{testServices[2], []string{"db-1"}},
		{testServices[3], nil},
		{testServices[4], []string{"db-1", "web-1", "web-2"}},
		{testServices[5], []string{"web-1"}},
	}
	for _, tc := range tests {
		got, err := PodsForService(podIdx, tc.svc)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range got {
			names = append(names, p.Name)
		}
		names = sets.List(sets.New(names...))
		if len(names) == 0 {
			names = nil
		}
		if diff := cmp.Diff(tc.want, names); diff != "" {
			t.Errorf("Service %s/%s (-want +got):\n%s", tc.svc.Namespace, tc.svc.Name, diff)
		}
	}
}

func TestServicesToUpdateOnPodChange(t *testing.T) {
	services, _ := indexes(t, testServices, nil)
	now := metav1.NewTime(time.Unix(1, 0))
	tests := []struct {
		name string
		mod  func(*corev1.Pod)
		want []string
	}{
		{name: "unrelated status change: nothing", mod: func(p *corev1.Pod) { p.Status.Message = "x" }, want: []string{}},
		{name: "readiness: its Services", mod: func(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse },
			want: []string{"a/everything", "a/web"}},
		{name: "IP: its Services", mod: func(p *corev1.Pod) { p.Status.PodIP = "10.0.0.2" }, want: []string{"a/everything", "a/web"}},
		{name: "deletion: its Services", mod: func(p *corev1.Pod) { p.DeletionTimestamp = &now }, want: []string{"a/everything", "a/web"}},
		{name: "finished: its Services", mod: func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }, want: []string{"a/everything", "a/web"}},
		{name: "labels only: the Services joined and left", mod: func(p *corev1.Pod) { p.Labels = map[string]string{"app": "db"} },
			want: []string{"a/db", "a/web"}},
		{name: "labels and readiness: all Services before and after", mod: func(p *corev1.Pod) {
			p.Labels = map[string]string{"app": "db"}
			p.Status.Conditions[0].Status = corev1.ConditionFalse
		}, want: []string{"a/db", "a/everything", "a/web"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			old := pod("a", "p", map[string]string{"app": "web"})
			cur := old.DeepCopy()
			cur.ResourceVersion = "2"
			tc.mod(cur)
			got, err := ServicesToUpdateOnPodChange(services, old, cur)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, sets.List(got)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	t.Run("resync: nothing", func(t *testing.T) {
		p := pod("a", "p", map[string]string{"app": "web"})
		if got, _ := ServicesToUpdateOnPodChange(services, p, p.DeepCopy()); got.Len() != 0 {
			t.Errorf("resync queued %v", sets.List(got))
		}
	})
}

func TestTriggerTimes(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	s := svc("a", "web", map[string]string{"app": "web"})
	s.CreationTimestamp = metav1.NewTime(t0)
	readyAt := func(name string, d time.Duration) *corev1.Pod {
		p := pod("a", name, nil)
		p.Status.Conditions[0].LastTransitionTime = metav1.NewTime(at(d))
		return p
	}
	tt := NewTriggerTimes()
	steps := []struct {
		name string
		pods []*corev1.Pod
		want time.Time
	}{
		{name: "first sync: the Service's creation", pods: []*corev1.Pod{readyAt("p1", 5*time.Second)}, want: t0},
		{name: "nothing new: no trigger", pods: []*corev1.Pod{readyAt("p1", 5*time.Second)}},
		{name: "two pods changed: the earliest", pods: []*corev1.Pod{readyAt("p1", 9*time.Second), readyAt("p2", 7*time.Second)}, want: at(7 * time.Second)},
		{name: "a pod gone: no trigger", pods: []*corev1.Pod{readyAt("p1", 9*time.Second)}},
	}
	for _, st := range steps {
		if got := tt.Compute("a/web", s, st.pods); !got.Equal(st.want) {
			t.Errorf("%s: %v, want %v", st.name, got, st.want)
		}
	}
	tt.Forget("a/web")
	if got := tt.Compute("a/web", s, nil); !got.Equal(t0) {
		t.Errorf("after Forget: %v, want the Service's creation again", got)
	}
}
