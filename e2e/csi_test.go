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

	appsv1 "k8s.io/api/apps/v1"
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
	t.Cleanup(func() {
		d.stop()
		if t.Failed() {
			t.Logf("CSI driver output:\n%s", tailText(d.output(), 6000))
		}
	})
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

// startSidecar runs a kubernetes-csi sidecar, built from its module, on
// the driver's socket against bonsai's API (admin kubeconfig, no leader
// election), as the driver's controller pod would.
func startSidecar(t *testing.T, e *podEnv, d *csiDriverProc, name string, extra ...string) *draDriver {
	t.Helper()
	bin := testenv.CSISidecar(t, name)
	sock := filepath.Join(e.s.dataDir, "kubelet", "plugins", csiDriverName, "csi.sock")
	args := append([]string{"--csi-address=" + sock, "--kubeconfig=" + filepath.Join(e.s.dataDir, "kubeconfig.yaml"), "--leader-election=false", "--v=2"}, extra...)
	p := &draDriver{bin: bin, args: args}
	p.start(t)
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("%s output:\n%s", name, tailText(p.output(), 6000))
		}
	})
	return p
}

func tailText(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// The real external-provisioner, external-attacher and external-resizer
// run against bonsai's API: volumes are provisioned for a StatefulSet's
// claims of a WaitForFirstConsumer class with the driver's topology,
// attached (the attach/detach controller's VolumeAttachments, which the
// kubelet waits for) and published; a pod's data survives its deletion
// and its replacement reads it; a claim is expanded online (controller
// then node expansion, the claim's status); deleting the pods detaches
// and deleting the claims deletes the volumes.
func TestCSISidecars(t *testing.T) {
	testenv.Require(t, os.Geteuid() == 0, "CSI tests need root (containerd, mounts)")
	e := startPodEnv(t)
	d := startCSIDriver(t, e, "-attach")
	if _, err := e.cs.StorageV1().CSIDrivers().Create(t.Context(), &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: csiDriverName},
		Spec:       storagev1.CSIDriverSpec{AttachRequired: ptr(true)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	prov := startSidecar(t, e, d, "csi-provisioner", "--feature-gates=Topology=true", "--extra-create-metadata", "--timeout=30s")
	startSidecar(t, e, d, "csi-attacher", "--timeout=30s")
	startSidecar(t, e, d, "csi-resizer", "--timeout=30s", "--handle-volume-inuse-error=false")
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	if _, err := e.cs.StorageV1().StorageClasses().Create(t.Context(), &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: "csi"}, Provisioner: csiDriverName, VolumeBindingMode: &wffc,
		AllowVolumeExpansion: ptr(true), ReclaimPolicy: ptr(corev1.PersistentVolumeReclaimDelete),
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ss := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr(int32(2)), ServiceName: "web",
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr(int64(1)),
					Containers: []corev1.Container{{
						Name: "main", Image: podImage,
						Command:      sh(`cat /data/name 2>/dev/null; hostname > /data/name; sleep 3600`),
						VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
					}},
				},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: ptr("csi"),
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Mi")}},
				},
			}},
		},
	}
	start := time.Now()
	if _, err := e.cs.AppsV1().StatefulSets("default").Create(t.Context(), ss, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"web-0", "web-1"} {
		p := e.waitPod(t, name, 90*time.Second, "Running", running)
		waitLog(t, e, p, "")
	}
	t.Logf("StatefulSet of 2 with provisioned volumes Running in %s", time.Since(start).Round(time.Millisecond))
	pvs, err := e.cs.CoreV1().PersistentVolumes().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pvs.Items) != 2 {
		t.Fatalf("%d PVs, want 2:\n%s", len(pvs.Items), prov.output())
	}
	for _, pv := range pvs.Items {
		src := pv.Spec.CSI
		if src == nil || src.Driver != csiDriverName || pv.Spec.ClaimRef == nil || pv.Annotations["pv.kubernetes.io/provisioned-by"] != csiDriverName {
			t.Fatalf("PV %s is not the driver's: %+v", pv.Name, pv.Spec)
		}
		na := pv.Spec.NodeAffinity
		if na == nil || na.Required == nil || len(na.Required.NodeSelectorTerms) != 1 ||
			na.Required.NodeSelectorTerms[0].MatchExpressions[0].Key != csiTopoKey || na.Required.NodeSelectorTerms[0].MatchExpressions[0].Values[0] != e.node {
			t.Fatalf("PV %s node affinity %+v: want the driver's topology of the selected node", pv.Name, na)
		}
		if _, err := os.Stat(filepath.Join(d.state, "volumes", src.VolumeHandle)); err != nil {
			t.Fatalf("PV %s: the driver has no volume %s: %v", pv.Name, src.VolumeHandle, err)
		}
	}

	vas, err := e.cs.StorageV1().VolumeAttachments().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(vas.Items) != 2 || !vas.Items[0].Status.Attached || !vas.Items[1].Status.Attached || strings.Count(d.output(), "ControllerPublishVolume pvc-") < 2 {
		t.Fatalf("%d VolumeAttachments: want both volumes attached by the driver:\n%s", len(vas.Items), d.output())
	}

	// data-web-1 grows online: the resizer expands the volume, the
	// kubelet the file system, and the claim reports the new size.
	pvc, err := e.cs.CoreV1().PersistentVolumeClaims("default").Get(t.Context(), "data-web-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pvc.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("128Mi")
	if _, err := e.cs.CoreV1().PersistentVolumeClaims("default").Update(t.Context(), pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "data-web-1 expanded to 128Mi", func() bool {
		pvc, err := e.cs.CoreV1().PersistentVolumeClaims("default").Get(t.Context(), "data-web-1", metav1.GetOptions{})
		c := pvc.Status.Capacity[corev1.ResourceStorage]
		return err == nil && c.Cmp(resource.MustParse("128Mi")) == 0 && len(pvc.Status.AllocatedResourceStatuses) == 0
	})
	if out := d.output(); !strings.Contains(out, "ControllerExpandVolume pvc-") || !strings.Contains(out, fmt.Sprintf("NodeExpandVolume pvc-%s %d", pvc.UID, 128<<20)) {
		t.Fatalf("driver calls lack the controller and node expansion of data-web-1:\n%s", out)
	}

	// web-0 goes; its replacement finds what it wrote.
	old, err := e.cs.CoreV1().Pods("default").Get(t.Context(), "web-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.cs.CoreV1().Pods("default").Delete(t.Context(), "web-0", metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(1))}); err != nil {
		t.Fatal(err)
	}
	p := e.waitPod(t, "web-0", 60*time.Second, "replaced and Running", func(p *corev1.Pod) bool { return p.UID != old.UID && running(p) })
	waitLog(t, e, p, "web-0\n")

	// The StatefulSet and its claims go: the provisioner deletes the
	// volumes (reclaim policy Delete).
	if err := e.cs.AppsV1().StatefulSets("default").Delete(t.Context(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.deletePods(t, "web-0", "web-1")
	for _, c := range []string{"data-web-0", "data-web-1"} {
		if err := e.cs.CoreV1().PersistentVolumeClaims("default").Delete(t.Context(), c, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 60*time.Second, "the provisioned volumes deleted", func() bool {
		pvs, err := e.cs.CoreV1().PersistentVolumes().List(t.Context(), metav1.ListOptions{})
		return err == nil && len(pvs.Items) == 0 && strings.Count(d.output(), "DeleteVolume pvc-") >= 2
	})
	if m := csiMounts(t, e); len(m) != 0 {
		t.Fatalf("mounts left: %v", m)
	}
	if vas, err := e.cs.StorageV1().VolumeAttachments().List(t.Context(), metav1.ListOptions{}); err != nil || len(vas.Items) != 0 {
		t.Fatalf("VolumeAttachments left: %v %v", vas, err)
	}
	if n := strings.Count(d.output(), "ControllerUnpublishVolume pvc-"); n < 2 {
		t.Fatalf("volumes detached %d times, want 2:\n%s", n, d.output())
	}
}
