package deployment

import (
	"fmt"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/kit"
	"bonsai.dev/bonsai/controllers/replicaset"
	"bonsai.dev/bonsai/kubelet/simulator"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

const ns = "default"

// env runs the API server, simulated nodes, and the ReplicaSet and
// Deployment controllers on one set of shared informers, as the manager
// does.
type env struct {
	*clustertest.Env
}

func start(t *testing.T, nodes int) *env {
	t.Helper()
	e := clustertest.New(t, clustertest.Options{Nodes: nodes})
	inf := client.NewInformers(e.Config)
	rsc, err := replicaset.New(replicaset.Config{Client: e.Client, Informers: inf, Logger: e.Log.With("controller", "replicaset")})
	if err != nil {
		t.Fatal(err)
	}
	dc, err := New(Config{Client: e.Client, Informers: inf, Logger: e.Log.With("controller", "deployment")})
	if err != nil {
		t.Fatal(err)
	}
	inf.Start(e.Ctx)
	// Both end with the environment's context, after the test.
	go rsc.Run(e.Ctx)
	go dc.Run(e.Ctx)
	return &env{Env: e}
}

// setQuota creates the ResourceQuota name of hard n of res (used: what
// exists of it now), or raises it to n. With no quota controller
// running, admission charges status.used itself.
func (e *env) setQuota(name string, res corev1.ResourceName, n, used int64) {
	e.T.Helper()
	quotas := e.Client.Core.ResourceQuotas(ns)
	hard := corev1.ResourceList{res: *resource.NewQuantity(n, resource.DecimalSI)}
	clustertest.Eventually(e.T, 10*time.Second, func() error {
		q, err := quotas.Get(e.Ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			q, err = quotas.Create(e.Ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			q.Status = corev1.ResourceQuotaStatus{Hard: hard, Used: corev1.ResourceList{res: *resource.NewQuantity(used, resource.DecimalSI)}}
			_, err = quotas.UpdateStatus(e.Ctx, q, metav1.UpdateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		q.Spec.Hard = hard
		_, err = quotas.Update(e.Ctx, q, metav1.UpdateOptions{})
		return err
	})
}

func newDeployment(name string, replicas int32) *appsv1.Deployment {
	l := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: l},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: l},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1"}}},
			},
		},
	}
}

func rolling(surge, unavailable intstr.IntOrString) appsv1.DeploymentStrategy {
	return appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &surge, MaxUnavailable: &unavailable}}
}

