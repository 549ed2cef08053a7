package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/testsupport/testenv"
)

const benchCSIDriver = "csi.bonsai.test"

type csiResults struct {
	provP50, provP99 *float64
	rss0, rss30      *float64
}

func csiRows(r *csiResults, seq, vols int) []Row {
	row := func(name, unit string, v *float64) Row {
		return Row{Name: "csi: " + name, Unit: unit, Bonsai: v}
	}
	return []Row{
		row(fmt.Sprintf("claim create → pod Running with a provisioned volume p50 (%d sequential, external-provisioner)", seq), "ms", r.provP50),
		row(fmt.Sprintf("claim create → pod Running with a provisioned volume p99 (%d sequential, external-provisioner)", seq), "ms", r.provP99),
		row("RSS added by the CSI machinery, driver registered, 0 volumes", "MB", r.rss0),
		row(fmt.Sprintf("RSS added by the CSI machinery, %d pods with a CSI volume each (against %d with an emptyDir)", vols, vols), "MB", r.rss30),
	}
}

// csiSuite runs a real node with the test CSI driver
// (testsupport/csidriver) and the real external-provisioner as
// processes of their own.
func csiSuite(ctx context.Context, b *bench) ([]Row, error) {
	seq, vols := 20, 30
	if b.quick {
		seq = 5
	}
	res := &csiResults{}
	rows := func() []Row { return csiRows(res, seq, vols) }
	if os.Geteuid() != 0 {
		return rows(), errors.New("the csi suite needs root (mounts, network namespaces, containerd)")
	}
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return rows(), err
	}
	repo := filepath.Dir(strings.TrimSpace(string(out)))
	b.logf("csi: building the external-provisioner (minutes the first time)")
	prov, _, err := testenv.BuildCSISidecar("go", repo, "csi-provisioner")
	if err != nil {
		return rows(), err
	}
	driver := filepath.Join(b.dir, "csidriver")
	build := execCommand(ctx, "go", "build", "-o", driver, "./testsupport/csidriver")
	build.Dir = repo
	if err := build.Run(); err != nil {
		return rows(), fmt.Errorf("go build ./testsupport/csidriver: %w", err)
	}
	b.logf("csi: starting bonsai with its own containerd")
	n, err := startRealNode(ctx, b, "csi", "10.207.0.0/16")
	if err != nil {
		return rows(), err
	}
	defer n.close()
	pid := n.srv.cmd.Process.Pid
	settledRSS := func() (float64, error) {
		if err := sleep(ctx, 5*time.Second); err != nil {
			return 0, err
		}
		v := rssOf(pid)
		if v == nil {
			return 0, errors.New("bonsai's RSS unreadable")
		}
		return *v, nil
	}
	base, err := settledRSS()
	if err != nil {
		return rows(), err
	}
	root := filepath.Join(n.dir, "kubelet")
	state := filepath.Join(b.dir, "csi-state")
	d := execCommand(ctx, driver, "-node", n.name, "-registry-dir", filepath.Join(root, "plugins_registry"), "-state-dir", state)
	if err := d.Start(); err != nil {
		return rows(), err
	}
	b.onCleanup(func() { d.Process.Kill(); d.Wait() })
	if err := waitFor(ctx, 30*time.Second, func() bool {
		cn, err := n.cs.StorageV1().CSINodes().Get(ctx, n.name, metav1.GetOptions{})
		return err == nil && len(cn.Spec.Drivers) == 1
	}); err != nil {
		return rows(), fmt.Errorf("the CSI driver did not register: %w\n%s", err, n.srv.logTail())
	}
	rss0, err := settledRSS()
	if err != nil {
		return rows(), err
	}
	res.rss0 = num(rss0 - base)

	if _, err := n.cs.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: benchCSIDriver},
		Spec: storagev1.CSIDriverSpec{AttachRequired: new(false), PodInfoOnMount: new(true),
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent, storagev1.VolumeLifecycleEphemeral}},
	}, metav1.CreateOptions{}); err != nil {
		return rows(), err
	}
	b.logf("csi: %d pods with an emptyDir, then %d with an inline CSI volume", vols, vols)
	if _, err := podsToRunning(ctx, n.cs, "plain", vols, func(name string) *corev1.Pod {
		return csiBenchPod(name, n.name, corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}})
	}); err != nil {
		return rows(), fmt.Errorf("%w\n%s", err, n.srv.logTail())
	}
	plain, err := settledRSS()
	if err != nil {
		return rows(), err
	}
	if err := deletePods(ctx, n.cs); err != nil {
		return rows(), err
	}
	if err := sleep(ctx, 5*time.Second); err != nil {
		return rows(), err
	}
	if _, err := podsToRunning(ctx, n.cs, "inline", vols, func(name string) *corev1.Pod {
		return csiBenchPod(name, n.name, corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: benchCSIDriver}})
	}); err != nil {
		return rows(), err
	}
	withCSI, err := settledRSS()
	if err != nil {
		return rows(), err
	}
	res.rss30 = num(withCSI - plain)
	if err := deletePods(ctx, n.cs); err != nil {
		return rows(), err
	}

	b.logf("csi: %d claims provisioned by the external-provisioner, one at a time", seq)
	p := execCommand(ctx, prov, "--csi-address="+filepath.Join(root, "plugins", benchCSIDriver, "csi.sock"),
		"--kubeconfig="+n.ac.kubeconfig, "--feature-gates=Topology=true", "--leader-election=false")
	if err := p.Start(); err != nil {
		return rows(), err
	}
	b.onCleanup(func() { p.Process.Kill(); p.Wait() })
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	if _, err := n.cs.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-csi"}, Provisioner: benchCSIDriver, VolumeBindingMode: &wffc,
	}, metav1.CreateOptions{}); err != nil {
		return rows(), err
	}
	var lat []time.Duration
	for i := range seq {
		name := fmt.Sprintf("prov-%d", i)
		t0 := time.Now()
		if _, err := n.cs.CoreV1().PersistentVolumeClaims("default").Create(ctx, &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: new("bench-csi"),
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("16Mi")}},
			},
		}, metav1.CreateOptions{}); err != nil {
			return rows(), err
		}
		if _, err := podsToRunning(ctx, n.cs, name, 1, func(pod string) *corev1.Pod {
			return csiBenchPod(pod, "", corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}})
		}); err != nil {
			return rows(), fmt.Errorf("%w\n%s", err, n.srv.logTail())
		}
		lat = append(lat, time.Since(t0))
	}
	res.provP50, res.provP99 = ms(percentile(lat, 0.5)), ms(percentile(lat, 0.99))
	if err := deletePods(ctx, n.cs); err != nil {
		return rows(), err
	}
	return rows(), nil
}

func csiBenchPod(name, node string, src corev1.VolumeSource) *corev1.Pod {
	zero := int64(0)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &zero, NodeName: node,
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: src}},
			Containers: []corev1.Container{{
				Name: "main", Image: "bonsai.test/busybox:1", ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
			}}},
	}
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", timeout)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}
