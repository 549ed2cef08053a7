package resourcequota_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/resourcequota"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

func resources(kv ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = apiresource.MustParse(kv[i+1])
	}
	return l
}

type env struct{ *clustertest.Env }

func newEnv(t *testing.T) *env {
	e := clustertest.New(t, clustertest.Options{Nodes: 1})
	inf := client.NewInformers(e.Config)
	c, err := resourcequota.New(resourcequota.Config{Client: e.Client, Informers: inf, RESTConfig: e.Config, Logger: e.Log})
	if err != nil {
		t.Fatal(err)
	}
	// ConfigMaps and Secrets only count: they are cached as metadata by
	// the controller itself, not as whole objects in the shared
	// informers.
	if got, want := inf.Watching(), []string{"PersistentVolumeClaim", "Pod", "ResourceQuota", "Service"}; !slices.Equal(got, want) {
		t.Fatalf("shared informers %q, want %q", got, want)
	}
	inf.Start(e.Ctx)
	go c.Run(e.Ctx)
	return &env{e}
}

// quota creates a quota and waits for the controller's first count.
func (e *env) quota(name string, hard corev1.ResourceList, scopes ...corev1.ResourceQuotaScope) {
	e.T.Helper()
	if _, err := e.Client.Core.ResourceQuotas("default").Create(e.Ctx, &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ResourceQuotaSpec{Hard: hard, Scopes: scopes},
	}, metav1.CreateOptions{}); err != nil {
		e.T.Fatal(err)
	}
	clustertest.Eventually(e.T, 30*time.Second, func() error {
		q, err := e.Client.Core.ResourceQuotas("default").Get(e.Ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(q.Status.Used) != len(hard) {
			return fmt.Errorf("quota %s not counted: %v", name, q.Status)
		}
		return nil
	})
}

// waitUsed waits until the quota's used is want.
func (e *env) waitUsed(name string, want corev1.ResourceList) {
	e.T.Helper()
	clustertest.Eventually(e.T, 30*time.Second, func() error {
		q, err := e.Client.Core.ResourceQuotas("default").Get(e.Ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if diff := cmp.Diff(want, q.Status.Used, cmp.Comparer(func(a, b apiresource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
			return fmt.Errorf("quota %s used (-want +got):\n%s", name, diff)
		}
		if diff := cmp.Diff(q.Spec.Hard, q.Status.Hard); diff != "" {
			return fmt.Errorf("quota %s status.hard (-spec +status):\n%s", name, diff)
		}
		return nil
	})
}

func wantForbidden(t *testing.T, err error, want string) {
	t.Helper()
	if !apierrors.IsForbidden(err) || err.Error() != want {
		t.Fatalf("got %v, want 403 %q", err, want)
	}
}

func configMap(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func deployment(name string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}},
	}}
}

func pod(name string, req, lim corev1.ResourceList) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "c", Image: "busybox", Resources: corev1.ResourceRequirements{Requests: req, Limits: lim},
	}}}}
}

func (e *env) deletePod(name string) {
	e.T.Helper()
	zero := int64(0)
	if err := e.Client.Core.Pods("default").Delete(e.Ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		e.T.Fatal(err)
	}
}

