package apiserver

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/kubelet/simulator"
	"bonsai.dev/bonsai/store"
)

func int64p(v int64) *int64 { return &v }

// TestPodStreamValidation: what pods/log, exec, attach and portforward
// answer before any kubelet is asked, with kube-apiserver's codes and
// messages.
func TestPodStreamValidation(t *testing.T) {
	e := newTestEnv(t)
	pods := e.cs.CoreV1().Pods("default")
	mk := func(name, node string, containers ...string) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{NodeName: node}}
		for _, c := range containers {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c, Image: "busybox"})
		}
		if _, err := pods.Create(e.ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mk("two", "", "a", "b")
	mk("one", "", "c")
	mk("lost", "no-such-node", "c")
	init := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "init"}, Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "setup", Image: "busybox"}},
		Containers:     []corev1.Container{{Name: "x", Image: "busybox"}, {Name: "y", Image: "busybox"}},
	}}
	if _, err := pods.Create(e.ctx, init, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		pod  string
		opts corev1.PodLogOptions
		code int32
		msg  string
	}{
		{name: "no container named among several", pod: "two", code: 400, msg: "a container name must be specified for pod two, choose one of: [a b]"},
		{name: "init containers are listed first", pod: "init", code: 400, msg: "a container name must be specified for pod init, choose one of: [setup x y]"},
		{name: "unknown container", pod: "two", opts: corev1.PodLogOptions{Container: "z"}, code: 400, msg: "container z is not valid for pod two"},
		{name: "negative tail", pod: "one", opts: corev1.PodLogOptions{TailLines: int64p(-1)}, code: 422, msg: "tailLines: Invalid value: -1: must be greater than or equal to 0"},
		{name: "zero limitBytes", pod: "one", opts: corev1.PodLogOptions{LimitBytes: int64p(0)}, code: 422, msg: "limitBytes: Invalid value: 0: must be greater than 0"},
		{name: "since twice", pod: "one", opts: corev1.PodLogOptions{SinceSeconds: int64p(5), SinceTime: &metav1.Time{Time: metav1.Now().Time}}, code: 422, msg: "at most one of `sinceTime` or `sinceSeconds` may be specified"},
		{name: "no such pod", pod: "nope", code: 404, msg: `pods "nope" not found`},
		{name: "node gone", pod: "lost", code: 404, msg: `nodes "no-such-node" not found`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			// Stream, as kubectl logs reads: it decodes the error Status.
			_, err := pods.GetLogs(tc.pod, &opts).Stream(e.ctx)
			var st apierrors.APIStatus
			if !asStatus(err, &st) || st.Status().Code != tc.code || !strings.Contains(st.Status().Message, tc.msg) {
				t.Fatalf("err = %v, want %d with %q", err, tc.code, tc.msg)
			}
		})
	}

	// A pod not scheduled yet has an empty log, as on Kubernetes.
	body, err := pods.GetLogs("one", &corev1.PodLogOptions{}).DoRaw(e.ctx)
	if err != nil || len(body) != 0 {
		t.Fatalf("log of an unscheduled pod: %q, %v", body, err)
	}

	// exec, attach and portforward of an unscheduled pod: 400.
	for _, sub := range []string{"exec", "attach", "portforward"} {
		req := e.cs.CoreV1().RESTClient().Post().Namespace("default").Resource("pods").Name("one").SubResource(sub).
			Param("container", "c").Param("stdout", "true").Param("command", "true")
		err := req.Do(e.ctx).Error()
		if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "pod one does not have a host assigned") {
			t.Errorf("%s: %v", sub, err)
		}
	}
	err = e.cs.CoreV1().RESTClient().Post().Namespace("default").Resource("pods").Name("two").SubResource("exec").
		Param("container", "q").Param("command", "true").Do(e.ctx).Error()
	if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "container q is not valid for pod two") {
		t.Errorf("exec into an unknown container: %v", err)
	}
	err = e.cs.CoreV1().RESTClient().Put().Namespace("default").Resource("pods").Name("one").SubResource("exec").Do(e.ctx).Error()
	if !apierrors.IsMethodNotSupported(err) {
		t.Errorf("PUT pods/exec: %v", err)
	}

	// Discovery lists the subresources as kube-apiserver does.
	rl, err := e.cs.Discovery().ServerResourcesForGroupVersion("v1")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"pods/log": "Pod get", "pods/exec": "PodExecOptions create,get", "pods/attach": "PodAttachOptions create,get", "pods/portforward": "PodPortForwardOptions create,get"}
	for _, r := range rl.APIResources {
		if w, ok := want[r.Name]; ok {
			if got := r.Kind + " " + strings.Join(r.Verbs, ","); got != w {
				t.Errorf("%s: %s, want %s", r.Name, got, w)
			}
			delete(want, r.Name)
		}
	}
	if len(want) > 0 {
		t.Errorf("discovery lacks %v", want)
	}
}

func asStatus(err error, st *apierrors.APIStatus) bool {
	s, ok := err.(apierrors.APIStatus)
	if ok {
		*st = s
	}
	return ok && s.Status().Code != http.StatusOK
}

// TestPodStreamsOfSimulatedNodes: a simulated node that reports no
// kubelet endpoint has no kubelet API and made-up addresses, so nothing
// is dialled for its pods: their log is empty and exec, attach and
// port-forward are refused with a clear message. A node that is not
// simulated, at the same address, is dialled (the listener sees it).
func TestPodStreamsOfSimulatedNodes(t *testing.T) {
	if simulatedAnnotation != simulator.AnnotationSimulated {
		t.Fatalf("the API server reads simulated nodes by %q, the simulator marks them %q", simulatedAnnotation, simulator.AnnotationSimulated)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var dials atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dials.Add(1)
			c.Close()
		}
	}()
	st, err := store.OpenBadger(store.BadgerOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	_, cs := newServerOn(t, st, Config{KubeletPort: ln.Addr().(*net.TCPAddr).Port})
	ctx := context.Background()
	for name, annotations := range map[string]map[string]string{"sim": {simulatedAnnotation: "true"}, "real": nil} {
		n, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
		if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "on-" + name}, Spec: corev1.PodSpec{NodeName: name, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pods := cs.CoreV1().Pods("default")
	body, err := pods.GetLogs("on-sim", &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil || len(body) != 0 {
		t.Errorf("log of a pod on a simulated node: %q, %v", body, err)
	}
	for _, sub := range []string{"exec", "attach", "portforward"} {
		err := cs.CoreV1().RESTClient().Post().Namespace("default").Resource("pods").Name("on-sim").SubResource(sub).
			Param("container", "c").Param("stdout", "true").Param("command", "true").Param("ports", "80").Do(ctx).Error()
		if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "pod on-sim runs on simulated node sim, which has no containers: "+sub+" is not possible") {
			t.Errorf("%s on a simulated node: %v", sub, err)
		}
	}
	if n := dials.Load(); n != 0 {
		t.Fatalf("%d connections for a simulated node's pod", n)
	}
	if _, err := pods.GetLogs("on-real", &corev1.PodLogOptions{}).DoRaw(ctx); err == nil || dials.Load() == 0 {
		t.Errorf("log of a pod on a node that is not simulated: %v after %d connections, want a failed dial of the listener", err, dials.Load())
	}
}
