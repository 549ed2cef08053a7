package pvbinder_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/localpath"
	"bonsai.dev/bonsai/controllers/pvbinder"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

const (
	annBindCompleted      = "pv.kubernetes.io/bind-completed"
	annBoundByController  = "pv.kubernetes.io/bound-by-controller"
	annSelectedNode       = "volume.kubernetes.io/selected-node"
	annStorageProvisioner = "volume.kubernetes.io/storage-provisioner"
	annProvisionedBy      = "pv.kubernetes.io/provisioned-by"
)

// TestDynamicProvisioningWaitsForFirstConsumer: a claim without a class
// gets local-path, stays Pending until a pod uses it, then gets a
// hostPath volume on the pod's node (directory on disk, node affinity,
// capacity, reclaim policy, claimRef); deleting the claim deletes the
// volume and its directory.
func TestDynamicProvisioningWaitsForFirstConsumer(t *testing.T) {
	e := newStorageEnv(t, 3)
	clustertest.Eventually(t, 30*time.Second, func() error {
		_, err := e.Client.Storage.StorageClasses().Get(e.Ctx, localpath.DefaultClassName, metav1.GetOptions{})
		return err
	})
	pvc := e.createClaim(claim("data", "-", "2Gi"))
	if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != localpath.DefaultClassName {
		t.Fatalf("claim class = %v, want the default %q", pvc.Spec.StorageClassName, localpath.DefaultClassName)
	}
	e.waitEvent("PersistentVolumeClaim", "data", "WaitForFirstConsumer")
	if got := e.waitClaim("data", "Pending", func(c *corev1.PersistentVolumeClaim) bool { return c.Status.Phase == corev1.ClaimPending }); got.Spec.VolumeName != "" {
		t.Fatalf("claim bound before a consumer: %q", got.Spec.VolumeName)
	}
	if list, err := e.Client.Core.PersistentVolumes().List(e.Ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 0 {
		t.Fatalf("volumes before a consumer: %v %v", list, err)
	}

	e.createPod(podWithClaim("user", "data"))
	node := e.waitPodNode("user")
	pvc = e.waitClaim("data", "Bound", bound)
	if pvc.Annotations[annSelectedNode] != node || pvc.Annotations[annStorageProvisioner] != localpath.Provisioner || pvc.Annotations[annBindCompleted] == "" {
		t.Errorf("claim annotations = %v, want selected node %s, provisioner, bind-completed", pvc.Annotations, node)
	}
	if got := pvc.Status.Capacity[corev1.ResourceStorage]; got.Cmp(quantity("2Gi")) != 0 {
		t.Errorf("claim capacity = %s, want 2Gi", got.String())
	}
	pvName := "pvc-" + string(pvc.UID)
	if pvc.Spec.VolumeName != pvName {
		t.Fatalf("claim volume = %q, want %q", pvc.Spec.VolumeName, pvName)
	}
	pv := e.waitVolume(pvName, "Bound", func(v *corev1.PersistentVolume) bool { return v.Status.Phase == corev1.VolumeBound })
	dir := filepath.Join(e.dataDir, "storage", pvName+"_default_data")
	wantAffinity := &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
	}}}}
	if diff := cmp.Diff(wantAffinity, pv.Spec.NodeAffinity); diff != "" {
		t.Errorf("node affinity (-want +got):\n%s", diff)
	}
	if pv.Spec.HostPath == nil || pv.Spec.HostPath.Path != dir {
		t.Errorf("volume source = %+v, want hostPath %s", pv.Spec.PersistentVolumeSource, dir)
	}
	if got := pv.Spec.Capacity[corev1.ResourceStorage]; got.Cmp(quantity("2Gi")) != 0 || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete ||
		pv.Spec.StorageClassName != localpath.DefaultClassName || pv.Annotations[annProvisionedBy] != localpath.Provisioner {
		t.Errorf("volume = %+v %v", pv.Spec, pv.Annotations)
	}
	if ref := pv.Spec.ClaimRef; ref == nil || ref.Name != "data" || ref.UID != pvc.UID {
		t.Errorf("claimRef = %+v", ref)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		t.Fatalf("volume directory: %v", err)
	}

	// Reclaim Delete: the claim goes, then the volume and its directory.
	e.deletePodNow("user")
	if err := e.Client.Core.PersistentVolumeClaims("default").Delete(e.Ctx, "data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 30*time.Second, func() error {
		if _, err := e.Client.Core.PersistentVolumes().Get(e.Ctx, pvName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("volume still there (%v)", err)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			return fmt.Errorf("directory still there (%v)", err)
		}
		return nil
	})
}