// TestObjectCounts: counts of core kinds and of count/<resource>.<group>
// are charged at create, refused over the limit, and given back when an
// object is deleted.
func TestObjectCounts(t *testing.T) {
	e := newEnv(t)
	e.quota("counts", resources("configmaps", "2", "count/deployments.apps", "1", "persistentvolumeclaims", "2", "requests.storage", "3Gi"))
	e.waitUsed("counts", resources("configmaps", "0", "count/deployments.apps", "0", "persistentvolumeclaims", "0", "requests.storage", "0"))
	cms := e.Client.Core.ConfigMaps("default")
	for _, n := range []string{"a", "b"} {
		if _, err := cms.Create(e.Ctx, configMap(n), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := cms.Create(e.Ctx, configMap("c"), metav1.CreateOptions{})
	wantForbidden(t, err, `configmaps "c" is forbidden: exceeded quota: counts, requested: configmaps=1, used: configmaps=2, limited: configmaps=2`)
	if err := cms.Delete(e.Ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitUsed("counts", resources("configmaps", "1", "count/deployments.apps", "0", "persistentvolumeclaims", "0", "requests.storage", "0"))
	if _, err := cms.Create(e.Ctx, configMap("c"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create after a delete freed the quota: %v", err)
	}

	deploys := e.Client.Apps.Deployments("default")
	if _, err := deploys.Create(e.Ctx, deployment("web"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = deploys.Create(e.Ctx, deployment("api"), metav1.CreateOptions{})
	wantForbidden(t, err, `deployments.apps "api" is forbidden: exceeded quota: counts, requested: count/deployments.apps=1, used: count/deployments.apps=1, limited: count/deployments.apps=1`)
	if err := deploys.Delete(e.Ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// A kind without a shared informer is recounted at the periodic
	// sync or when the quota changes: change it.
	q, err := e.Client.Core.ResourceQuotas("default").Get(e.Ctx, "counts", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q.Spec.Hard["count/deployments.apps"] = apiresource.MustParse("2")
	if _, err := e.Client.Core.ResourceQuotas("default").Update(e.Ctx, q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitUsed("counts", resources("configmaps", "2", "count/deployments.apps", "0", "persistentvolumeclaims", "0", "requests.storage", "0"))

	claim := func(name, size string) *corev1.PersistentVolumeClaim {
		empty := ""
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &empty, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: resources("storage", size)},
		}}
	}
	if _, err := e.Client.Core.PersistentVolumeClaims("default").Create(e.Ctx, claim("small", "1Gi"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = e.Client.Core.PersistentVolumeClaims("default").Create(e.Ctx, claim("big", "5Gi"), metav1.CreateOptions{})
	wantForbidden(t, err, `persistentvolumeclaims "big" is forbidden: exceeded quota: counts, requested: requests.storage=5Gi, used: requests.storage=1Gi, limited: requests.storage=3Gi`)
}

// TestComputeQuota: requests and limits of pods are charged; a finished
// or deleted pod gives them back; scopes pick the pods a quota covers.
func TestComputeQuota(t *testing.T) {
	e := newEnv(t)
	e.quota("compute", resources("requests.cpu", "1", "requests.memory", "1Gi", "limits.cpu", "2", "limits.memory", "2Gi"), corev1.ResourceQuotaScopeNotBestEffort)
	e.quota("best-effort", resources("pods", "1"), corev1.ResourceQuotaScopeBestEffort)
	pods := e.Client.Core.Pods("default")
	sized := func(name string) *corev1.Pod {
		return pod(name, resources("cpu", "600m", "memory", "256Mi"), resources("cpu", "1", "memory", "512Mi"))
	}
	if _, err := pods.Create(e.Ctx, sized("first"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := pods.Create(e.Ctx, sized("second"), metav1.CreateOptions{})
	wantForbidden(t, err, `pods "second" is forbidden: exceeded quota: compute, requested: requests.cpu=600m, used: requests.cpu=600m, limited: requests.cpu=1`)
	if _, err := pods.Create(e.Ctx, pod("lazy", nil, nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a BestEffort pod is outside the NotBestEffort quota: %v", err)
	}
	_, err = pods.Create(e.Ctx, pod("lazier", nil, nil), metav1.CreateOptions{})
	wantForbidden(t, err, `pods "lazier" is forbidden: exceeded quota: best-effort, requested: pods=1, used: pods=1, limited: pods=1`)
	e.waitUsed("best-effort", resources("pods", "1"))

	e.deletePod("first")
	e.waitUsed("compute", resources("requests.cpu", "0", "requests.memory", "0", "limits.cpu", "0", "limits.memory", "0"))
	if _, err := pods.Create(e.Ctx, sized("second"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create after the first pod went: %v", err)
	}
	e.waitUsed("compute", resources("requests.cpu", "600m", "requests.memory", "256Mi", "limits.cpu", "1", "limits.memory", "512Mi"))
}