func (e *env) create(d *appsv1.Deployment) *appsv1.Deployment {
	e.T.Helper()
	out, err := e.Client.Apps.Deployments(ns).Create(e.Ctx, d, metav1.CreateOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	return out
}

func (e *env) get(name string) *appsv1.Deployment {
	e.T.Helper()
	d, err := e.Client.Apps.Deployments(ns).Get(e.Ctx, name, metav1.GetOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	return d
}

// update changes the Deployment with mod, retrying on conflicts.
func (e *env) update(name string, mod func(*appsv1.Deployment)) *appsv1.Deployment {
	e.T.Helper()
	var out *appsv1.Deployment
	clustertest.Eventually(e.T, 10*time.Second, func() error {
		d := e.get(name)
		mod(d)
		var err error
		out, err = e.Client.Apps.Deployments(ns).Update(e.Ctx, d, metav1.UpdateOptions{})
		return err
	})
	return out
}

func (e *env) scale(name string, n int32) {
	e.T.Helper()
	// As kubectl scale: read the scale, write it back, again on a
	// conflict with the controller's status writes.
	clustertest.Eventually(e.T, 10*time.Second, func() error {
		sc, err := e.Client.Apps.Deployments(ns).GetScale(e.Ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		sc.Spec.Replicas = n
		_, err = e.Client.Apps.Deployments(ns).UpdateScale(e.Ctx, name, sc, metav1.UpdateOptions{})
		return err
	})
}

// replicaSets are d's ReplicaSets, by revision.
func (e *env) replicaSets(d *appsv1.Deployment) []appsv1.ReplicaSet {
	e.T.Helper()
	list, err := e.Client.Apps.ReplicaSets(ns).List(e.Ctx, metav1.ListOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	var out []appsv1.ReplicaSet
	for _, rs := range list.Items {
		if ref := metav1.GetControllerOf(&rs); ref != nil && ref.UID == d.UID {
			out = append(out, rs)
		}
	}
	sort.Slice(out, func(i, j int) bool { return revision(&out[i]) < revision(&out[j]) })
	return out
}

// complete waits until the rollout of d's current generation is done, as
// kubectl rollout status judges it, and returns the Deployment.
func (e *env) complete(name string, timeout time.Duration) *appsv1.Deployment {
	e.T.Helper()
	var d *appsv1.Deployment
	clustertest.Eventually(e.T, timeout, func() error {
		d = e.get(name)
		return rolloutDone(d)
	})
	return d
}

// rolloutDone is kubectl rollout status's test of a finished rollout.
func rolloutDone(d *appsv1.Deployment) error {
	st := d.Status
	switch {
	case d.Generation > st.ObservedGeneration:
		return fmt.Errorf("waiting for deployment spec update to be observed (generation %d, observed %d)", d.Generation, st.ObservedGeneration)
	case st.UpdatedReplicas < *d.Spec.Replicas:
		return fmt.Errorf("%d out of %d new replicas have been updated", st.UpdatedReplicas, *d.Spec.Replicas)
	case st.Replicas > st.UpdatedReplicas:
		return fmt.Errorf("%d old replicas are pending termination", st.Replicas-st.UpdatedReplicas)
	case st.AvailableReplicas < st.UpdatedReplicas:
		return fmt.Errorf("%d of %d updated replicas are available", st.AvailableReplicas, st.UpdatedReplicas)
	}
	return nil
}

func condition(d *appsv1.Deployment, t appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	return getCondition(d.Status, t)
}

// waitCondition waits until d has condition t with status s and reason.
func (e *env) waitCondition(name string, t appsv1.DeploymentConditionType, s corev1.ConditionStatus, reason string, timeout time.Duration) *appsv1.Deployment {
	e.T.Helper()
	var d *appsv1.Deployment
	clustertest.Eventually(e.T, timeout, func() error {
		d = e.get(name)
		c := condition(d, t)
		if c == nil || c.Status != s || c.Reason != reason {
			return fmt.Errorf("condition %s is %+v, want %s %s", t, c, s, reason)
		}
		return nil
	})
	return d
}

// neverReady makes a template's pods stay Running but not Ready.
func neverReady(t *corev1.PodTemplateSpec) {
	if t.Annotations == nil {
		t.Annotations = map[string]string{}
	}
	t.Annotations[simulator.AnnotationReadyDelay] = "1h"
}

// watcher keeps the cluster's pods and ReplicaSets of one app, as an
// informer of the test's own sees each event, and runs a check on every
// event, recording the first failures.
type watcher struct {
	mu   sync.Mutex
	pods map[string]*corev1.Pod
	rss  map[string]*appsv1.ReplicaSet
	errs []string
}

func (e *env) watch(app string, check func(w *watcher) error) *watcher {
	e.T.Helper()
	w := &watcher{pods: map[string]*corev1.Pod{}, rss: map[string]*appsv1.ReplicaSet{}}
	inf := client.NewInformers(e.Config)
	record := func() {
		if err := check(w); err != nil && len(w.errs) < 5 {
			w.errs = append(w.errs, err.Error())
		}
	}
	handler := func(del bool) func(any) {
		return func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			switch o := obj.(type) {
			case *corev1.Pod:
				if o.Labels["app"] != app {
					return
				}
				if del {
					delete(w.pods, o.Name)
				} else {
					w.pods[o.Name] = o
				}
			case *appsv1.ReplicaSet:
				if o.Labels["app"] != app {
					return
				}
				if del {
					delete(w.rss, o.Name)
				} else {
					w.rss[o.Name] = o
				}
			}
			record()
		}
	}
	for _, i := range []cache.SharedIndexInformer{inf.For(&corev1.Pod{}), inf.For(&appsv1.ReplicaSet{})} {
		if _, err := i.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: handler(false), UpdateFunc: func(_, cur any) { handler(false)(cur) }, DeleteFunc: handler(true),
		}); err != nil {
			e.T.Fatal(err)
		}
	}
	inf.Start(e.Ctx)
	if !inf.WaitForCacheSync(e.Ctx) {
		e.T.Fatal("watcher did not sync")
	}
	return w
}

func (w *watcher) failures() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.errs...)
}

// available counts live Ready pods (minReadySeconds 0) by template hash.
func (w *watcher) available() (total int, byHash map[string]int) {
	byHash = map[string]int{}
	for _, p := range w.pods {
		if p.DeletionTimestamp == nil && kit.IsPodReady(p) {
			total++
			byHash[p.Labels[appsv1.DefaultDeploymentUniqueLabelKey]]++
		}
	}
	return total, byHash
}

func annotation(rs *appsv1.ReplicaSet, k string) int {
	n, _ := strconv.Atoi(rs.Annotations[k])
	return n
}

func ptr[T any](v T) *T { return &v }

// progressReasons records every Progressing reason the Deployment name
// shows, in order, as an informer of the test's own sees its updates:
// some last only until the next write of the same sync.
func (e *env) progressReasons(name string) func() []string {
	e.T.Helper()
	var mu sync.Mutex
	var seen []string
	inf := client.NewInformers(e.Config)
	note := func(obj any) {
		d, ok := obj.(*appsv1.Deployment)
		if !ok || d.Name != name {
			return
		}
		c := condition(d, appsv1.DeploymentProgressing)
		if c == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if len(seen) == 0 || seen[len(seen)-1] != c.Reason {
			seen = append(seen, c.Reason)
		}
	}
	if _, err := inf.For(&appsv1.Deployment{}).AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: note, UpdateFunc: func(_, cur any) { note(cur) },
	}); err != nil {
		e.T.Fatal(err)
	}
	inf.Start(e.Ctx)
	if !inf.WaitForCacheSync(e.Ctx) {
		e.T.Fatal("informer did not sync")
	}
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// containsInOrder reports whether want appear in got in that order.
func containsInOrder(got, want []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

// waitReasons waits until the informer of progressReasons has seen want,
// in that order: it may lag the API reads of the test.
func waitReasons(t *testing.T, reasons func() []string, want ...string) {
	t.Helper()
	clustertest.Eventually(t, 10*time.Second, func() error {
		if got := reasons(); !containsInOrder(got, want) {
			return fmt.Errorf("Progressing reasons %v, want %v in that order", got, want)
		}
		return nil
	})
}
