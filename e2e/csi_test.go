package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/testsupport/testenv"
)

const (
	csiDriverName = "csi.bonsai.test"
	csiTopoKey    = "topology.csi.bonsai.test/node"
)

// csiDriverProc is the test CSI driver (testsupport/csidriver, a
// hostpath-like driver speaking the CSI gRPC spec that registers as
// node-driver-registrar does) running as its own process.
type csiDriverProc struct {
	*draDriver // the same process handling: build, start, stop, output
	state      string
}

func startCSIDriver(t *testing.T, e *podEnv, extra ...string) *csiDriverProc {
	t.Helper()
	root := filepath.Join(e.s.dataDir, "kubelet")
	state := t.TempDir()
	args := append([]string{"-node", e.node, "-registry-dir", filepath.Join(root, "plugins_registry"), "-state-dir", state}, extra...)
	d := &draDriver{bin: filepath.Join(t.TempDir(), "csidriver"), args: args}
	if out, err := exec.Command("go", "build", "-o", d.bin, "bonsai.dev/bonsai/testsupport/csidriver").CombinedOutput(); err != nil {
		t.Fatalf("building the test CSI driver: %v\n%s", err, out)
	}
	d.start(t)
	t.Cleanup(d.stop)
	return &csiDriverProc{draDriver: d, state: state}
}

// staticVolume makes a volume in the driver's state as CreateVolume
// would, for a statically provisioned PersistentVolume.
func (d *csiDriverProc) staticVolume(t *testing.T, id string, size int64) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(d.state, "volumes", id), 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(d.state, "volumes", id), 0o777)
	b, _ := json.Marshal(map[string]any{"id": id, "capacity": size})
	if err := os.WriteFile(filepath.Join(d.state, "volumes", id+".json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// mountsUnder counts the mount points under dir.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, f[4])
		}
	}
	return out
}

// csiMounts are the CSI mounts of the node: published in pod dirs and
// staged.
func csiMounts(t *testing.T, e *podEnv) []string {
	t.Helper()
	var out []string
	for _, m := range mountsUnder(t, filepath.Join(e.s.dataDir, "agent", "pods")) {
		if strings.Contains(m, "/kubernetes.io~csi/") {
			out = append(out, m)
		}
	}
	return append(out, mountsUnder(t, filepath.Join(e.s.dataDir, "kubelet", "plugins"))...)
}

