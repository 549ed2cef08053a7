package endpointslice

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"bonsai.dev/bonsai/testsupport/clustertest"
)

func TestServiceLifecycle(t *testing.T) {
	e := newEnv(t, 2, nil)
	svc := e.service("web", func(s *corev1.Service) { s.Labels = map[string]string{"team": "blue"} })
	pods := map[string]*corev1.Pod{}
	for _, n := range names("web", 3) {
		pods[n] = e.pod(n, "web", nil)
	}
	ss := e.waitReadyPods("web", names("web", 3)...)

	if len(ss) != 1 {
		t.Fatalf("slices %s, want one", sliceSummary(ss))
	}
	s := ss[0]
	if s.GenerateName != "web-" || !strings.HasPrefix(s.Name, "web-") {
		t.Errorf("name %q generateName %q, want web-<random>", s.Name, s.GenerateName)
	}
	wantLabels := map[string]string{"team": "blue", discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: ControllerName}
	if diff := cmp.Diff(wantLabels, s.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	wantOwner := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "web", UID: svc.UID, Controller: ptr(true), BlockOwnerDeletion: ptr(true)}}
	if diff := cmp.Diff(wantOwner, s.OwnerReferences); diff != "" {
		t.Errorf("ownerReferences (-want +got):\n%s", diff)
	}
	if s.AddressType != discoveryv1.AddressTypeIPv4 {
		t.Errorf("addressType %s", s.AddressType)
	}
	wantPorts := []discoveryv1.EndpointPort{{Name: ptr("http"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr(int32(8080))}}
	if diff := cmp.Diff(wantPorts, s.Ports); diff != "" {
		t.Errorf("ports (-want +got):\n%s", diff)
	}
	for _, ep := range s.Endpoints {
		p, err := e.Client.Core.Pods("default").Get(e.Ctx, ep.TargetRef.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !cmp.Equal(ep.Addresses, []string{p.Status.PodIP}) || ep.NodeName == nil || *ep.NodeName != p.Spec.NodeName ||
			ep.TargetRef.UID != p.UID || ep.TargetRef.Kind != "Pod" || ep.TargetRef.Namespace != "default" {
			t.Errorf("endpoint %+v does not match pod %s (ip %s, node %s, uid %s)", ep, p.Name, p.Status.PodIP, p.Spec.NodeName, p.UID)
		}
	}

	// Scale up, then down.
	for _, n := range []string{"web-003", "web-004"} {
		e.pod(n, "web", nil)
	}
	e.waitReadyPods("web", names("web", 5)...)
	if err := e.Client.Core.Pods("default").Delete(e.Ctx, "web-000", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitReadyPods("web", names("web", 5)[1:]...)

	// A pod whose labels stop matching leaves.
	clustertest.Eventually(t, waitFor, func() error {
		p, err := e.Client.Core.Pods("default").Get(e.Ctx, "web-001", metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Labels["app"] = "other"
		_, err = e.Client.Core.Pods("default").Update(e.Ctx, p, metav1.UpdateOptions{})
		return err
	})
	e.waitReadyPods("web", names("web", 5)[2:]...)

	// The Service's labels follow onto its slices.
	clustertest.Eventually(t, waitFor, func() error {
		s, err := e.Client.Core.Services("default").Get(e.Ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Labels["team"] = "red"
		_, err = e.Client.Core.Services("default").Update(e.Ctx, s, metav1.UpdateOptions{})
		return err
	})
	e.waitSlices("web", func(ss []discoveryv1.EndpointSlice) error {
		for _, s := range ss {
			if s.Labels["team"] != "red" {
				return fmt.Errorf("slice %s labels %v", s.Name, s.Labels)
			}
		}
		return nil
	})

	// The Service goes: so do its slices.
	if err := e.Client.Core.Services("default").Delete(e.Ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitSlices("web", func(ss []discoveryv1.EndpointSlice) error {
		if len(ss) > 0 {
			return fmt.Errorf("slices %s left after the Service was deleted", sliceSummary(ss))
		}
		return nil
	})
}

// TestEndpointConditions writes the pods' status as their kubelet on a
// node of its own, for exact states.
func TestEndpointConditions(t *testing.T) {
	e := newEnv(t, 0, nil)
	e.plainNode("plain", "zone-a")
	e.service("st", nil)
	e.service("pub", func(s *corev1.Service) {
		s.Spec.Selector = map[string]string{"app": "st"}
		s.Spec.PublishNotReadyAddresses = true
	})
	onPlain := func(p *corev1.Pod) { p.Spec.NodeName = "plain" }
	for i, n := range []string{"ready", "notready", "leaving", "finished", "pending"} {
		e.pod(n, "st", func(p *corev1.Pod) {
			onPlain(p)
			if n == "ready" {
				p.Spec.Hostname, p.Spec.Subdomain = "ready", "st"
			}
		})
		if n != "pending" {
			e.setStatus(n, fmt.Sprintf("10.9.0.%d", i+1), n != "notready")
		}
	}
	clustertest.Eventually(t, waitFor, func() error {
		p, err := e.Client.Core.Pods("default").Get(e.Ctx, "finished", metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Status.Phase = corev1.PodSucceeded
		_, err = e.Client.Core.Pods("default").UpdateStatus(e.Ctx, p, metav1.UpdateOptions{})
		return err
	})
	wait := func(svc string, want []endpointState) []discoveryv1.EndpointSlice {
		t.Helper()
		return e.waitSlices(svc, func(ss []discoveryv1.EndpointSlice) error {
			if got := endpoints(ss); !cmp.Equal(want, got) {
				return fmt.Errorf("endpoints %+v, want %+v", got, want)
			}
			return nil
		})
	}
	wait("st", []endpointState{
		{Pod: "leaving", Ready: true, Serving: true},
		{Pod: "notready"},
		{Pod: "ready", Ready: true, Serving: true},
	})
	// Terminating: the pod has a deletion timestamp and, with no kubelet
	// to finish it, keeps it.
	if err := e.Client.Core.Pods("default").Delete(e.Ctx, "leaving", metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(3600))}); err != nil {
		t.Fatal(err)
	}

	ss := wait("st", []endpointState{
		{Pod: "leaving", Serving: true, Terminating: true},
		{Pod: "notready"},
		{Pod: "ready", Ready: true, Serving: true},
	})
	for _, s := range ss {
		for _, ep := range s.Endpoints {
			if ep.Zone == nil || *ep.Zone != "zone-a" || ep.NodeName == nil || *ep.NodeName != "plain" {
				t.Errorf("endpoint %s: zone %v node %v, want zone-a on plain", ep.TargetRef.Name, ep.Zone, ep.NodeName)
			}
			wantHost := ep.TargetRef.Name == "ready"
			if (ep.Hostname != nil) != wantHost || (wantHost && *ep.Hostname != "ready") {
				t.Errorf("endpoint %s: hostname %v", ep.TargetRef.Name, ep.Hostname)
			}
		}
	}
	ss = wait("pub", []endpointState{
		{Pod: "leaving", Ready: true, Serving: true, Terminating: true},
		{Pod: "notready", Ready: true},
		{Pod: "ready", Ready: true, Serving: true},
	})
	for _, s := range ss {
		for _, ep := range s.Endpoints {
			if ep.Hostname != nil {
				t.Errorf("endpoint %s of pub: hostname %q, but the pod's subdomain is st", ep.TargetRef.Name, *ep.Hostname)
			}
		}
	}

	// Readiness changes both ways. The slices written for them carry the
	// time of the change: the Ready transitions, later (to the second,
	// the API's precision) than any before.
	flipped := time.Now().Add(time.Hour).Truncate(time.Second)
	e.setStatusAt("notready", "10.9.0.2", true, flipped)
	e.setStatusAt("ready", "10.9.0.1", false, flipped)
	ss = wait("st", []endpointState{
		{Pod: "leaving", Serving: true, Terminating: true},
		{Pod: "notready", Ready: true, Serving: true},
		{Pod: "ready"},
	})
	for _, s := range ss {
		at, err := time.Parse(time.RFC3339Nano, s.Annotations[corev1.EndpointsLastChangeTriggerTime])
		if err != nil || !at.Equal(flipped) {
			t.Errorf("slice %s: %s %q (%v), want the time of the readiness changes, from %s", s.Name,
				corev1.EndpointsLastChangeTriggerTime, s.Annotations[corev1.EndpointsLastChangeTriggerTime], err, flipped)
		}
	}
}

func TestNamedPortResolvedPerPod(t *testing.T) {
	e := newEnv(t, 1, nil)
	e.service("np", nil)
	e.pod("np-a", "np", nil)
	e.pod("np-b", "np", func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].ContainerPort = 9090 })
	ss := e.waitReadyPods("np", "np-a", "np-b")
	got := map[string]int32{}
	for _, s := range ss {
		if len(s.Ports) != 1 || len(s.Endpoints) != 1 {
			t.Fatalf("slices %s: want two of one port and one endpoint", sliceSummary(ss))
		}
		got[s.Endpoints[0].TargetRef.Name] = *s.Ports[0].Port
	}
	if diff := cmp.Diff(map[string]int32{"np-a": 8080, "np-b": 9090}, got); diff != "" {
		t.Errorf("port by pod (-want +got):\n%s", diff)
	}
}

func TestMoreThanMaxEndpoints(t *testing.T) {
	for _, tc := range []struct {
		name      string
		max, pods int
		nodes     int
	}{
		{name: "default 100", pods: 150, nodes: 2},
		{name: "configured 20", max: 20, pods: 50, nodes: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.nodes, func(c *Config) { c.MaxEndpointsPerSlice = tc.max })
			e.service("big", nil)
			for _, n := range names("big", tc.pods) {
				e.pod(n, "big", nil)
			}
			ss := e.waitReadyPods("big", names("big", tc.pods)...)
			max := tc.max
			if max == 0 {
				max = DefaultMaxEndpointsPerSlice
			}
			min := (tc.pods + max - 1) / max
			if len(ss) < min {
				t.Errorf("slices %s, want at least %d", sliceSummary(ss), min)
			}
			for _, s := range ss {
				if len(s.Endpoints) > max {
					t.Errorf("slice %s has %d endpoints, more than %d", s.Name, len(s.Endpoints), max)
				}
			}
		})
	}
}

