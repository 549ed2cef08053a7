package pvbinder_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/testsupport/clustertest"
)

// waitUnschedulable waits for the scheduler to give up on a pod with a
// message that says why.
func (e *storageEnv) waitUnschedulableFor(name, why string) {
	e.T.Helper()
	clustertest.Eventually(e.T, 30*time.Second, func() error {
		p, err := e.Client.Core.Pods("default").Get(e.Ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Spec.NodeName != "" {
			return fmt.Errorf("pod %s scheduled to %s, want it unschedulable for %q", name, p.Spec.NodeName, why)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable && strings.Contains(c.Message, why) {
				return nil
			}
		}
		return fmt.Errorf("pod %s conditions %+v, want unschedulable for %q", name, p.Status.Conditions, why)
	})
}

func (e *storageEnv) nodeNames() []string {
	e.T.Helper()
	nodes, err := e.Client.Core.Nodes().List(e.Ctx, metav1.ListOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	var out []string
	for _, n := range nodes.Items {
		out = append(out, n.Name)
	}
	return out
}

func csiVolume(name, driver, handle, claimName string) *corev1.PersistentVolume {
	pv := volume(name, "", "1Gi", corev1.PersistentVolumeReclaimRetain)
	pv.Spec.PersistentVolumeSource = corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: handle}}
	pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "default", Name: claimName}
	return pv
}

// TestCSINodeVolumeLimits: the scheduler's NodeVolumeLimits keeps a
// node's volumes of a CSI driver within its CSINode's allocatable count;
// a volume the node already has does not count twice.
func TestCSINodeVolumeLimits(t *testing.T) {
	e := newStorageEnv(t, 1)
	node := e.nodeNames()[0]
	if _, err := e.Client.Storage.CSINodes().Create(e.Ctx, &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: node},
		Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{
			Name: "csi.limit.test", NodeID: node, Allocatable: &storagev1.VolumeNodeResources{Count: new(int32(1))},
		}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"one", "two"} {
		e.createVolume(csiVolume("pv-"+n, "csi.limit.test", "h-"+n, n))
		c := claim(n, "", "1Gi")
		c.Spec.VolumeName = "pv-" + n
		e.createClaim(c)
		e.waitClaim(n, "Bound", bound)
	}
	e.createPod(podWithClaim("first", "one"))
	e.waitPodNode("first")
	e.createPod(podWithClaim("second", "two"))
	e.waitUnschedulableFor("second", "node(s) exceed max volume count")
	e.createPod(podWithClaim("again", "one"))
	if got := e.waitPodNode("again"); got != node {
		t.Fatalf("a pod of a volume the node has went to %q", got)
	}
	// The first pod goes: the second fits.
	e.deletePodNow("first")
	e.deletePodNow("again")
	if got := e.waitPodNode("second"); got != node {
		t.Fatalf("second went to %q", got)
	}
}

// TestCSIStorageCapacity: a WaitForFirstConsumer claim of a driver that
// tracks capacity is provisioned only where a CSIStorageCapacity of its
// class holds it.
func TestCSIStorageCapacity(t *testing.T) {
	e := newStorageEnv(t, 2)
	nodes := e.nodeNames()
	if _, err := e.Client.Storage.CSIDrivers().Create(e.Ctx, &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: "csi.cap.test"}, Spec: storagev1.CSIDriverSpec{StorageCapacity: new(true)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.createClass("cap", "csi.cap.test", storagev1.VolumeBindingWaitForFirstConsumer)
	n, err := e.Client.Core.Nodes().Get(e.Ctx, nodes[1], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	host := n.Labels[corev1.LabelHostname]
	if host == "" {
		t.Fatal(errors.New("simulated node without a hostname label"))
	}
	q := quantity("1Gi")
	if _, err := e.Client.Storage.CSIStorageCapacities("default").Create(e.Ctx, &storagev1.CSIStorageCapacity{
		ObjectMeta:       metav1.ObjectMeta{Name: "cap-1"},
		StorageClassName: "cap", Capacity: &q,
		NodeTopology: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelHostname: host}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.createClaim(claim("big", "cap", "2Gi"))
	e.createPod(podWithClaim("big", "big"))
	e.waitUnschedulableFor("big", "node(s) did not have enough free storage")
	e.createClaim(claim("small", "cap", "512Mi"))
	e.createPod(podWithClaim("small", "small"))
	clustertest.Eventually(t, 30*time.Second, func() error {
		c, err := e.Client.Core.PersistentVolumeClaims("default").Get(e.Ctx, "small", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := c.Annotations[annSelectedNode]; got != nodes[1] {
			return fmt.Errorf("selected node %q, want %q (the one with capacity)", got, nodes[1])
		}
		return nil
	})
}