// A CSI driver registers through the plugin registry: its NodeGetInfo
// goes into the node's CSINode (node ID, topology keys, max volumes),
// annotation and labels. A statically provisioned CSI volume is staged
// once and published into a pod (fsGroup applied, the driver's
// podInfoOnMount honoured) beside an inline ephemeral CSI volume; the pod
// and its mounts survive a restart of bonsai without a second publish;
// its deletion unpublishes and unstages; the data stays for the next pod,
// which mounts the claim read-only. With the driver gone the CSINode
// loses it, and a pod's deletion waits for its volumes' unpublish.
func TestCSIDriverNode(t *testing.T) {
	testenv.Require(t, os.Geteuid() == 0, "CSI tests need root (containerd, mounts)")
	e := startPodEnv(t)
	d := startCSIDriver(t, e, "-max-volumes", "7")

	waitFor(t, 20*time.Second, "the driver in the node's CSINode", func() bool {
		cn, err := e.cs.StorageV1().CSINodes().Get(t.Context(), e.node, metav1.GetOptions{})
		if err != nil || len(cn.Spec.Drivers) != 1 {
			return false
		}
		dr := cn.Spec.Drivers[0]
		return dr.Name == csiDriverName && dr.NodeID == e.node && len(dr.TopologyKeys) == 1 && dr.TopologyKeys[0] == csiTopoKey &&
			dr.Allocatable != nil && dr.Allocatable.Count != nil && *dr.Allocatable.Count == 7
	})
	node, err := e.cs.CoreV1().Nodes().Get(t.Context(), e.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Labels[csiTopoKey] != e.node || node.Annotations["csi.volume.kubernetes.io/nodeid"] != fmt.Sprintf(`{%q:%q}`, csiDriverName, e.node) {
		t.Fatalf("node labels %v annotations %v: want the driver's topology label and node ID", node.Labels, node.Annotations)
	}
	if !strings.Contains(d.output(), "registered\n") {
		t.Fatalf("the driver was not told it is registered:\n%s", d.output())
	}

	if _, err := e.cs.StorageV1().CSIDrivers().Create(t.Context(), &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: csiDriverName},
		Spec: storagev1.CSIDriverSpec{
			AttachRequired: ptr(false), PodInfoOnMount: ptr(true), FSGroupPolicy: ptr(storagev1.FileFSGroupPolicy),
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent, storagev1.VolumeLifecycleEphemeral},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	d.staticVolume(t, "static1", 1<<30)
	fs := corev1.PersistentVolumeFilesystem
	if _, err := e.cs.CoreV1().PersistentVolumes().Create(t.Context(), &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "static1"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			VolumeMode:                    &fs,
			StorageClassName:              "",
			ClaimRef:                      &corev1.ObjectReference{Namespace: "default", Name: "static"},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: csiDriverName, VolumeHandle: "static1"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cs.CoreV1().PersistentVolumeClaims("default").Create(t.Context(), &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "static"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeName: "static1", StorageClassName: ptr(""),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	csiPod := func(name, script string, readOnly bool) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: ptr(int64(1)),
				SecurityContext:               &corev1.PodSecurityContext{FSGroup: ptr(int64(2345))},
				Volumes: []corev1.Volume{
					{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "static", ReadOnly: readOnly}}},
					{Name: "inline", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: csiDriverName, VolumeAttributes: map[string]string{"content": "inline-" + name}}}},
				},
				Containers: []corev1.Container{{
					Name: "main", Image: podImage, Command: sh(script),
					VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}, {Name: "inline", MountPath: "/inline"}},
				}},
			},
		}
	}
	if _, err := e.cs.CoreV1().Pods("default").Create(t.Context(), csiPod("writer",
		`echo hello > /data/f && stat -c %g /data/f && cat /inline/content && echo; sleep 3600`, false), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w := e.waitPod(t, "writer", 60*time.Second, "Running", running)
	waitLog(t, e, w, "2345\ninline-writer\n")
	out := d.output()
	if strings.Count(out, "NodeStageVolume static1 ") != 1 || strings.Count(out, "NodePublishVolume static1 ") != 1 ||
		!strings.Contains(out, "pod=default/writer") || !strings.Contains(out, "ephemeral=true") {
		t.Fatalf("driver calls: want one stage and one publish of static1 with the pod's identity and an ephemeral publish:\n%s", out)
	}
	stagingRoot := filepath.Join(e.s.dataDir, "kubelet", "plugins", "kubernetes.io", "csi", csiDriverName)
	if m := mountsUnder(t, stagingRoot); len(m) != 1 {
		t.Fatalf("staging mounts %v: want one", m)
	}

	// bonsai restarts: the pod keeps running and its volumes mounted,
	// nothing is published again.
	e.restart(t)
	waitFor(t, 20*time.Second, "the driver registered again", func() bool {
		return strings.Count(d.output(), "registered\n") >= 2
	})
	if got := e.waitPod(t, "writer", 30*time.Second, "Running", running); got.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("writer restarted over bonsai's restart: %s", statusSummary(got))
	}
	time.Sleep(2 * time.Second)
	if n := strings.Count(d.output(), "NodePublishVolume static1 "); n != 1 {
		t.Fatalf("static1 published %d times over a restart:\n%s", n, d.output())
	}

	// Deleting the pod unpublishes both volumes and unstages static1;
	// the data stays in the volume.
	e.deletePods(t, "writer")
	out = d.output()
	for _, want := range []string{"NodeUnpublishVolume static1 ", "NodeUnstageVolume static1 ", "NodeUnpublishVolume csi-"} {
		if !strings.Contains(out, want) {
			t.Fatalf("driver calls lack %q after the pod's deletion:\n%s", want, out)
		}
	}
	if m := csiMounts(t, e); len(m) != 0 {
		t.Fatalf("mounts left after the pod's deletion: %v", m)
	}
	if b, err := os.ReadFile(filepath.Join(d.state, "volumes", "static1", "f")); err != nil || string(b) != "hello\n" {
		t.Fatalf("the volume's data after the pod's deletion: %q %v", b, err)
	}

	// The next pod reads the data through a read-only claim.
	if _, err := e.cs.CoreV1().Pods("default").Create(t.Context(), csiPod("reader",
		`cat /data/f; touch /data/g 2>/dev/null || echo read-only; sleep 3600`, true), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := e.waitPod(t, "reader", 60*time.Second, "Running", running)
	waitLog(t, e, r, "hello\nread-only\n")
	if !strings.Contains(d.output(), "NodePublishVolume static1 ") || !strings.Contains(d.output(), "ro=true ephemeral=false pod=default/reader") {
		t.Fatalf("reader's publish was not read-only:\n%s", d.output())
	}

	// The driver goes: it leaves the CSINode, and the reader's deletion
	// waits for it to come back and unpublish.
	d.stop()
	waitFor(t, 20*time.Second, "the driver gone from the CSINode", func() bool {
		cn, err := e.cs.StorageV1().CSINodes().Get(t.Context(), e.node, metav1.GetOptions{})
		return err == nil && len(cn.Spec.Drivers) == 0
	})
	if err := e.cs.CoreV1().Pods("default").Delete(t.Context(), "reader", metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(1))}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Second)
	if _, err := e.cs.CoreV1().Pods("default").Get(t.Context(), "reader", metav1.GetOptions{}); err != nil {
		t.Fatalf("reader left the API with its volumes still mounted: %v", err)
	}
	if m := csiMounts(t, e); len(m) != 3 {
		t.Fatalf("reader's volume mounts without the driver: %v, want both publishes and the staging kept", m)
	}
	d.start(t)
	waitFor(t, 30*time.Second, "reader gone once the driver is back", func() bool {
		_, err := e.cs.CoreV1().Pods("default").Get(t.Context(), "reader", metav1.GetOptions{})
		return err != nil
	})
	if m := csiMounts(t, e); len(m) != 0 {
		t.Fatalf("mounts left: %v", m)
	}
}