// TestDefaultClassIsNotOverwritten: a local-path class the user changed
// stays as it is, and its reclaim policy is what provisioned volumes get.
func TestDefaultClassIsNotOverwritten(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{Nodes: 1})
	retain := corev1.PersistentVolumeReclaimRetain
	mine := localpath.DefaultClass()
	mine.ReclaimPolicy = &retain
	mine.Annotations["mine"] = "yes"
	if _, err := e.Client.Storage.StorageClasses().Create(e.Ctx, mine, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	se := startControllers(e)
	se.createClaim(claim("data", "-", "1Gi"))
	se.createPod(podWithClaim("user", "data"))
	// The provisioner ensures its class before it provisions anything.
	pvc := se.waitClaim("data", "Bound", bound)
	pv := se.waitVolume(pvc.Spec.VolumeName, "Bound", func(v *corev1.PersistentVolume) bool { return v.Status.Phase == corev1.VolumeBound })
	if pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain {
		t.Errorf("provisioned volume's reclaim policy = %s, want the class's Retain", pv.Spec.PersistentVolumeReclaimPolicy)
	}
	sc, err := e.Client.Storage.StorageClasses().Get(e.Ctx, localpath.DefaultClassName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *sc.ReclaimPolicy != corev1.PersistentVolumeReclaimRetain || sc.Annotations["mine"] != "yes" {
		t.Errorf("the user's class was changed: %+v", sc)
	}
}

// TestStaticBinding: claims bind to pre-created volumes by class, size
// (the smallest that fits), access modes, selector, and pre-binding from
// either side.
func TestStaticBinding(t *testing.T) {
	e := newStorageEnv(t, 1)
	e.createClass("manual", "kubernetes.io/no-provisioner", storagev1.VolumeBindingImmediate)
	rwx := corev1.ReadWriteMany
	for _, pv := range []*corev1.PersistentVolume{
		volume("small", "manual", "1Gi", corev1.PersistentVolumeReclaimRetain),
		volume("big", "manual", "5Gi", corev1.PersistentVolumeReclaimRetain),
		volume("shared", "manual", "2Gi", corev1.PersistentVolumeReclaimRetain, corev1.ReadWriteOnce, rwx),
		volume("other-class", "other", "1Gi", corev1.PersistentVolumeReclaimRetain),
		func() *corev1.PersistentVolume {
			pv := volume("labelled", "manual", "10Gi", corev1.PersistentVolumeReclaimRetain)
			pv.Labels = map[string]string{"tier": "gold"}
			return pv
		}(),
		func() *corev1.PersistentVolume {
			pv := volume("reserved", "manual", "3Gi", corev1.PersistentVolumeReclaimRetain)
			pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "default", Name: "wants-reserved"}
			return pv
		}(),
		volume("named", "manual", "4Gi", corev1.PersistentVolumeReclaimRetain),
	} {
		e.createVolume(pv)
	}
	selector := claim("gold", "manual", "1Gi")
	selector.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}
	named := claim("names-volume", "manual", "1Gi")
	named.Spec.VolumeName = "named"
	for _, tc := range []struct {
		claim          *corev1.PersistentVolumeClaim
		want           string
		boundByBinder  bool
		wantCapacity   string
		wantAccessMode []corev1.PersistentVolumeAccessMode
	}{
		{claim("fits-small", "manual", "500Mi"), "small", true, "1Gi", []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}},
		{claim("needs-rwx", "manual", "1Gi", rwx), "shared", true, "2Gi", []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce, rwx}},
		{claim("needs-other", "other", "1Gi"), "other-class", true, "1Gi", []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}},
		{selector, "labelled", true, "10Gi", []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}},
		{claim("wants-reserved", "manual", "1Gi"), "reserved", false, "3Gi", []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}},
		{named, "named", true, "4Gi", []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}},
		{claim("fits-big", "manual", "5Gi"), "big", true, "5Gi", []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}},
	} {
		t.Run(tc.claim.Name, func(t *testing.T) {
			e.createClaim(tc.claim)
			pvc := e.waitClaim(tc.claim.Name, "Bound", bound)
			if pvc.Spec.VolumeName != tc.want {
				t.Fatalf("bound to %q, want %q", pvc.Spec.VolumeName, tc.want)
			}
			got := pvc.Status.Capacity[corev1.ResourceStorage]
			if got.Cmp(quantity(tc.wantCapacity)) != 0 {
				t.Errorf("capacity = %s, want %s", got.String(), tc.wantCapacity)
			}
			if diff := cmp.Diff(tc.wantAccessMode, pvc.Status.AccessModes); diff != "" {
				t.Errorf("access modes (-want +got):\n%s", diff)
			}
			if pvc.Annotations[annBindCompleted] != "yes" {
				t.Errorf("claim annotations = %v, want bind-completed", pvc.Annotations)
			}
			// The binder sets volumeName, unless the user did.
			if _, ok := pvc.Annotations[annBoundByController]; ok != (tc.want != "named") {
				t.Errorf("claim bound-by-controller = %v", pvc.Annotations)
			}
			pv := e.waitVolume(tc.want, "Bound", func(v *corev1.PersistentVolume) bool { return v.Status.Phase == corev1.VolumeBound })
			if pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != pvc.UID {
				t.Errorf("claimRef = %+v, want the claim", pv.Spec.ClaimRef)
			}
			if _, ok := pv.Annotations[annBoundByController]; ok != tc.boundByBinder {
				t.Errorf("volume bound-by-controller = %v, want %v", pv.Annotations, tc.boundByBinder)
			}
		})
	}
	// Nothing left fits a 20Gi claim: it stays Pending with an event.
	e.createClaim(claim("too-big", "manual", "20Gi"))
	e.waitEvent("PersistentVolumeClaim", "too-big", "ExternalProvisioning")
	if pvc := e.waitClaim("too-big", "Pending", func(c *corev1.PersistentVolumeClaim) bool { return c.Status.Phase == corev1.ClaimPending }); pvc.Spec.VolumeName != "" {
		t.Errorf("too-big bound to %q", pvc.Spec.VolumeName)
	}
}

