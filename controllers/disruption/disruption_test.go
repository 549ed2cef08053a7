package disruption_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	clocktesting "k8s.io/utils/clock/testing"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/disruption"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

type env struct {
	*clustertest.Env
	clock *clocktesting.FakeClock
}

func newEnv(t *testing.T) *env {
	e := clustertest.New(t, clustertest.Options{Nodes: 2})
	clk := clocktesting.NewFakeClock(time.Now())
	inf := client.NewInformers(e.Config)
	c, err := disruption.New(disruption.Config{Client: e.Client, Informers: inf, Logger: e.Log, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	inf.Start(e.Ctx)
	go c.Run(e.Ctx)
	return &env{Env: e, clock: clk}
}

// replicaSet creates a ReplicaSet object (no controller runs it here)
// that stands for the pods' owner and its scale.
func (e *env) replicaSet(name string, replicas int32) *appsv1.ReplicaSet {
	e.T.Helper()
	rs, err := e.Client.Apps.ReplicaSets("default").Create(e.Ctx, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	return rs
}

// pod creates a pod labelled app=<app> owned by the ReplicaSet (uid may
// name one that does not exist).
func (e *env) pod(name, app, owner string, uid types.UID) {
	e.T.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": app}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	if owner != "" {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: owner, UID: uid, Controller: &yes}}
	}
	if _, err := e.Client.Core.Pods("default").Create(e.Ctx, p, metav1.CreateOptions{}); err != nil {
		e.T.Fatal(err)
	}
}

func (e *env) waitReady(names ...string) {
	e.T.Helper()
	clustertest.Eventually(e.T, 30*time.Second, func() error {
		for _, n := range names {
			p, err := e.Client.Core.Pods("default").Get(e.Ctx, n, metav1.GetOptions{})
			if err != nil {
				return err
			}
			ready := false
			for _, c := range p.Status.Conditions {
				ready = ready || c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
			}
			if !ready {
				return fmt.Errorf("pod %s not Ready", n)
			}
		}
		return nil
	})
}

func (e *env) budget(name, app string, minAvailable, maxUnavailable *intstr.IntOrString) {
	e.T.Helper()
	if _, err := e.Client.Policy.PodDisruptionBudgets("default").Create(e.Ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: minAvailable, MaxUnavailable: maxUnavailable,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
		},
	}, metav1.CreateOptions{}); err != nil {
		e.T.Fatal(err)
	}
}

// status is what the tests compare of a budget's status.
type status struct {
	Healthy, Desired, Expected, Allowed int32
	Reason                              string
}

func (e *env) waitStatus(name string, want status) *policyv1.PodDisruptionBudget {
	e.T.Helper()
	var pdb *policyv1.PodDisruptionBudget
	clustertest.Eventually(e.T, 30*time.Second, func() error {
		var err error
		if pdb, err = e.Client.Policy.PodDisruptionBudgets("default").Get(e.Ctx, name, metav1.GetOptions{}); err != nil {
			return err
		}
		got := status{pdb.Status.CurrentHealthy, pdb.Status.DesiredHealthy, pdb.Status.ExpectedPods, pdb.Status.DisruptionsAllowed, ""}
		if c := apimeta.FindStatusCondition(pdb.Status.Conditions, policyv1.DisruptionAllowedCondition); c != nil {
			got.Reason = c.Reason
		}
		if pdb.Status.ObservedGeneration != pdb.Generation {
			return fmt.Errorf("budget %s not observed at generation %d", name, pdb.Generation)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			return fmt.Errorf("budget %s status (-want +got):\n%s", name, diff)
		}
		return nil
	})
	return pdb
}

func intOrPercent(s string) *intstr.IntOrString {
	v := intstr.Parse(s)
	return &v
}

