package daemonset

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/kit"
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

// newDS is a DaemonSet selecting app=name; mod may change it.
func newDS(name string, mod func(*appsv1.DaemonSet)) *appsv1.DaemonSet {
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1"}}},
			},
		},
	}
	if mod != nil {
		mod(ds)
	}
	return ds
}

func create(t *testing.T, e *clustertest.Env, ds *appsv1.DaemonSet) *appsv1.DaemonSet {
	t.Helper()
	out, err := e.Client.Apps.DaemonSets(ds.Namespace).Create(e.Ctx, ds, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// modify reads, changes and writes a DaemonSet, retrying on conflict.
func modify(t *testing.T, e *clustertest.Env, name string, mod func(*appsv1.DaemonSet)) *appsv1.DaemonSet {
	t.Helper()
	var out *appsv1.DaemonSet
	clustertest.Eventually(t, timeout, func() error {
		ds, err := e.Client.Apps.DaemonSets("default").Get(e.Ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mod(ds)
		out, err = e.Client.Apps.DaemonSets("default").Update(e.Ctx, ds, metav1.UpdateOptions{})
		return err
	})
	return out
}

func modifyNode(t *testing.T, e *clustertest.Env, name string, mod func(*corev1.Node)) {
	t.Helper()
	clustertest.Eventually(t, timeout, func() error {
		n, err := e.Client.Core.Nodes().Get(e.Ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mod(n)
		_, err = e.Client.Core.Nodes().Update(e.Ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// pods lists the pods of DaemonSet name.
func pods(t *testing.T, e *clustertest.Env, name string) []corev1.Pod {
	t.Helper()
	list, err := e.Client.Core.Pods("default").List(e.Ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func podReadyNow(p *corev1.Pod) bool { return kit.IsPodReady(p) && p.DeletionTimestamp == nil }

// waitPlaced waits until DaemonSet name has exactly one pod on each of
// nodes, Ready, and no pod elsewhere; it returns the pods.
func waitPlaced(t *testing.T, e *clustertest.Env, name string, nodes ...string) []corev1.Pod {
	t.Helper()
	want := slices.Clone(nodes)
	sort.Strings(want)
	var got []corev1.Pod
	clustertest.Eventually(t, timeout, func() error {
		got = pods(t, e, name)
		var on []string
		for _, p := range got {
			if !podReadyNow(&p) {
				return fmt.Errorf("pod %s on %q not Ready", p.Name, p.Spec.NodeName)
			}
			on = append(on, p.Spec.NodeName)
		}
		sort.Strings(on)
		if !slices.Equal(on, want) {
			return fmt.Errorf("%s: pods on %v, want %v", name, on, want)
		}
		return nil
	})
	return got
}

// waitStatus waits until DaemonSet name's status, with observedGeneration
// cleared, is want and observedGeneration is its generation.
func waitStatus(t *testing.T, e *clustertest.Env, name string, want appsv1.DaemonSetStatus) {
	t.Helper()
	clustertest.Eventually(t, timeout, func() error {
		ds, err := e.Client.Apps.DaemonSets("default").Get(e.Ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		got := ds.Status
		if got.ObservedGeneration != ds.Generation {
			return fmt.Errorf("observedGeneration %d, generation %d", got.ObservedGeneration, ds.Generation)
		}
		got.ObservedGeneration, got.CollisionCount, got.Conditions = 0, nil, nil
		if diff := cmp.Diff(want, got); diff != "" {
			return fmt.Errorf("status (-want +got):\n%s", diff)
		}
		return nil
	})
}

func addNode(e *clustertest.Env, name string, labels map[string]string, taints ...corev1.Taint) {
	e.AddNode(name, func(n *corev1.Node) {
		for k, v := range labels {
			n.Labels[k] = v
		}
		n.Spec.Taints = taints
	})
}

func readyDelay(d string) func(*appsv1.DaemonSet) {
	return func(ds *appsv1.DaemonSet) {
		ds.Spec.Template.Annotations = map[string]string{simulator.AnnotationReadyDelay: d}
	}
}

func rolling(maxUnavailable, maxSurge int) func(*appsv1.DaemonSet) {
	return func(ds *appsv1.DaemonSet) {
		ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType, RollingUpdate: &appsv1.RollingUpdateDaemonSet{
			MaxUnavailable: ptr(intstr.FromInt32(int32(maxUnavailable))), MaxSurge: ptr(intstr.FromInt32(int32(maxSurge))),
		}}
	}
}

func ptr[T any](v T) *T { return &v }

func image(ds *appsv1.DaemonSet, img string) { ds.Spec.Template.Spec.Containers[0].Image = img }

func names(ps []corev1.Pod) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.Name+"@"+p.Spec.NodeName)
	}
	return strings.Join(s, ",")
}