// TestReclaimRetainAndProtection: a Retain volume is Released (and kept)
// when its claim goes; a claim in use by a pod, and a bound volume, stay
// while their finalizers hold them.
func TestReclaimRetainAndProtection(t *testing.T) {
	e := newStorageEnv(t, 1)
	e.createClass("manual", "kubernetes.io/no-provisioner", storagev1.VolumeBindingImmediate)
	e.createVolume(volume("kept", "manual", "1Gi", corev1.PersistentVolumeReclaimRetain))
	e.createClaim(claim("data", "manual", "1Gi"))
	e.waitClaim("data", "Bound", bound)
	e.createPod(podWithClaim("user", "data"))
	e.waitPodNode("user")

	// The volume is bound: deleting it only marks it.
	if err := e.Client.Core.PersistentVolumes().Delete(e.Ctx, "kept", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The claim is in use: deleting it only marks it.
	if err := e.Client.Core.PersistentVolumeClaims("default").Delete(e.Ctx, "data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// A claim nobody uses, deleted after, is let go; the controller
	// works in order, so by then it has judged "data" as well.
	e.createClaim(claim("marker", "manual", "1Gi"))
	if err := e.Client.Core.PersistentVolumeClaims("default").Delete(e.Ctx, "marker", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 30*time.Second, func() error {
		_, err := e.Client.Core.PersistentVolumeClaims("default").Get(e.Ctx, "marker", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("unused claim still there (%v)", err)
		}
		return nil
	})
	pvc, err := e.Client.Core.PersistentVolumeClaims("default").Get(e.Ctx, "data", metav1.GetOptions{})
	if err != nil || pvc.DeletionTimestamp == nil {
		t.Fatalf("claim in use: %v %v, want it kept and marked for deletion", pvc, err)
	}
	pv := e.waitVolume("kept", "marked for deletion", func(v *corev1.PersistentVolume) bool { return v.DeletionTimestamp != nil })
	if pv.Status.Phase != corev1.VolumeBound {
		t.Fatalf("volume phase = %s while its claim is in use", pv.Status.Phase)
	}

	// The pod goes: the claim goes, the volume is Released and, Retain
	// notwithstanding, goes too since the user deleted it.
	e.deletePodNow("user")
	clustertest.Eventually(t, 30*time.Second, func() error {
		if _, err := e.Client.Core.PersistentVolumeClaims("default").Get(e.Ctx, "data", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("claim still there (%v)", err)
		}
		if _, err := e.Client.Core.PersistentVolumes().Get(e.Ctx, "kept", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("volume still there (%v)", err)
		}
		return nil
	})

	// Retain without a deletion: the volume stays Released.
	e.createVolume(volume("retained", "manual", "1Gi", corev1.PersistentVolumeReclaimRetain))
	e.createClaim(claim("data2", "manual", "1Gi"))
	e.waitClaim("data2", "Bound", bound)
	if err := e.Client.Core.PersistentVolumeClaims("default").Delete(e.Ctx, "data2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	pv = e.waitVolume("retained", "Released", func(v *corev1.PersistentVolume) bool { return v.Status.Phase == corev1.VolumeReleased })
	if pv.DeletionTimestamp != nil || pv.Spec.ClaimRef == nil {
		t.Errorf("retained volume = %+v, want it kept with its claimRef", pv)
	}

	// Delete on a volume no provisioner made: nothing can delete it, so
	// it fails, as upstream's does without a deletable volume plugin.
	e.createVolume(volume("undeletable", "manual", "1Gi", corev1.PersistentVolumeReclaimDelete))
	e.createClaim(claim("data3", "manual", "1Gi"))
	e.waitClaim("data3", "Bound", bound)
	if err := e.Client.Core.PersistentVolumeClaims("default").Delete(e.Ctx, "data3", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitVolume("undeletable", "Failed", func(v *corev1.PersistentVolume) bool { return v.Status.Phase == corev1.VolumeFailed })
	e.waitEvent("PersistentVolume", "undeletable", "VolumeFailedDelete")
}

// TestWaitForFirstConsumerStaticLocalVolume: a WaitForFirstConsumer
// claim whose only fitting volume lives on one node puts its pod there,
// the scheduler binds the volume, and a second pod of the bound claim is
// held to the volume's node.
func TestWaitForFirstConsumerStaticLocalVolume(t *testing.T) {
	e := newStorageEnv(t, 3)
	e.createClass("local", "kubernetes.io/no-provisioner", storagev1.VolumeBindingWaitForFirstConsumer)
	pv := volume("on-sim-2", "local", "1Gi", corev1.PersistentVolumeReclaimRetain)
	pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{"sim-2"}}},
	}}}}
	e.createVolume(pv)
	e.createClaim(claim("local-data", "local", "1Gi"))
	e.waitEvent("PersistentVolumeClaim", "local-data", "WaitForFirstConsumer")
	e.createPod(podWithClaim("first", "local-data"))
	if node := e.waitPodNode("first"); node != "sim-2" {
		t.Fatalf("first pod on %s, want sim-2 (the volume's node)", node)
	}
	pvc := e.waitClaim("local-data", "Bound", bound)
	if pvc.Spec.VolumeName != "on-sim-2" {
		t.Fatalf("claim bound to %q", pvc.Spec.VolumeName)
	}
	if _, ok := pvc.Annotations[annSelectedNode]; ok {
		t.Errorf("a claim bound to an existing volume got a selected node: %v", pvc.Annotations)
	}
	e.createPod(podWithClaim("second", "local-data"))
	if node := e.waitPodNode("second"); node != "sim-2" {
		t.Fatalf("second pod on %s, want sim-2", node)
	}
	// A pod of the claim that may only go elsewhere fits nowhere.
	elsewhere := podWithClaim("elsewhere", "local-data")
	elsewhere.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "sim-0"}
	e.createPod(elsewhere)
	e.waitUnschedulable("elsewhere", "0/3 nodes are available: 1 node(s) had volume node affinity conflict, 2 node(s) didn't match Pod's node affinity/selector.")
}

