package resourceclaim_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/resourceclaim"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

func start(t *testing.T) *clustertest.Env {
	e := clustertest.New(t, clustertest.Options{})
	clustertest.Start(e, func(inf *client.Informers) (*resourceclaim.Controller, error) {
		return resourceclaim.New(resourceclaim.Config{Client: e.Client, Informers: inf, Logger: e.Log})
	})
	return e
}

// waitFor polls cond for up to 30 s: a pod the scheduler found
// unschedulable before its claim existed is retried after a backoff of
// up to 10 s, which a loaded machine stretches.
func waitFor(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	var last error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		ok, err := cond()
		if ok {
			return
		}
		last = err
	}
	t.Fatalf("timed out waiting for %s (last error: %v)", what, last)
}

func template(e *clustertest.Env, t *testing.T, name string) {
	t.Helper()
	_, err := e.Client.Resource.ResourceClaimTemplates("default").Create(e.Ctx, &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.ResourceClaimTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"from": "template"}, Annotations: map[string]string{"note": "kept"}},
			Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{
				{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.example.com"}}}}},
		}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

func pod(name, node string, claims ...corev1.PodResourceClaim) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.PodSpec{
		NodeName:       node,
		ResourceClaims: claims,
		Containers: []corev1.Container{{Name: "c", Image: "busybox", Resources: corev1.ResourceRequirements{
			Claims: []corev1.ResourceClaim{{Name: claims[0].Name}}}}},
	}}
	return p
}

// allocate does what the scheduler does: protect, allocate and reserve
// the claim for the pod.
func allocate(t *testing.T, e *clustertest.Env, claim *resourcev1.ResourceClaim, p *corev1.Pod) *resourcev1.ResourceClaim {
	t.Helper()
	cl := e.Client.Resource.ResourceClaims("default")
	claim.Finalizers = append(claim.Finalizers, resourcev1.Finalizer)
	claim, err := cl.Update(e.Ctx, claim, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claim.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{
		{Request: "gpu", Driver: "gpu.example.com", Pool: "sim-0", Device: "gpu-0"}}}}
	if p != nil {
		claim.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: p.Name, UID: p.UID}}
	}
	if claim, err = cl.UpdateStatus(e.Ctx, claim, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return claim
}