func TestMaxEndpointsPerSliceBounds(t *testing.T) {
	for _, n := range []int{-1, 1001} {
		if _, err := New(Config{MaxEndpointsPerSlice: n}); err == nil || !strings.Contains(err.Error(), "MaxEndpointsPerSlice") {
			t.Errorf("MaxEndpointsPerSlice %d: error %v, want it refused", n, err)
		}
	}
}

// TestOthersSlicesUntouched: Services without a selector are left to
// their users, ExternalName Services get no slices, and slices another
// manager owns are never changed.
func TestOthersSlicesUntouched(t *testing.T) {
	e := newEnv(t, 1, nil)
	e.service("manual", func(s *corev1.Service) { s.Spec.Selector = nil })
	e.service("extname", func(s *corev1.Service) {
		s.Spec.Type, s.Spec.ExternalName, s.Spec.Ports = corev1.ServiceTypeExternalName, "db.example.com", nil
		s.Spec.Selector = map[string]string{"app": "auto"}
	})
	e.service("auto", nil)
	foreign := func(svc string) *discoveryv1.EndpointSlice {
		s, err := e.Client.Discovery.EndpointSlices("default").Create(e.Ctx, &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: svc + "-mesh", Labels: map[string]string{
				discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "mesh.example.com"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.1"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	mine := []*discoveryv1.EndpointSlice{foreign("manual"), foreign("auto")}
	e.pod("auto-0", "auto", nil)
	e.pod("manual-0", "manual", nil)
	e.waitReadyPods("auto", "auto-0")
	for _, svc := range []string{"manual", "extname"} {
		if ss := e.slices(svc); len(ss) != 0 {
			t.Errorf("Service %s got slices %s", svc, sliceSummary(ss))
		}
	}
	for _, s := range mine {
		got, err := e.Client.Discovery.EndpointSlices("default").Get(e.Ctx, s.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("slice %s of another manager: %v", s.Name, err)
		}
		if got.ResourceVersion != s.ResourceVersion {
			t.Errorf("slice %s of another manager was changed", s.Name)
		}
	}
}

// TestRepairsEditedSlices: a managed slice changed or deleted by someone
// else is put back.
func TestRepairsEditedSlices(t *testing.T) {
	e := newEnv(t, 1, nil)
	e.service("fix", nil)
	e.pod("fix-0", "fix", nil)
	ss := e.waitReadyPods("fix", "fix-0")
	s := ss[0].DeepCopy()
	s.Endpoints = nil
	if _, err := e.Client.Discovery.EndpointSlices("default").Update(e.Ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitReadyPods("fix", "fix-0")
	ss = e.slices("fix")
	if err := e.Client.Discovery.EndpointSlices("default").Delete(e.Ctx, ss[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitSlices("fix", func(got []discoveryv1.EndpointSlice) error {
		if len(got) != 1 || got[0].Name == ss[0].Name || len(got[0].Endpoints) != 1 {
			return fmt.Errorf("slices %s, want one new slice with the pod", sliceSummary(got))
		}
		return nil
	})
}

// TestScaleUpWrites counts the slice writes of a scale-up from 0 to 1,000
// pods, the cost every watcher of slices (each node's proxy) pays.
func TestScaleUpWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 pods")
	}
	const n = 1000
	e := newEnv(t, 10, nil)
	w, err := e.Client.Discovery.EndpointSlices("default").Watch(e.Ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var writes atomic.Int64
	var lastRV atomic.Uint64 // of the last event the watch delivered
	go func() {
		for ev := range w.ResultChan() {
			if s, ok := ev.Object.(*discoveryv1.EndpointSlice); ok && ev.Type != watch.Bookmark && ev.Type != watch.Error {
				writes.Add(1)
				lastRV.Store(rvOf(s))
			}
		}
	}()
	e.service("scale", nil)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 4 {
				p := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("scale-%04d", i), Namespace: "default", Labels: map[string]string{"app": "scale"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox",
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}}}},
				}
				if _, err := e.Client.Core.Pods("default").Create(e.Ctx, p, metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := errors.Join(collect(errs)...); err != nil {
		t.Fatal(err)
	}
	var ss []discoveryv1.EndpointSlice
	clustertest.Eventually(t, 3*time.Minute, func() error {
		ss = e.slices("scale")
		ready := 0
		for _, s := range ss {
			for _, ep := range s.Endpoints {
				if *ep.Conditions.Ready {
					ready++
				}
			}
		}
		if ready != n {
			return fmt.Errorf("%d of %d endpoints ready", ready, n)
		}
		return nil
	})
	// Count every write up to the state listed.
	var listedRV uint64
	for i := range ss {
		listedRV = max(listedRV, rvOf(&ss[i]))
	}
	clustertest.Eventually(t, waitFor, func() error {
		if lastRV.Load() < listedRV {
			return fmt.Errorf("watch at revision %d, slices at %d", lastRV.Load(), listedRV)
		}
		return nil
	})
	for _, s := range ss {
		if len(s.Endpoints) > DefaultMaxEndpointsPerSlice {
			t.Errorf("slice %s has %d endpoints", s.Name, len(s.Endpoints))
		}
	}
	t.Logf("scale-up 0→%d pods: %d EndpointSlice writes, %d slices, %s", n, writes.Load(), len(ss), time.Since(start).Round(time.Millisecond))
}

func collect(ch <-chan error) []error {
	var out []error
	for err := range ch {
		if !apierrors.IsAlreadyExists(err) {
			out = append(out, err)
		}
	}
	return out
}
