package quota

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func list(kv ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

var quantities = cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })

func TestUsage(t *testing.T) {
	now := time.Now()
	gold := "gold"
	past := metav1.NewTime(now.Add(-time.Minute))
	grace := int64(5)
	for _, tc := range []struct {
		name string
		gr   schema.GroupResource
		obj  runtime.Object
		want corev1.ResourceList
	}{
		{"pod compute", Pods, &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Resources: corev1.ResourceRequirements{Requests: list("cpu", "100m", "memory", "64Mi"), Limits: list("cpu", "200m")}},
			{Resources: corev1.ResourceRequirements{Requests: list("cpu", "300m")}},
		}}}, list("pods", "1", "count/pods", "1", "cpu", "400m", "requests.cpu", "400m", "memory", "64Mi", "requests.memory", "64Mi", "limits.cpu", "200m")},
		{"finished pod", Pods, &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}, list("count/pods", "1")},
		{"pod past its grace period", Pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &past, DeletionGracePeriodSeconds: &grace}}, list("count/pods", "1")},
		{"node port service", Services, &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}, {Port: 443}}}},
			list("services", "1", "count/services", "1", "services.nodeports", "2", "services.loadbalancers", "1")},
		{"claim of a class", Claims, &corev1.PersistentVolumeClaim{Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &gold,
			Resources: corev1.VolumeResourceRequirements{Requests: list("storage", "2Gi")}}},
			list("persistentvolumeclaims", "1", "count/persistentvolumeclaims", "1", "requests.storage", "2Gi",
				"gold.storageclass.storage.k8s.io/requests.storage", "2Gi", "gold.storageclass.storage.k8s.io/persistentvolumeclaims", "1")},
		{"other kind", schema.GroupResource{Group: "apps", Resource: "deployments"}, &metav1.PartialObjectMetadata{}, list("count/deployments.apps", "1")},
	} {
		if diff := cmp.Diff(tc.want, Usage(tc.gr, tc.obj, now), quantities); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

func TestScopes(t *testing.T) {
	deadline := int64(60)
	bestEffort := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{}}}}
	burstable := &corev1.Pod{Spec: corev1.PodSpec{ActiveDeadlineSeconds: &deadline, PriorityClassName: "high",
		Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{Requests: list("cpu", "1")}}}}}
	quota := func(scopes []corev1.ResourceQuotaScope, sel *corev1.ScopeSelector) *corev1.ResourceQuota {
		return &corev1.ResourceQuota{Spec: corev1.ResourceQuotaSpec{Scopes: scopes, ScopeSelector: sel}}
	}
	for _, tc := range []struct {
		name string
		q    *corev1.ResourceQuota
		obj  runtime.Object
		want bool
	}{
		{"no scope covers everything", quota(nil, nil), &corev1.ConfigMap{}, true},
		{"scoped quota skips other kinds", quota([]corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeBestEffort}, nil), &corev1.ConfigMap{}, false},
		{"BestEffort", quota([]corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeBestEffort}, nil), bestEffort, true},
		{"BestEffort skips burstable", quota([]corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeBestEffort}, nil), burstable, false},
		{"NotBestEffort", quota([]corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeNotBestEffort}, nil), burstable, true},
		{"Terminating", quota([]corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeTerminating}, nil), burstable, true},
		{"Terminating skips no deadline", quota([]corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeTerminating}, nil), bestEffort, false},
		{"NotTerminating", quota([]corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeNotTerminating}, nil), bestEffort, true},
		{"PriorityClass In", quota(nil, &corev1.ScopeSelector{MatchExpressions: []corev1.ScopedResourceSelectorRequirement{
			{ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpIn, Values: []string{"high"}}}}), burstable, true},
		{"PriorityClass In skips others", quota(nil, &corev1.ScopeSelector{MatchExpressions: []corev1.ScopedResourceSelectorRequirement{
			{ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpIn, Values: []string{"high"}}}}), bestEffort, false},
	} {
		got, err := Matches(tc.q, tc.obj)
		if err != nil || got != tc.want {
			t.Errorf("%s: Matches = %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
}

func TestConstraints(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{Requests: list("cpu", "1"), Limits: list("memory", "1Gi")}}},
		Containers:     []corev1.Container{{Name: "a"}, {Name: "b", Resources: corev1.ResourceRequirements{Requests: list("cpu", "1")}}},
	}}
	err := Constraints(list("requests.cpu", "4", "limits.memory", "4Gi", "pods", "3"), pod)
	want := "must specify limits.memory for: a,b; requests.cpu for: a"
	if err == nil || err.Error() != want {
		t.Errorf("Constraints = %v, want %q", err, want)
	}
	if err := Constraints(list("pods", "3", "requests.storage", "1Gi"), pod); err != nil {
		t.Errorf("a quota without compute resources constrains nothing: %v", err)
	}
}
