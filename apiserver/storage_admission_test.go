package apiserver

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestStorageAdmission(t *testing.T) {
	e := newTestEnv(t)
	core := e.cs.CoreV1()
	newClaim := func(name string, class *string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: class,
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: apiresource.MustParse("1Gi")}},
			},
		}
	}
	create := func(c *corev1.PersistentVolumeClaim) *corev1.PersistentVolumeClaim {
		t.Helper()
		out, err := core.PersistentVolumeClaims("default").Create(e.ctx, c, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	// No default class yet: the claim keeps no class.
	if got := create(newClaim("before", nil)); got.Spec.StorageClassName != nil {
		t.Errorf("claim without a default class got class %q", *got.Spec.StorageClassName)
	}
	for _, sc := range []*storagev1.StorageClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "older", Annotations: map[string]string{isDefaultClassAnnotation: "true"}}, Provisioner: "example.com/a"},
		{ObjectMeta: metav1.ObjectMeta{Name: "plain"}, Provisioner: "example.com/b"},
	} {
		if _, err := e.cs.StorageV1().StorageClasses().Create(e.ctx, sc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Creation timestamps have a one-second grain: make "newer" newer.
	time.Sleep(1100 * time.Millisecond)
	if _, err := e.cs.StorageV1().StorageClasses().Create(e.ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: "newer", Annotations: map[string]string{isDefaultClassAnnotation: "true"}}, Provisioner: "example.com/c"}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	empty, plain := "", "plain"
	for _, tc := range []struct {
		name  string
		claim *corev1.PersistentVolumeClaim
		want  *string
	}{
		{"no class gets the newest default", newClaim("none", nil), ptrTo("newer")},
		{"an empty class stays empty", newClaim("empty", &empty), &empty},
		{"a named class stays", newClaim("named", &plain), &plain},
	} {
		got := create(tc.claim)
		if diff := cmp.Diff(tc.want, got.Spec.StorageClassName); diff != "" {
			t.Errorf("%s: class (-want +got):\n%s", tc.name, diff)
		}
		if diff := cmp.Diff([]string{pvcProtectionFinalizer}, got.Finalizers); diff != "" {
			t.Errorf("%s: finalizers (-want +got):\n%s", tc.name, diff)
		}
	}
	beta := newClaim("beta", nil)
	beta.Annotations = map[string]string{corev1.BetaStorageClassAnnotation: "plain"}
	if got := create(beta); got.Spec.StorageClassName != nil {
		t.Errorf("claim with the beta class annotation got class %q", *got.Spec.StorageClassName)
	}

	pv, err := core.PersistentVolumes().Create(e.ctx, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: apiresource.MustParse("1Gi")},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/pv"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{pvProtectionFinalizer}, pv.Finalizers); diff != "" {
		t.Errorf("volume finalizers (-want +got):\n%s", diff)
	}
}
