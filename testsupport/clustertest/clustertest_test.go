package clustertest

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/client"
)

// A pod created in the environment is scheduled to a simulated node and
// goes Running and Ready; shared informers see it and kinds of other
// groups.
func TestEnvRunsPods(t *testing.T) {
	e := New(t, Options{Nodes: 2})
	inf := client.NewInformers(e.Config)
	pods := inf.For(&corev1.Pod{})
	if inf.For(&corev1.Pod{}) != pods {
		t.Fatal("two pod informers")
	}
	inf.For(&appsv1.ReplicaSet{})
	inf.Start(e.Ctx)
	if !inf.WaitForCacheSync(e.Ctx) {
		t.Fatal("informers did not sync")
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	if _, err := e.Client.Core.Pods("default").Create(e.Ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 10*time.Second, func() error {
		obj, ok, err := pods.GetIndexer().GetByKey("default/p")
		if err != nil || !ok {
			return fmt.Errorf("pod not in the informer: %v", err)
		}
		p := obj.(*corev1.Pod)
		if p.Spec.NodeName == "" || p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			return fmt.Errorf("pod on %q, %s, IP %q", p.Spec.NodeName, p.Status.Phase, p.Status.PodIP)
		}
		return nil
	})
	// An informer asked for after Start starts by itself.
	late := inf.For(&corev1.Node{})
	Eventually(t, 5*time.Second, func() error {
		if n := len(late.GetStore().List()); n != 2 {
			return fmt.Errorf("%d nodes in the late informer", n)
		}
		return nil
	})
}

// Pods can be created in a namespace the test makes: the environment's
// serviceaccount controller gives it the default account admission wants.
func TestEnvNamespacesTakePods(t *testing.T) {
	e := New(t, Options{})
	if _, err := e.Client.Core.Namespaces().Create(e.Ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fresh"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	p, err := e.Client.Core.Pods("fresh").Create(e.Ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.ServiceAccountName != "default" {
		t.Errorf("serviceAccountName %q", p.Spec.ServiceAccountName)
	}
}
