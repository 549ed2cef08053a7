package pvbinder_test

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/ephemeral"
	"bonsai.dev/bonsai/controllers/localpath"
	"bonsai.dev/bonsai/controllers/pvbinder"
	"bonsai.dev/bonsai/controllers/volumeprotection"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

// storageEnv runs the API server, the scheduler and simulated nodes, and
// the storage controllers, as the controller manager does.
type storageEnv struct {
	*clustertest.Env
	dataDir string
}

func newStorageEnv(t *testing.T, nodes int) *storageEnv {
	t.Helper()
	return startControllers(clustertest.New(t, clustertest.Options{Nodes: nodes}))
}

// startControllers runs the storage controllers against e.
func startControllers(e *clustertest.Env) *storageEnv {
	t := e.T
	t.Helper()
	se := &storageEnv{Env: e, dataDir: t.TempDir()}
	inf := client.NewInformers(e.Config)
	binder, err := pvbinder.New(pvbinder.Config{Client: e.Client, Informers: inf, Logger: e.Log})
	if err != nil {
		t.Fatal(err)
	}
	prov, err := localpath.New(localpath.Config{Client: e.Client, Informers: inf, Logger: e.Log, DataDir: se.dataDir})
	if err != nil {
		t.Fatal(err)
	}
	prot, err := volumeprotection.New(volumeprotection.Config{Client: e.Client, Informers: inf, Logger: e.Log})
	if err != nil {
		t.Fatal(err)
	}
	eph, err := ephemeral.New(ephemeral.Config{Client: e.Client, Informers: inf, Logger: e.Log})
	if err != nil {
		t.Fatal(err)
	}
	inf.Start(e.Ctx)
	go binder.Run(e.Ctx)
	go prov.Run(e.Ctx)
	go prot.Run(e.Ctx)
	go eph.Run(e.Ctx)
	return se
}

func quantity(s string) apiresource.Quantity { return apiresource.MustParse(s) }

func claim(name, class string, size string, modes ...corev1.PersistentVolumeAccessMode) *corev1.PersistentVolumeClaim {
	if len(modes) == 0 {
		modes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: modes,
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: quantity(size)}},
		},
	}
	if class != "-" {
		c.Spec.StorageClassName = &class
	}
	return c
}

func volume(name, class, size string, reclaim corev1.PersistentVolumeReclaimPolicy, modes ...corev1.PersistentVolumeAccessMode) *corev1.PersistentVolume {
	if len(modes) == 0 {
		modes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: quantity(size)},
			AccessModes:                   modes,
			StorageClassName:              class,
			PersistentVolumeReclaimPolicy: reclaim,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/" + name}},
		},
	}
}

func podWithClaim(name, claimName string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: "busybox", VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
			Volumes:    []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName}}}},
		},
	}
}

func (e *storageEnv) createClass(name string, provisioner string, mode storagev1.VolumeBindingMode) {
	e.T.Helper()
	if _, err := e.Client.Storage.StorageClasses().Create(e.Ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: provisioner, VolumeBindingMode: &mode,
	}, metav1.CreateOptions{}); err != nil {
		e.T.Fatal(err)
	}
}

func (e *storageEnv) createClaim(c *corev1.PersistentVolumeClaim) *corev1.PersistentVolumeClaim {
	e.T.Helper()
	out, err := e.Client.Core.PersistentVolumeClaims(c.Namespace).Create(e.Ctx, c, metav1.CreateOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	return out
}

func (e *storageEnv) createVolume(pv *corev1.PersistentVolume) {
	e.T.Helper()
	if _, err := e.Client.Core.PersistentVolumes().Create(e.Ctx, pv, metav1.CreateOptions{}); err != nil {
		e.T.Fatal(err)
	}
}

func (e *storageEnv) createPod(p *corev1.Pod) {
	e.T.Helper()
	if _, err := e.Client.Core.Pods(p.Namespace).Create(e.Ctx, p, metav1.CreateOptions{}); err != nil {
		e.T.Fatal(err)
	}
}

// waitClaim waits until the claim satisfies ok and returns it.
func (e *storageEnv) waitClaim(name string, what string, ok func(*corev1.PersistentVolumeClaim) bool) *corev1.PersistentVolumeClaim {
	e.T.Helper()
	var pvc *corev1.PersistentVolumeClaim
	clustertest.Eventually(e.T, 30*time.Second, func() error {
		var err error
		if pvc, err = e.Client.Core.PersistentVolumeClaims("default").Get(e.Ctx, name, metav1.GetOptions{}); err != nil {
			return err
		}
		if !ok(pvc) {
			return fmt.Errorf("claim %s is not %s: %+v %+v", name, what, pvc.Spec, pvc.Status)
		}
		return nil
	})
	return pvc
}

func (e *storageEnv) waitVolume(name string, what string, ok func(*corev1.PersistentVolume) bool) *corev1.PersistentVolume {
	e.T.Helper()
	var pv *corev1.PersistentVolume
	clustertest.Eventually(e.T, 30*time.Second, func() error {
		var err error
		if pv, err = e.Client.Core.PersistentVolumes().Get(e.Ctx, name, metav1.GetOptions{}); err != nil {
			return err
		}
		if !ok(pv) {
			return fmt.Errorf("volume %s is not %s: %+v %+v", name, what, pv.Spec, pv.Status)
		}
		return nil
	})
	return pv
}

func bound(pvc *corev1.PersistentVolumeClaim) bool { return pvc.Status.Phase == corev1.ClaimBound }

// waitEvent waits for an event with reason about the named object.
func (e *storageEnv) waitEvent(kind, name, reason string) {
	e.T.Helper()
	clustertest.Eventually(e.T, 30*time.Second, func() error {
		list, err := e.Client.Core.Events("").List(e.Ctx, metav1.ListOptions{FieldSelector: fields.Set{"involvedObject.name": name}.String()})
		if err != nil {
			return err
		}
		for _, ev := range list.Items {
			if ev.InvolvedObject.Kind == kind && ev.Reason == reason {
				return nil
			}
		}
		return fmt.Errorf("no %s event for %s %s", reason, kind, name)
	})
}

func (e *storageEnv) waitPodNode(name string) string {
	e.T.Helper()
	var node string
	clustertest.Eventually(e.T, 30*time.Second, func() error {
		p, err := e.Client.Core.Pods("default").Get(e.Ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Spec.NodeName == "" {
			return fmt.Errorf("pod %s not scheduled: %+v", name, p.Status.Conditions)
		}
		node = p.Spec.NodeName
		return nil
	})
	return node
}

func (e *storageEnv) deletePodNow(name string) {
	e.T.Helper()
	zero := int64(0)
	if err := e.Client.Core.Pods("default").Delete(e.Ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		e.T.Fatal(err)
	}
}