// A pod's claim from a template: made with upstream's name, owner,
// annotation and the template's metadata, recorded in the pod's status,
// made again if deleted under the live pod; once the pod fails its
// reservation goes, the claim is deallocated, unprotected and deleted.
func TestClaimFromTemplate(t *testing.T) {
	e := start(t)
	template(e, t, "gpu-template")
	p, err := e.Client.Core.Pods("default").Create(e.Ctx, pod("trainer", "",
		corev1.PodResourceClaim{Name: "accel", ResourceClaimTemplateName: ptr.To("gpu-template")}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var claimName string
	waitFor(t, "the claim recorded in the pod's status", func() (bool, error) {
		p, err = e.Client.Core.Pods("default").Get(e.Ctx, "trainer", metav1.GetOptions{})
		if err != nil || len(p.Status.ResourceClaimStatuses) != 1 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
			return false, err
		}
		claimName = *p.Status.ResourceClaimStatuses[0].ResourceClaimName
		return p.Status.ResourceClaimStatuses[0].Name == "accel", nil
	})
	if !strings.HasPrefix(claimName, "trainer-accel-") || len(claimName) != len("trainer-accel-")+5 {
		t.Errorf("claim name %q, want trainer-accel-<5 random>", claimName)
	}
	claim, err := e.Client.Resource.ResourceClaims("default").Get(e.Ctx, claimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ref := metav1.GetControllerOf(claim)
	if ref == nil || ref.Kind != "Pod" || ref.Name != "trainer" || ref.UID != p.UID || ref.APIVersion != "v1" {
		t.Errorf("owner: %+v", claim.OwnerReferences)
	}
	if claim.Annotations[resourcev1.PodResourceClaimAnnotation] != "accel" || claim.Annotations["note"] != "kept" || claim.Labels["from"] != "template" {
		t.Errorf("metadata: %v %v", claim.Annotations, claim.Labels)
	}
	if claim.Spec.Devices.Requests[0].Exactly.DeviceClassName != "gpu.example.com" {
		t.Errorf("spec: %+v", claim.Spec)
	}

	// Deleted under the live pod: made again, under a new name.
	if err := e.Client.Resource.ResourceClaims("default").Delete(e.Ctx, claimName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a new claim recorded", func() (bool, error) {
		p, err = e.Client.Core.Pods("default").Get(e.Ctx, "trainer", metav1.GetOptions{})
		if err != nil || len(p.Status.ResourceClaimStatuses) != 1 {
			return false, err
		}
		n := *p.Status.ResourceClaimStatuses[0].ResourceClaimName
		if n == claimName {
			return false, nil
		}
		claimName = n
		return true, nil
	})
	claim, err = e.Client.Resource.ResourceClaims("default").Get(e.Ctx, claimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	allocate(t, e, claim, p)

	p.Status.Phase = corev1.PodFailed
	if _, err := e.Client.Core.Pods("default").UpdateStatus(e.Ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the failed pod's generated claim deleted", func() (bool, error) {
		_, err := e.Client.Resource.ResourceClaims("default").Get(e.Ctx, claimName, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
}

// A claim the user made and several pods share: a deleted pod's
// reservation goes and the claim stays allocated for the other; when
// the last goes it is deallocated and unprotected, and kept.
func TestReservationsAndDeallocation(t *testing.T) {
	e := start(t)
	cl := e.Client.Resource.ResourceClaims("default")
	claim, err := cl.Create(e.Ctx, &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "shared"}, Spec: resourcev1.ResourceClaimSpec{
		Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.example.com"}}}}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var pods []*corev1.Pod
	for i := range 2 {
		p, err := e.Client.Core.Pods("default").Create(e.Ctx, pod(fmt.Sprintf("user-%d", i), "",
			corev1.PodResourceClaim{Name: "accel", ResourceClaimName: ptr.To("shared")}), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, p)
	}
	claim = allocate(t, e, claim, pods[0])
	claim.Status.ReservedFor = append(claim.Status.ReservedFor, resourcev1.ResourceClaimConsumerReference{Resource: "pods", Name: pods[1].Name, UID: pods[1].UID},
		// A pod that never existed (a stale reservation) goes too.
		resourcev1.ResourceClaimConsumerReference{Resource: "pods", Name: "ghost", UID: "ghost-uid"})
	if _, err := cl.UpdateStatus(e.Ctx, claim, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.Client.Core.Pods("default").Delete(e.Ctx, "user-0", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "only user-1's reservation left", func() (bool, error) {
		c, err := cl.Get(e.Ctx, "shared", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return len(c.Status.ReservedFor) == 1 && c.Status.ReservedFor[0].UID == pods[1].UID && c.Status.Allocation != nil, nil
	})
	if err := e.Client.Core.Pods("default").Delete(e.Ctx, "user-1", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the claim deallocated and unprotected", func() (bool, error) {
		c, err := cl.Get(e.Ctx, "shared", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return len(c.Status.ReservedFor) == 0 && c.Status.Allocation == nil && len(c.Finalizers) == 0, nil
	})
	// A claim the user made stays: it was for no pod in particular.
	time.Sleep(200 * time.Millisecond)
	if _, err := cl.Get(e.Ctx, "shared", metav1.GetOptions{}); err != nil {
		t.Errorf("user's claim: %v", err)
	}

	// Deleted while allocated and reserved for nobody: deallocated and
	// unprotected, so it goes.
	claim, err = cl.Create(e.Ctx, &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "idle"}, Spec: claim.Spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	allocate(t, e, claim, nil)
	if err := cl.Delete(e.Ctx, "idle", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deleted idle claim gone", func() (bool, error) {
		_, err := cl.Get(e.Ctx, "idle", metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
}

// A pod bound to a node whose allocated claim is not reserved for it
// (bound without the scheduler) gets the reservation.
func TestReservesForBoundPod(t *testing.T) {
	e := start(t)
	cl := e.Client.Resource.ResourceClaims("default")
	claim, err := cl.Create(e.Ctx, &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "pinned"}, Spec: resourcev1.ResourceClaimSpec{
		Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.example.com"}}}}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	allocate(t, e, claim, nil)
	p, err := e.Client.Core.Pods("default").Create(e.Ctx, pod("bound", "node-x", corev1.PodResourceClaim{Name: "accel", ResourceClaimName: ptr.To("pinned")}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the claim reserved for the bound pod", func() (bool, error) {
		c, err := cl.Get(e.Ctx, "pinned", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return len(c.Status.ReservedFor) == 1 && c.Status.ReservedFor[0].UID == p.UID && c.Status.ReservedFor[0].Resource == "pods", nil
	})
}

// Long names are cut in proportion, as upstream cuts them.
func TestGenerateName(t *testing.T) {
	for _, c := range []struct{ pod, claim, want string }{
		{"web", "gpu", "web-gpu-"},
		{strings.Repeat("p", 60), strings.Repeat("c", 20), strings.Repeat("p", 41) + "-" + strings.Repeat("c", 13)},
	} {
		if got := resourceclaim.GenerateName(c.pod, c.claim); got != c.want {
			t.Errorf("GenerateName(%d, %d chars) = %q, want %q", len(c.pod), len(c.claim), got, c.want)
		}
	}
}

// The whole loop on a simulated node with the scheduler: a pod's claim
// is made from its template, allocated the node's only device and
// reserved before the pod is bound; a second pod wanting the device
// waits with kube-scheduler's message until the first is deleted, whose
// reservation the controller drops and whose claim it deallocates — then
// the second gets the device.
func TestDevicesFreedForTheNextPod(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{Nodes: 1})
	clustertest.Start(e, func(inf *client.Informers) (*resourceclaim.Controller, error) {
		return resourceclaim.New(resourceclaim.Config{Client: e.Client, Informers: inf, Logger: e.Log})
	})
	rs := e.Client.Resource
	if _, err := rs.DeviceClasses().Create(e.Ctx, &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu.example.com"},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: `device.driver == "gpu.example.com"`}}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.ResourceSlices().Create(e.Ctx, &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "sim-0-gpu"}, Spec: resourcev1.ResourceSliceSpec{
		Driver: "gpu.example.com", NodeName: ptr.To("sim-0"), Pool: resourcev1.ResourcePool{Name: "sim-0", ResourceSliceCount: 1},
		Devices: []resourcev1.Device{{Name: "gpu-0"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	template(e, t, "gpu")
	claimOf := func(name string) *resourcev1.ResourceClaim {
		p, err := e.Client.Core.Pods("default").Get(e.Ctx, name, metav1.GetOptions{})
		if err != nil || len(p.Status.ResourceClaimStatuses) == 0 {
			return nil
		}
		c, err := rs.ResourceClaims("default").Get(e.Ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			return nil
		}
		return c
	}
	running := func(name string) func() (bool, error) {
		return func() (bool, error) {
			p, err := e.Client.Core.Pods("default").Get(e.Ctx, name, metav1.GetOptions{})
			return err == nil && p.Spec.NodeName == "sim-0" && p.Status.Phase == corev1.PodRunning, err
		}
	}
	for _, name := range []string{"first", "second"} {
		if _, err := e.Client.Core.Pods("default").Create(e.Ctx, pod(name, "", corev1.PodResourceClaim{Name: "accel", ResourceClaimTemplateName: ptr.To("gpu")}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if name == "first" {
			waitFor(t, "first running", running("first"))
		}
	}
	first := claimOf("first")
	if first == nil || first.Status.Allocation == nil || first.Status.Allocation.Devices.Results[0].Device != "gpu-0" || len(first.Status.ReservedFor) != 1 {
		t.Fatalf("first's claim: %+v", first)
	}
	const msg = "0/1 nodes are available: 1 cannot allocate all claims."
	waitFor(t, "second unschedulable", func() (bool, error) {
		p, err := e.Client.Core.Pods("default").Get(e.Ctx, "second", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message == msg {
				return p.Spec.NodeName == "", nil
			}
		}
		return false, nil
	})
	if err := e.Client.Core.Pods("default").Delete(e.Ctx, "first", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "second running on the freed device", running("second"))
	second := claimOf("second")
	if second == nil || second.Status.Allocation == nil || second.Status.Allocation.Devices.Results[0].Device != "gpu-0" {
		t.Fatalf("second's claim: %+v", second)
	}
	waitFor(t, "first's claim deallocated", func() (bool, error) {
		c, err := rs.ResourceClaims("default").Get(e.Ctx, first.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil // and gone: nothing holds it
		}
		return err == nil && c.Status.Allocation == nil && len(c.Status.ReservedFor) == 0, err
	})
}

// A pod naming a template that does not exist gets a Warning event, as
// upstream's; the claim is made once the template appears.
func TestMissingTemplate(t *testing.T) {
	e := start(t)
	if _, err := e.Client.Core.Pods("default").Create(e.Ctx, pod("early", "",
		corev1.PodResourceClaim{Name: "accel", ResourceClaimTemplateName: ptr.To("later")}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a FailedResourceClaimCreation event", func() (bool, error) {
		evs, err := e.Client.Core.Events("default").List(e.Ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, ev := range evs.Items {
			if ev.Reason == "FailedResourceClaimCreation" && ev.Type == corev1.EventTypeWarning && ev.InvolvedObject.Name == "early" &&
				strings.HasPrefix(ev.Message, `PodResourceClaim accel: resource claim template "later": `) {
				return true, nil
			}
		}
		return false, nil
	})
	template(e, t, "later")
	waitFor(t, "the claim made from the late template", func() (bool, error) {
		p, err := e.Client.Core.Pods("default").Get(e.Ctx, "early", metav1.GetOptions{})
		return err == nil && len(p.Status.ResourceClaimStatuses) == 1, err
	})
}
