package kubelet

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/kubelet/cri"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

// TestClaimVolumeMountsBoundVolume: a claim volume waits for its claim
// to be Bound, then mounts the volume's hostPath directory (made if
// missing), read-only when the pod asks.
func TestClaimVolumeMountsBoundVolume(t *testing.T) {
	api := clustertest.New(t, clustertest.Options{WithoutServiceAccounts: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	admin := kubernetes.NewForConfigOrDie(api.ConfigFor(&authn.User{Name: "admin", Groups: []string{authn.GroupMasters}}))
	agent, err := NewClient(api.ConfigFor(&authn.User{Name: "system:node:n1", Groups: []string{"system:nodes"}}))
	if err != nil {
		t.Fatal(err)
	}
	empty := ""
	pvc, err := admin.CoreV1().PersistentVolumeClaims("default").Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &empty,
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: apiresource.MustParse("1Gi")}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "pod-uid"},
		Spec: corev1.PodSpec{
			Volumes: []corev1.Volume{
				{Name: "rw", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}},
				{Name: "ro", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data", ReadOnly: true}}},
			},
			Containers: []corev1.Container{{Name: "c", VolumeMounts: []corev1.VolumeMount{{Name: "rw", MountPath: "/data"}, {Name: "ro", MountPath: "/ro"}}}},
		},
	}
	w := newPodWorker(&podManager{cfg: Config{RootDir: kubeletRootDir(t)}, client: agent}, pod)

	err = w.setupVolumes(ctx, pod)
	if err == nil || !strings.Contains(err.Error(), "non-bound phase") {
		t.Fatalf("setup of a Pending claim: got %v, want a non-bound phase error", err)
	}

	dir := filepath.Join(t.TempDir(), "pv")
	dirOrCreate := corev1.HostPathDirectoryOrCreate
	if _, err := admin.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: apiresource.MustParse("1Gi")},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &dirOrCreate}},
			ClaimRef:               &corev1.ObjectReference{Namespace: "default", Name: "data", UID: pvc.UID},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pvc.Spec.VolumeName = "pv"
	if pvc, err = admin.CoreV1().PersistentVolumeClaims("default").Update(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pvc.Status.Phase = corev1.ClaimBound
	if _, err := admin.CoreV1().PersistentVolumeClaims("default").UpdateStatus(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := w.setupVolumes(ctx, pod); err != nil {
		t.Fatal(err)
	}
	mounts, err := w.mountsFor(pod, &pod.Spec.Containers[0], 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []cri.Mount{{HostPath: dir, ContainerPath: "/data"}, {HostPath: dir, ContainerPath: "/ro", ReadOnly: true}}
	if diff := cmp.Diff(want, mounts[:2]); diff != "" {
		t.Errorf("claim mounts (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("the volume's directory was not made: %v", err)
	}
}