// TestSchedulerWaitsForClaims: a pod whose claim is missing, or unbound
// in an Immediate class, is unschedulable with kube-scheduler's reasons,
// and is scheduled once a volume binds its claim.
func TestSchedulerWaitsForClaims(t *testing.T) {
	e := newStorageEnv(t, 1)
	e.createClass("manual", "kubernetes.io/no-provisioner", storagev1.VolumeBindingImmediate)
	e.createPod(podWithClaim("waiting", "later"))
	e.waitUnschedulable("waiting", `0/1 nodes are available: persistentvolumeclaim "later" not found.`)
	e.createClaim(claim("later", "manual", "1Gi"))
	e.waitUnschedulable("waiting", "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims.")
	e.createVolume(volume("arrives", "manual", "1Gi", corev1.PersistentVolumeReclaimRetain))
	e.waitPodNode("waiting")
	if pvc := e.waitClaim("later", "Bound", bound); pvc.Spec.VolumeName != "arrives" {
		t.Errorf("claim bound to %q", pvc.Spec.VolumeName)
	}
}

func (e *storageEnv) waitUnschedulable(name, msg string) {
	e.T.Helper()
	clustertest.Eventually(e.T, 30*time.Second, func() error {
		p, err := e.Client.Core.Pods("default").Get(e.Ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message == msg {
				return nil
			}
		}
		return fmt.Errorf("pod %s conditions %+v, want Unschedulable %q", name, p.Status.Conditions, msg)
	})
}