// TestBudgetStatus: the status for minAvailable and maxUnavailable, as
// integers (counting the pods there are) and percentages (counting the
// controller's scale, rounded up), and SyncFailed when a pod's
// controller cannot be found.
func TestBudgetStatus(t *testing.T) {
	e := newEnv(t)
	rs := e.replicaSet("web", 4)
	for i := range 3 {
		e.pod(fmt.Sprintf("web-%d", i), "web", "web", rs.UID)
	}
	e.waitReady("web-0", "web-1", "web-2")
	for _, tc := range []struct {
		name     string
		min, max *intstr.IntOrString
		want     status
	}{
		{"min-int", intOrPercent("2"), nil, status{3, 2, 3, 1, policyv1.SufficientPodsReason}},
		{"min-percent", intOrPercent("50%"), nil, status{3, 2, 4, 1, policyv1.SufficientPodsReason}},
		{"min-percent-rounds-up", intOrPercent("60%"), nil, status{3, 3, 4, 0, policyv1.InsufficientPodsReason}},
		{"max-int", nil, intOrPercent("1"), status{3, 3, 4, 0, policyv1.InsufficientPodsReason}},
		{"max-percent", nil, intOrPercent("50%"), status{3, 2, 4, 1, policyv1.SufficientPodsReason}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.budget(tc.name, "web", tc.min, tc.max)
			e.waitStatus(tc.name, tc.want)
		})
	}

	// A pod whose controller does not exist: a percentage cannot be
	// computed, so no disruption is allowed.
	e.pod("orphan-0", "orphan", "gone", "no-such-uid")
	e.budget("orphan", "orphan", intOrPercent("50%"), nil)
	clustertest.Eventually(t, 30*time.Second, func() error {
		pdb, err := e.Client.Policy.PodDisruptionBudgets("default").Get(e.Ctx, "orphan", metav1.GetOptions{})
		if err != nil {
			return err
		}
		c := apimeta.FindStatusCondition(pdb.Status.Conditions, policyv1.DisruptionAllowedCondition)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != policyv1.SyncFailedReason || c.Message != `found no controllers for pod "orphan-0"` {
			return fmt.Errorf("condition = %+v, want SyncFailed", c)
		}
		if pdb.Status.DisruptionsAllowed != 0 {
			return fmt.Errorf("disruptions allowed = %d", pdb.Status.DisruptionsAllowed)
		}
		return nil
	})
}

// TestEvictionWaitsForBudget: the eviction API refuses with 429 while
// the budget allows no disruption, and allows it once another pod is
// Ready; the evicted pod is recorded, then forgotten once it is deleted.
func TestEvictionWaitsForBudget(t *testing.T) {
	e := newEnv(t)
	rs := e.replicaSet("db", 3)
	for i := range 3 {
		e.pod(fmt.Sprintf("db-%d", i), "db", "db", rs.UID)
	}
	e.waitReady("db-0", "db-1", "db-2")
	e.budget("db", "db", intOrPercent("3"), nil)
	e.waitStatus("db", status{3, 3, 3, 0, policyv1.InsufficientPodsReason})
	evict := func(name string) error {
		return e.Client.Core.Pods("default").EvictV1(e.Ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}})
	}
	if err := evict("db-0"); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("eviction with no disruption allowed: %v, want 429", err)
	}
	e.pod("db-3", "db", "db", rs.UID)
	e.waitReady("db-3")
	e.waitStatus("db", status{4, 3, 4, 1, policyv1.SufficientPodsReason})
	if err := evict("db-0"); err != nil {
		t.Fatalf("eviction within the budget: %v", err)
	}
	// The simulator deletes the evicted pod; the budget forgets it and
	// counts what is left.
	pdb := e.waitStatus("db", status{3, 3, 3, 0, policyv1.InsufficientPodsReason})
	if len(pdb.Status.DisruptedPods) != 0 {
		t.Errorf("disruptedPods = %v after the pod went", pdb.Status.DisruptedPods)
	}
}

// TestDisruptedPodsExpire: a pod recorded as disrupted is not counted
// healthy for two minutes; after that, if it was not deleted, it counts
// again.
func TestDisruptedPodsExpire(t *testing.T) {
	e := newEnv(t)
	rs := e.replicaSet("kv", 2)
	e.pod("kv-0", "kv", "kv", rs.UID)
	e.pod("kv-1", "kv", "kv", rs.UID)
	e.waitReady("kv-0", "kv-1")
	e.budget("kv", "kv", intOrPercent("1"), nil)
	pdb := e.waitStatus("kv", status{2, 1, 2, 1, policyv1.SufficientPodsReason})
	// What the eviction API writes when it lets kv-0 go (but here the
	// pod is never deleted).
	e.updateBudget("kv", true, func(pdb *policyv1.PodDisruptionBudget) {
		pdb.Status.DisruptedPods = map[string]metav1.Time{"kv-0": metav1.NewTime(e.clock.Now())}
		pdb.Status.DisruptionsAllowed = 0
	})
	pdb = e.waitStatus("kv", status{1, 1, 2, 0, policyv1.InsufficientPodsReason})
	if diff := cmp.Diff([]string{"kv-0"}, keys(pdb.Status.DisruptedPods), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("disruptedPods (-want +got):\n%s", diff)
	}
	e.clock.Step(disruption.DeletionTimeout + time.Second)
	// Any change to the budget makes the controller look again.
	e.updateBudget("kv", false, func(pdb *policyv1.PodDisruptionBudget) { pdb.Labels = map[string]string{"poke": "1"} })
	pdb = e.waitStatus("kv", status{2, 1, 2, 1, policyv1.SufficientPodsReason})
	if len(pdb.Status.DisruptedPods) != 0 {
		t.Errorf("disruptedPods = %v after the timeout", pdb.Status.DisruptedPods)
	}
}

