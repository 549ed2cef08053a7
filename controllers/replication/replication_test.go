package replication

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/garbagecollector"
	"bonsai.dev/bonsai/controllers/replicaset"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

const ns = "default"

func start(t *testing.T) *clustertest.Env {
	t.Helper()
	e := clustertest.New(t, clustertest.Options{Nodes: 1})
	clustertest.Start(e, func(inf *client.Informers) (*replicaset.Controller, error) {
		return New(Config{Client: e.Client, Informers: inf, Logger: e.Log})
	})
	return e
}

func newRC(name string, replicas int32, lbls map[string]string) *corev1.ReplicationController {
	return &corev1.ReplicationController{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ReplicationControllerSpec{
			Replicas: &replicas,
			Template: &corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: lbls},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
			},
		},
	}
}

// waitStatus waits until name's status, its generation observed, is want.
func waitStatus(e *clustertest.Env, name string, want corev1.ReplicationControllerStatus) {
	e.T.Helper()
	clustertest.Eventually(e.T, 30*time.Second, func() error {
		rc, err := e.Client.Core.ReplicationControllers(ns).Get(e.Ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		want.ObservedGeneration = rc.Generation
		if d := cmp.Diff(want, rc.Status); d != "" {
			return fmt.Errorf("status (-want +got):\n%s", d)
		}
		return nil
	})
}

func settled(n int32) corev1.ReplicationControllerStatus {
	return corev1.ReplicationControllerStatus{Replicas: n, FullyLabeledReplicas: n, ReadyReplicas: n, AvailableReplicas: n}
}

// ownedBy are the names of the live pods whose controller has uid.
func ownedBy(e *clustertest.Env, uid types.UID) ([]string, error) {
	list, err := e.Client.Core.Pods(ns).List(e.Ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range list.Items {
		if ref := metav1.GetControllerOf(&p); ref != nil && ref.UID == uid && p.DeletionTimestamp == nil {
			out = append(out, p.Name)
		}
	}
	return out, nil
}

func scale(e *clustertest.Env, name string, n int32) {
	e.T.Helper()
	// As kubectl scale rc: through the scale subresource.
	clustertest.Eventually(e.T, 10*time.Second, func() error {
		sc, err := e.Client.Core.ReplicationControllers(ns).GetScale(e.Ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		sc.Spec.Replicas = n
		_, err = e.Client.Core.ReplicationControllers(ns).UpdateScale(e.Ctx, name, sc, metav1.UpdateOptions{})
		return err
	})
}

// An RC of 3 replicas gets pods it controls as a v1
// ReplicationController, reports their status, and is scaled through its
// scale subresource; its events come from the replication-controller.
func TestCreateAndScale(t *testing.T) {
	e := start(t)
	rc, err := e.Client.Core.ReplicationControllers(ns).Create(e.Ctx, newRC("web", 3, map[string]string{"app": "web"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(e, "web", settled(3))
	pods, err := e.Client.Core.Pods(ns).List(e.Ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 3 {
		t.Fatalf("%d pods, want 3", len(pods.Items))
	}
	for _, p := range pods.Items {
		want := []metav1.OwnerReference{{APIVersion: "v1", Kind: "ReplicationController", Name: "web", UID: rc.UID, Controller: ptr(true), BlockOwnerDeletion: ptr(true)}}
		if d := cmp.Diff(want, p.OwnerReferences); d != "" {
			t.Errorf("pod %s ownerReferences (-want +got):\n%s", p.Name, d)
		}
	}
	scale(e, "web", 5)
	waitStatus(e, "web", settled(5))
	scale(e, "web", 1)
	waitStatus(e, "web", settled(1))
	clustertest.Eventually(t, 10*time.Second, func() error {
		names, err := ownedBy(e, rc.UID)
		if err == nil && len(names) != 1 {
			err = fmt.Errorf("pods %v, want 1", names)
		}
		return err
	})
	clustertest.Eventually(t, 10*time.Second, func() error {
		evs, err := e.Client.Core.Events(ns).List(e.Ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", "web").String()})
		if err != nil {
			return err
		}
		for _, ev := range evs.Items {
			if ev.InvolvedObject.Kind == "ReplicationController" && ev.Source.Component == "replication-controller" && ev.Reason == "SuccessfulDelete" {
				return nil
			}
		}
		return fmt.Errorf("no SuccessfulDelete event from replication-controller on the RC in %d events", len(evs.Items))
	})
}

// An RC adopts a matching orphan (and creates one pod fewer), releases a
// pod whose labels stop matching and replaces it; its selector is an
// equality selector, so a pod carrying more labels still matches, and
// fullyLabeledReplicas counts only the pods with every template label.
func TestAdoptAndRelease(t *testing.T) {
	e := start(t)
	orphan := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "stray", Labels: map[string]string{"app": "web", "extra": "x"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	if _, err := e.Client.Core.Pods(ns).Create(e.Ctx, orphan, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	in := newRC("web", 2, map[string]string{"app": "web", "tier": "front"})
	in.Spec.Selector = map[string]string{"app": "web"}
	rc, err := e.Client.Core.ReplicationControllers(ns).Create(e.Ctx, in, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(e, "web", corev1.ReplicationControllerStatus{Replicas: 2, FullyLabeledReplicas: 1, ReadyReplicas: 2, AvailableReplicas: 2})
	names, err := ownedBy(e, rc.UID)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 2 || (names[0] != "stray" && names[1] != "stray") {
		t.Fatalf("owned pods %v, want stray and one created", names)
	}

	p, err := e.Client.Core.Pods(ns).Get(e.Ctx, "stray", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Labels = map[string]string{"app": "elsewhere"}
	if _, err := e.Client.Core.Pods(ns).Update(e.Ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 20*time.Second, func() error {
		p, err := e.Client.Core.Pods(ns).Get(e.Ctx, "stray", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(p.OwnerReferences) != 0 {
			return fmt.Errorf("stray still has ownerReferences %v", p.OwnerReferences)
		}
		return nil
	})
	waitStatus(e, "web", settled(2))
}

// Deleting an RC takes its pods with it through the garbage collector,
// and orphaning leaves them, released, as upstream.
func TestDeletion(t *testing.T) {
	e := start(t)
	gc, err := garbagecollector.New(garbagecollector.Config{RESTConfig: e.Config, Client: e.Client, Logger: e.Log})
	if err != nil {
		t.Fatal(err)
	}
	go gc.Run(e.Ctx)
	rcs := e.Client.Core.ReplicationControllers(ns)
	for _, tc := range []struct {
		name   string
		policy metav1.DeletionPropagation
		left   int
	}{
		{"cascade", metav1.DeletePropagationBackground, 0},
		{"orphan", metav1.DeletePropagationOrphan, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := rcs.Create(e.Ctx, newRC(tc.name, 2, map[string]string{"app": tc.name}), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			waitStatus(e, tc.name, settled(2))
			if err := rcs.Delete(e.Ctx, tc.name, metav1.DeleteOptions{PropagationPolicy: &tc.policy}); err != nil {
				t.Fatal(err)
			}
			clustertest.Eventually(t, 30*time.Second, func() error {
				pods, err := e.Client.Core.Pods(ns).List(e.Ctx, metav1.ListOptions{LabelSelector: "app=" + tc.name})
				if err != nil {
					return err
				}
				live := 0
				for _, p := range pods.Items {
					if p.DeletionTimestamp != nil {
						continue
					}
					if len(p.OwnerReferences) != 0 {
						return fmt.Errorf("pod %s still owned: %v", p.Name, p.OwnerReferences)
					}
					live++
				}
				if live != tc.left {
					return fmt.Errorf("%d pods left, want %d", live, tc.left)
				}
				return nil
			})
		})
	}
}

func ptr[T any](v T) *T { return &v }
