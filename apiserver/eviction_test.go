package apiserver

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestEvictionBudgetRules: the 429 carries the DisruptionBudget cause;
// an empty selector covers the namespace; a pod that is not Ready goes
// without spending the budget when the policy or a healthy budget allows
// it; an evicted pod gets the DisruptionTarget condition.
func TestEvictionBudgetRules(t *testing.T) {
	e := newTestEnv(t)
	pods := e.cs.CoreV1().Pods("default")
	mk := func(name string, ready bool) {
		t.Helper()
		p, err := pods.Create(e.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
		if _, err := pods.UpdateStatus(e.ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	evict := func(name string) error {
		return pods.EvictV1(e.ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}})
	}
	pdbs := e.cs.PolicyV1().PodDisruptionBudgets("default")
	setBudget := func(policy *policyv1.UnhealthyPodEvictionPolicyType, st policyv1.PodDisruptionBudgetStatus) {
		t.Helper()
		pdb, err := pdbs.Get(e.ctx, "all", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			pdb, err = pdbs.Create(e.ctx, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "all"},
				Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptrTo(intstr.FromInt32(2)), Selector: &metav1.LabelSelector{}}}, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
		pdb.Spec.UnhealthyPodEvictionPolicy = policy
		if pdb, err = pdbs.Update(e.ctx, pdb, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		st.ObservedGeneration = pdb.Generation
		pdb.Status = st
		if _, err := pdbs.UpdateStatus(e.ctx, pdb, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mk("ready-0", true)
	mk("ready-1", true)
	mk("sick-0", false)
	mk("sick-1", false)
	mk("sick-2", false)

	// The empty selector covers every pod: no disruption left, 429.
	setBudget(nil, policyv1.PodDisruptionBudgetStatus{CurrentHealthy: 2, DesiredHealthy: 2, ExpectedPods: 5})
	err := evict("ready-0")
	var status *apierrors.StatusError
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("eviction past the budget: %v, want 429", err)
	}
	status = err.(*apierrors.StatusError)
	wantCauses := []metav1.StatusCause{{Type: policyv1.DisruptionBudgetCause, Message: "The disruption budget all needs 2 healthy pods and has 2 currently"}}
	if diff := cmp.Diff(wantCauses, status.ErrStatus.Details.Causes); diff != "" {
		t.Errorf("429 causes (-want +got):\n%s", diff)
	}

	// IfHealthyBudget: an unhealthy pod goes while the budget is healthy,
	// without spending it...
	if err := evict("sick-0"); err != nil {
		t.Fatalf("unhealthy pod with a healthy budget: %v", err)
	}
	if pdb, _ := pdbs.Get(e.ctx, "all", metav1.GetOptions{}); len(pdb.Status.DisruptedPods) != 0 {
		t.Errorf("an unhealthy pod's eviction spent the budget: %+v", pdb.Status)
	}
	p, err := pods.Get(e.ctx, "sick-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.DeletionTimestamp == nil || !hasCondition(p, corev1.DisruptionTarget, "EvictionByEvictionAPI") {
		t.Errorf("evicted pod = %+v %+v, want terminating with DisruptionTarget", p.DeletionTimestamp, p.Status.Conditions)
	}
	// ...but not when the budget lacks healthy pods.
	setBudget(nil, policyv1.PodDisruptionBudgetStatus{CurrentHealthy: 1, DesiredHealthy: 2, ExpectedPods: 5})
	if err := evict("sick-1"); !apierrors.IsTooManyRequests(err) {
		t.Fatalf("unhealthy pod with an unhealthy budget: %v, want 429", err)
	}
	// AlwaysAllow: unhealthy pods go whatever the budget.
	always := policyv1.AlwaysAllow
	setBudget(&always, policyv1.PodDisruptionBudgetStatus{CurrentHealthy: 1, DesiredHealthy: 2, ExpectedPods: 5})
	if err := evict("sick-1"); err != nil {
		t.Fatalf("unhealthy pod under AlwaysAllow: %v", err)
	}
	// A budget not yet observed at its generation refuses with its own
	// cause.
	pdb, _ := pdbs.Get(e.ctx, "all", metav1.GetOptions{})
	pdb.Spec.MinAvailable = ptrTo(intstr.FromInt32(1))
	if _, err := pdbs.Update(e.ctx, pdb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = evict("ready-1")
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("eviction against a stale budget: %v, want 429", err)
	}
	wantCauses = []metav1.StatusCause{{Type: policyv1.DisruptionBudgetCause, Message: "The disruption budget all is still being processed by the server."}}
	if diff := cmp.Diff(wantCauses, err.(*apierrors.StatusError).ErrStatus.Details.Causes); diff != "" {
		t.Errorf("429 causes (-want +got):\n%s", diff)
	}
}

func hasCondition(p *corev1.Pod, t corev1.PodConditionType, reason string) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue && c.Reason == reason {
			return true
		}
	}
	return false
}