// TestDefaultClassAssignedLater: a claim made while there was no
// default class gets the default once one exists.
func TestDefaultClassAssignedLater(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{})
	inf := client.NewInformers(e.Config)
	binder, err := pvbinder.New(pvbinder.Config{Client: e.Client, Informers: inf, Logger: e.Log})
	if err != nil {
		t.Fatal(err)
	}
	inf.Start(e.Ctx)
	go binder.Run(e.Ctx)
	se := &storageEnv{Env: e}
	if pvc := se.createClaim(claim("early", "-", "1Gi")); pvc.Spec.StorageClassName != nil {
		t.Fatalf("claim got class %q with no default class", *pvc.Spec.StorageClassName)
	}
	se.waitEvent("PersistentVolumeClaim", "early", "FailedBinding")
	if _, err := e.Client.Storage.StorageClasses().Create(e.Ctx, &storagev1.StorageClass{
		ObjectMeta:  metav1.ObjectMeta{Name: "later", Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}},
		Provisioner: "example.com/none",
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	se.waitClaim("early", "given the default class", func(c *corev1.PersistentVolumeClaim) bool {
		return c.Spec.StorageClassName != nil && *c.Spec.StorageClassName == "later"
	})
}

// TestEphemeralVolume: a pod's generic ephemeral volume gets its claim,
// <pod>-<volume>, owned by the pod, provisioned on the pod's node.
func TestEphemeralVolume(t *testing.T) {
	e := newStorageEnv(t, 2)
	p := podWithClaim("scratch", "unused")
	p.Spec.Volumes[0].VolumeSource = corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
		VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"kind": "scratch"}},
			Spec:       claim("", "-", "1Gi").Spec,
		},
	}}
	e.createPod(p)
	node := e.waitPodNode("scratch")
	pvc := e.waitClaim("scratch-data", "Bound", bound)
	pod, err := e.Client.Core.Pods("default").Get(e.Ctx, "scratch", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ref := metav1.GetControllerOf(pvc); ref == nil || ref.UID != pod.UID || ref.Kind != "Pod" {
		t.Errorf("claim owner = %+v, want the pod", ref)
	}
	if pvc.Labels["kind"] != "scratch" || pvc.Annotations[annSelectedNode] != node {
		t.Errorf("claim = %v %v, want the template's labels and the pod's node", pvc.Labels, pvc.Annotations)
	}
}