// updateBudget applies mod to the budget (its status if status),
// retrying when the controller wrote it meanwhile.
func (e *env) updateBudget(name string, status bool, mod func(*policyv1.PodDisruptionBudget)) {
	e.T.Helper()
	pdbs := e.Client.Policy.PodDisruptionBudgets("default")
	clustertest.Eventually(e.T, 10*time.Second, func() error {
		pdb, err := pdbs.Get(e.Ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mod(pdb)
		if status {
			_, err = pdbs.UpdateStatus(e.Ctx, pdb, metav1.UpdateOptions{})
		} else {
			_, err = pdbs.Update(e.Ctx, pdb, metav1.UpdateOptions{})
		}
		return err
	})
}

func keys(m map[string]metav1.Time) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestStaleDisruptionTargetIsReset: a pod marked DisruptionTarget that
// is not deleted within two minutes has the condition set back to
// False.
func TestStaleDisruptionTargetIsReset(t *testing.T) {
	e := newEnv(t)
	e.pod("marked", "none", "", "")
	e.waitReady("marked")
	pods := e.Client.Core.Pods("default")
	clustertest.Eventually(t, 10*time.Second, func() error {
		p, err := pods.Get(e.Ctx, "marked", metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
			Reason: "EvictionByEvictionAPI", LastTransitionTime: metav1.NewTime(e.clock.Now())})
		_, err = pods.UpdateStatus(e.Ctx, p, metav1.UpdateOptions{})
		return err
	})
	e.clock.Step(disruption.StalePodDisruptionTimeout + time.Second)
	// Any change to the pod makes the controller look again.
	clustertest.Eventually(t, 10*time.Second, func() error {
		p, err := pods.Get(e.Ctx, "marked", metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Labels["poke"] = "1"
		_, err = pods.Update(e.Ctx, p, metav1.UpdateOptions{})
		return err
	})
	clustertest.Eventually(t, 30*time.Second, func() error {
		p, err := pods.Get(e.Ctx, "marked", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionFalse {
				return nil
			}
		}
		return fmt.Errorf("conditions %+v, want DisruptionTarget False", p.Status.Conditions)
	})
}

// TestExpectedPodsFromScale: the expected count is the scale of the
// workload owning the pods: a Deployment's for pods of its ReplicaSet, a
// StatefulSet's.
func TestExpectedPodsFromScale(t *testing.T) {
	e := newEnv(t)
	labels := func(app string) map[string]string { return map[string]string{"app": app} }
	template := func(app string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels(app)}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	}
	five, three, two := int32(5), int32(3), int32(2)
	d, err := e.Client.Apps.Deployments("default").Create(e.Ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "front"},
		Spec: appsv1.DeploymentSpec{Replicas: &five, Selector: &metav1.LabelSelector{MatchLabels: labels("front")}, Template: template("front")}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	yes := true
	rs, err := e.Client.Apps.ReplicaSets("default").Create(e.Ctx, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "front-1", OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "front", UID: d.UID, Controller: &yes}}},
		Spec:       appsv1.ReplicaSetSpec{Replicas: &three, Selector: &metav1.LabelSelector{MatchLabels: labels("front")}, Template: template("front")}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.pod("front-1-a", "front", "front-1", rs.UID)
	sts, err := e.Client.Apps.StatefulSets("default").Create(e.Ctx, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "store"},
		Spec: appsv1.StatefulSetSpec{Replicas: &two, Selector: &metav1.LabelSelector{MatchLabels: labels("store")}, Template: template("store")}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "store-0", Labels: labels("store"),
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "store", UID: sts.UID, Controller: &yes}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	if _, err := e.Client.Core.Pods("default").Create(e.Ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitReady("front-1-a", "store-0")
	e.budget("front", "front", nil, intOrPercent("1"))
	e.waitStatus("front", status{1, 4, 5, 0, policyv1.InsufficientPodsReason})
	e.budget("store", "store", nil, intOrPercent("50%"))
	e.waitStatus("store", status{1, 1, 2, 0, policyv1.InsufficientPodsReason})
}
