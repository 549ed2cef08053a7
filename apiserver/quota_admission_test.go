package apiserver

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func resources(kv ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = apiresource.MustParse(kv[i+1])
	}
	return l
}

func podWithResources(name string, req, lim corev1.ResourceList) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "c", Image: "busybox", Resources: corev1.ResourceRequirements{Requests: req, Limits: lim},
	}}}}
}

// forbiddenWith fails unless err is a 403 whose message is want.
func forbiddenWith(t *testing.T, err error, want string) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Fatalf("got %v, want 403 %q", err, want)
	}
	if got := err.Error(); got != want {
		t.Errorf("message:\n got %q\nwant %q", got, want)
	}
}

// TestQuotaAdmission: creates are charged to the quotas of their
// namespace and refused with upstream's 403s when over a hard limit,
// when a quota has not counted yet, or when a compute quota's resources
// are not stated.
func TestQuotaAdmission(t *testing.T) {
	e := newTestEnv(t)
	core := e.cs.CoreV1()
	mkQuota := func(name string, hard, used corev1.ResourceList) {
		t.Helper()
		q, err := core.ResourceQuotas("default").Create(e.ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if used == nil {
			return
		}
		q.Status = corev1.ResourceQuotaStatus{Hard: hard, Used: used}
		if _, err := core.ResourceQuotas("default").UpdateStatus(e.ctx, q, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mkQuota("counts", resources("configmaps", "1", "count/secrets", "1"), resources("configmaps", "0", "count/secrets", "0"))
	if _, err := core.ConfigMaps("default").Create(e.ctx, cm("one", nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatal(err)
	}
	if _, err := core.ConfigMaps("default").Create(e.ctx, cm("one", nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create within quota (a dry run before must not have charged it): %v", err)
	}
	q, _ := core.ResourceQuotas("default").Get(e.ctx, "counts", metav1.GetOptions{})
	if got := q.Status.Used[corev1.ResourceConfigMaps]; got.String() != "1" {
		t.Errorf("used configmaps = %s, want 1", got.String())
	}
	_, err := core.ConfigMaps("default").Create(e.ctx, cm("two", nil), metav1.CreateOptions{})
	forbiddenWith(t, err, `configmaps "two" is forbidden: exceeded quota: counts, requested: configmaps=1, used: configmaps=1, limited: configmaps=1`)
	if _, err := core.Secrets("default").Create(e.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = core.Secrets("default").Create(e.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s2"}}, metav1.CreateOptions{})
	forbiddenWith(t, err, `secrets "s2" is forbidden: exceeded quota: counts, requested: count/secrets=1, used: count/secrets=1, limited: count/secrets=1`)

	// A quota the controller has not counted yet refuses what it tracks.
	mkQuota("uncounted", resources("services", "5"), nil)
	_, err = core.Services("default").Create(e.ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "svc"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
	forbiddenWith(t, err, `services "svc" is forbidden: status unknown for quota: uncounted, resource: services`)

	mkQuota("compute", resources("requests.cpu", "1", "limits.memory", "1Gi"), resources("requests.cpu", "0", "limits.memory", "0"))
	_, err = core.Pods("default").Create(e.ctx, podWithResources("bare", nil, nil), metav1.CreateOptions{})
	forbiddenWith(t, err, `pods "bare" is forbidden: failed quota: compute: must specify limits.memory for: c; requests.cpu for: c`)
	fits := func(name string) *corev1.Pod {
		return podWithResources(name, resources("cpu", "600m"), resources("memory", "512Mi"))
	}
	if _, err := core.Pods("default").Create(e.ctx, fits("first"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = core.Pods("default").Create(e.ctx, fits("second"), metav1.CreateOptions{})
	forbiddenWith(t, err, `pods "second" is forbidden: exceeded quota: compute, requested: requests.cpu=600m, used: requests.cpu=600m, limited: requests.cpu=1`)
	q, _ = core.ResourceQuotas("default").Get(e.ctx, "compute", metav1.GetOptions{})
	if diff := cmp.Diff(resources("requests.cpu", "600m", "limits.memory", "512Mi"), q.Status.Used, cmp.Comparer(func(a, b apiresource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
		t.Errorf("compute usage (-want +got):\n%s", diff)
	}
}

// TestLimitRangeAdmission: a pod gets its namespace's container defaults
// (and the annotation saying so); max and the limit/request ratio are
// enforced with upstream's 403 messages; a LimitRange's default limit
// defaults to its max.
func TestLimitRangeAdmission(t *testing.T) {
	e := newTestEnv(t)
	core := e.cs.CoreV1()
	lr, err := core.LimitRanges("default").Create(e.ctx, &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: "limits"},
		Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
			Type:                 corev1.LimitTypeContainer,
			Max:                  resources("cpu", "1"),
			DefaultRequest:       resources("cpu", "250m", "memory", "128Mi"),
			Default:              resources("memory", "256Mi"),
			MaxLimitRequestRatio: resources("cpu", "4"),
		}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := lr.Spec.Limits[0].Default[corev1.ResourceCPU]; got.String() != "1" {
		t.Errorf("default cpu limit = %s, want the max, 1", got.String())
	}
	p, err := core.Pods("default").Create(e.ctx, podWithResources("bare", nil, nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := corev1.ResourceRequirements{Requests: resources("cpu", "250m", "memory", "128Mi"), Limits: resources("cpu", "1", "memory", "256Mi")}
	if diff := cmp.Diff(want, p.Spec.Containers[0].Resources, cmp.Comparer(func(a, b apiresource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
		t.Errorf("defaulted resources (-want +got):\n%s", diff)
	}
	if got := p.Annotations[limitRangerAnnotation]; !strings.HasPrefix(got, "LimitRanger plugin set: cpu, memory request for container c; cpu, memory limit for container c") {
		t.Errorf("annotation = %q", got)
	}
	_, err = core.Pods("default").Create(e.ctx, podWithResources("big", resources("cpu", "1"), resources("cpu", "2")), metav1.CreateOptions{})
	forbiddenWith(t, err, `pods "big" is forbidden: maximum cpu usage per Container is 1, but limit is 2`)
	_, err = core.Pods("default").Create(e.ctx, podWithResources("spiky", resources("cpu", "100m"), resources("cpu", "1")), metav1.CreateOptions{})
	forbiddenWith(t, err, `pods "spiky" is forbidden: cpu max limit to request ratio per Container is 4, but provided ratio is 10.000000`)

	// Per pod (the sum of its containers) and per claim.
	if _, err := core.LimitRanges("default").Create(e.ctx, &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: "totals"},
		Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{
			{Type: corev1.LimitTypePod, Max: resources("memory", "300Mi")},
			{Type: corev1.LimitTypePersistentVolumeClaim, Max: resources("storage", "1Gi")},
		}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	two := podWithResources("two", nil, nil)
	two.Spec.Containers = append(two.Spec.Containers, corev1.Container{Name: "d", Image: "busybox"})
	_, err = core.Pods("default").Create(e.ctx, two, metav1.CreateOptions{})
	forbiddenWith(t, err, `pods "two" is forbidden: maximum memory usage per Pod is 300Mi, but limit is 512Mi`)
	_, err = core.PersistentVolumeClaims("default").Create(e.ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "big"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: resources("storage", "2Gi")}}}, metav1.CreateOptions{})
	forbiddenWith(t, err, `persistentvolumeclaims "big" is forbidden: maximum storage usage per PersistentVolumeClaim is 1Gi, but request is 2Gi`)
}
