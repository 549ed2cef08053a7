package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"bonsai.dev/bonsai/testsupport/testenv"
)

const podImage = "bonsai.test/busybox:1"

// podEnv is a bonsai with a real node: its own containerd (started by
// bonsai under the data dir), its own bridge and nftables table, and the
// busybox test image imported from <data-dir>/images at start.
type podEnv struct {
	t        *testing.T // the test the server belongs to, not a subtest
	registry *testenv.Registry
	s        *server
	cs       kubernetes.Interface
	node     string
	bridge   string
	args     []string
}

// startPodEnv starts bonsai with a kubelet on a containerd the test owns;
// extra flags go after the test's own, so they win.
func startPodEnv(t *testing.T, extra ...string) *podEnv {
	t.Helper()
	requireBinary(t)
	testenv.Require(t, os.Geteuid() == 0, "pod tests need root (network namespaces, containerd)")
	for _, bin := range []string{"containerd", "runc"} {
		_, err := testenv.LookPath(bin)
		testenv.Require(t, err == nil, "%s (Debian package %s): %v", bin, bin, err)
	}
	dir := t.TempDir()
	img := testenv.BusyboxImage(t, podImage)
	if err := os.MkdirAll(filepath.Join(dir, "images"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "images", "busybox.tar"), img, 0o644); err != nil {
		t.Fatal(err)
	}
	// A local registry that registries.yaml mirrors registry.bonsai.test,
	// and every other registry, to; with
	// --disable-default-registry-endpoint no pull leaves the machine.
	reg := testenv.StartRegistry(t)
	regYAML := fmt.Sprintf("mirrors:\n  registry.bonsai.test:\n    endpoint:\n      - http://%s\n  \"*\":\n    endpoint:\n      - http://%s\n", reg.Addr, reg.Addr)
	if err := os.WriteFile(filepath.Join(dir, "registries.yaml"), []byte(regYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 3)
	rand.Read(b)
	bridge := "bz" + hex.EncodeToString(b)
	env := &podEnv{t: t, registry: reg, node: "e2e-" + hex.EncodeToString(b), bridge: bridge}
	// The built-in network unless a test asks otherwise, whatever the
	// host's /etc/cni/net.d holds.
	env.args = []string{"--runtime=containerd", "--disable-default-registry-endpoint", "--node-name=" + env.node, "--pod-bridge=" + bridge, "--pod-network=builtin",
		fmt.Sprintf("--cluster-cidr=10.%d.0.0/16", 100+int(b[0])%100),
		"--container-runtime-endpoint=" + filepath.Join(dir, "no-containerd.sock")}
	env.args = append(env.args, extra...)
	t.Cleanup(func() { env.cleanup(t, dir) })
	env.s = startServer(t, dir, env.args...)
	cfg, err := clientcmd.RESTConfigFromKubeConfig(env.s.kubeconfig(t).raw)
	if err != nil {
		t.Fatal(err)
	}
	env.cs = kubernetes.NewForConfigOrDie(cfg)
	env.waitNodeReady(t)
	return env
}

// restart stops bonsai with SIGTERM and starts it again on the same data
// dir; containers keep running meanwhile.
func (e *podEnv) restart(t *testing.T) {
	t.Helper()
	if code, _ := e.s.sigterm(t); code != 0 {
		t.Fatalf("bonsai exited %d on SIGTERM:\n%s", code, e.s.stderrText())
	}
	e.s = startServer(e.t, e.s.dataDir, e.args...)
	cfg, err := clientcmd.RESTConfigFromKubeConfig(e.s.kubeconfig(t).raw)
	if err != nil {
		t.Fatal(err)
	}
	e.cs = kubernetes.NewForConfigOrDie(cfg)
}

func (e *podEnv) waitNodeReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := e.cs.CoreV1().Nodes().Get(t.Context(), e.node, metav1.GetOptions{})
		if err == nil && n.Spec.PodCIDR != "" {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s not Ready with a pod CIDR: %v %+v\n%s", e.node, err, n, e.s.stderrText())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cleanup deletes every pod through bonsai (so containers stop), stops
// bonsai, then removes what may be left: shims, mounts, the bridge and
// the nftables table.
func (e *podEnv) cleanup(t *testing.T, dir string) {
	if e.s != nil {
		select {
		case <-e.s.done:
		default:
			// A short grace, not 0: a pod then stays in the API until the
			// kubelet has stopped its containers, so waiting for an empty
			// list means the containers are gone.
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			one := int64(1)
			nss, _ := e.cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
			if nss != nil {
				// Workloads first, orphaning their pods, so no controller
				// replaces a pod deleted below.
				orphan := metav1.DeleteOptions{PropagationPolicy: ptr(metav1.DeletePropagationOrphan)}
				for _, ns := range nss.Items {
					apps, batch := e.cs.AppsV1(), e.cs.BatchV1()
					apps.Deployments(ns.Name).DeleteCollection(ctx, orphan, metav1.ListOptions{})
					apps.StatefulSets(ns.Name).DeleteCollection(ctx, orphan, metav1.ListOptions{})
					apps.DaemonSets(ns.Name).DeleteCollection(ctx, orphan, metav1.ListOptions{})
					apps.ReplicaSets(ns.Name).DeleteCollection(ctx, orphan, metav1.ListOptions{})
					batch.CronJobs(ns.Name).DeleteCollection(ctx, orphan, metav1.ListOptions{})
					batch.Jobs(ns.Name).DeleteCollection(ctx, orphan, metav1.ListOptions{})
				}
				for _, ns := range nss.Items {
					e.cs.CoreV1().Pods(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &one}, metav1.ListOptions{})
				}
			}
			for ctx.Err() == nil {
				pods, err := e.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
				if err != nil || len(pods.Items) == 0 {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			cancel()
			e.s.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-e.s.done:
			case <-time.After(20 * time.Second):
				e.s.cmd.Process.Kill()
				<-e.s.done
			}
		}
	}
	// Whatever still runs: containers (a killed shim leaves its
	// container running), then the shims of this test's containerd.
	if n := testenv.KillContainerProcesses(dir); n > 0 {
		t.Logf("killed %d container processes left running", n)
	}
	out, _ := exec.Command("pgrep", "-f", "containerd-shim.*"+dir).Output()
	for _, pid := range strings.Fields(string(out)) {
		exec.Command("kill", "-9", pid).Run()
	}
	mounts, _ := os.ReadFile("/proc/self/mounts")
	lines := strings.Split(string(mounts), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		f := strings.Fields(lines[i])
		if len(f) > 1 && (strings.HasPrefix(f[1], dir) || strings.HasPrefix(f[1], "/run/bonsai/"+e.bridge)) {
			syscall.Unmount(f[1], syscall.MNT_DETACH)
		}
	}
	os.RemoveAll("/run/bonsai/" + e.bridge)
	exec.Command("ip", "link", "del", e.bridge).Run()
	exec.Command("ip", "link", "del", e.bridge+"-dns").Run() // the cluster DNS address's link in CNI mode
	exec.Command("nft", "delete", "table", "ip", e.bridge).Run()
	exec.Command("nft", "delete", "table", "ip6", e.bridge).Run() // a dual-stack network's
	// The service proxy leaves its table behind on purpose, as
	// kube-proxy does, for Services to keep working across a restart.
	exec.Command("nft", "delete", "table", "ip", e.bridge+"-svc").Run()
	// So does the network policy enforcer, for policies to hold.
	exec.Command("nft", "delete", "table", "ip", e.bridge+"-netpol").Run()
	exec.Command("nft", "delete", "table", "bridge", e.bridge+"-netpol").Run()
	out, _ = exec.Command("ip", "-o", "link", "show", "master", e.bridge).Output()
	if len(out) > 0 {
		t.Logf("links left on %s: %s", e.bridge, out)
	}
}

func (e *podEnv) create(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	if pod.Namespace == "" {
		pod.Namespace = "default"
	}
	pod.Spec.NodeName = e.node
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Image == "" {
			pod.Spec.Containers[i].Image = podImage
		}
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Image == "" {
			pod.Spec.InitContainers[i].Image = podImage
		}
	}
	p, err := e.cs.CoreV1().Pods(pod.Namespace).Create(t.Context(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// waitPod polls the pod until cond holds.
func (e *podEnv) waitPod(t *testing.T, name string, timeout time.Duration, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last *corev1.Pod
	for {
		p, err := e.cs.CoreV1().Pods("default").Get(t.Context(), name, metav1.GetOptions{})
		if err == nil {
			last = p
			if cond(p) {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s: not %s within %v; last status: %+v\n%s", name, what, timeout, statusSummary(last), e.s.stderrText())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func statusSummary(p *corev1.Pod) string {
	if p == nil {
		return "<none>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%s reason=%s", p.Status.Phase, p.Status.Reason)
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		fmt.Fprintf(&b, " [%s ready=%v restarts=%d state=%+v last=%+v]", cs.Name, cs.Ready, cs.RestartCount, cs.State, cs.LastTerminationState)
	}
	return b.String()
}

func running(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodRunning && podReady(p)
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func sh(script string) []string { return []string{"sh", "-c", script} }

func (e *podEnv) events(t *testing.T, pod string) []corev1.Event {
	evs, err := e.cs.CoreV1().Events("default").List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
	if err != nil {
		t.Fatal(err)
	}
	return evs.Items
}

func hasEvent(evs []corev1.Event, reason, contains string) bool {
	for _, e := range evs {
		if e.Reason == reason && strings.Contains(e.Message, contains) {
			return true
		}
	}
	return false
}

// logFile reads a container's CRI log file from the data dir.
func (e *podEnv) logText(t *testing.T, p *corev1.Pod, container string, attempt int) string {
	t.Helper()
	path := filepath.Join(e.s.dataDir, "agent", "logs", fmt.Sprintf("%s_%s_%s", p.Namespace, p.Name, p.UID), container, fmt.Sprintf("%d.log", attempt))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		f := strings.SplitN(line, " ", 4)
		if len(f) == 4 {
			out.WriteString(f[3] + "\n")
		}
	}
	return out.String()
}

func TestPods(t *testing.T) {
	e := startPodEnv(t)

	t.Run("run to completion", func(t *testing.T) {
		p := e.create(t, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "printenv"},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{
				Name: "main", Command: sh("echo GREETING=$GREETING; echo POD=$POD_NAME; echo IP=$POD_IP; echo API=$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT"),
				Env: []corev1.EnvVar{{Name: "WHO", Value: "edge"}, {Name: "GREETING", Value: "hello-$(WHO)"},
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}},
			}}},
		})
		p = e.waitPod(t, p.Name, 30*time.Second, "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
		st := p.Status.ContainerStatuses[0]
		if st.State.Terminated == nil || st.State.Terminated.ExitCode != 0 || st.State.Terminated.Reason != "Completed" || !strings.HasPrefix(st.ContainerID, "containerd://") {
			t.Fatalf("status: %s", statusSummary(p))
		}
		got := e.logText(t, p, "main", 0)
		want := fmt.Sprintf("GREETING=hello-edge\nPOD=printenv\nIP=%s\nAPI=10.43.0.1:443\n", p.Status.PodIP)
		if got != want {
			t.Fatalf("log = %q, want %q", got, want)
		}
		evs := e.events(t, p.Name)
		for _, r := range []string{"Pulled", "Created", "Started"} {
			if !hasEvent(evs, r, "") {
				t.Errorf("no %s event: %+v", r, evs)
			}
		}
	})

	t.Run("init containers in order and emptyDir shared", func(t *testing.T) {
		vm := []corev1.VolumeMount{{Name: "shared", MountPath: "/shared"}}
		p := e.create(t, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "ordered"},
			Spec: corev1.PodSpec{
				Volumes: []corev1.Volume{{Name: "shared", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
				InitContainers: []corev1.Container{
					{Name: "first", Command: sh("echo first >> /shared/order"), VolumeMounts: vm},
					{Name: "second", Command: sh("sleep 0.3; echo second >> /shared/order"), VolumeMounts: vm},
				},
				Containers: []corev1.Container{
					{Name: "writer", Command: sh("echo from-writer > /shared/msg; sleep 3600"), VolumeMounts: vm},
					{Name: "reader", Command: sh("while [ ! -f /shared/msg ]; do sleep 0.1; done; cat /shared/order /shared/msg; sleep 3600"), VolumeMounts: vm},
				},
			},
		})
		p = e.waitPod(t, p.Name, 30*time.Second, "Running and Ready", running)
		deadline := time.Now().Add(10 * time.Second)
		for {
			got := e.logText(t, p, "reader", 0)
			if got == "first\nsecond\nfrom-writer\n" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("reader saw %q", got)
			}
			time.Sleep(100 * time.Millisecond)
		}
		for _, ic := range p.Status.InitContainerStatuses {
			if ic.State.Terminated == nil || ic.State.Terminated.ExitCode != 0 {
				t.Fatalf("init status: %s", statusSummary(p))
			}
		}
	})

	t.Run("sidecar starts before the main containers and keeps running", func(t *testing.T) {
		vm := []corev1.VolumeMount{{Name: "shared", MountPath: "/shared"}}
		always := corev1.ContainerRestartPolicyAlways
		p := e.create(t, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "sidecar"},
			Spec: corev1.PodSpec{
				// Never: the sidecar is restarted and kept running
				// whatever the pod's policy.
				RestartPolicy: corev1.RestartPolicyNever,
				Volumes:       []corev1.Volume{{Name: "shared", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
				InitContainers: []corev1.Container{{
					Name: "proxy", RestartPolicy: &always, VolumeMounts: vm,
					Command: sh("sleep 1; touch /shared/up; sleep 3600"),
					StartupProbe: &corev1.Probe{PeriodSeconds: 1,
						ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-f", "/shared/up"}}}},
				}},
				Containers: []corev1.Container{{Name: "main", VolumeMounts: vm,
					Command: sh("if [ -f /shared/up ]; then echo proxy-was-up; fi; sleep 3600")}},
			},
		})
		p = e.waitPod(t, p.Name, 30*time.Second, "Running and Ready", running)
		ic := p.Status.InitContainerStatuses[0]
		if ic.State.Running == nil || ic.Started == nil || !*ic.Started || !ic.Ready {
			t.Fatalf("sidecar status: %s", statusSummary(p))
		}
		deadline := time.Now().Add(10 * time.Second)
		for e.logText(t, p, "main", 0) != "proxy-was-up\n" {
			if time.Now().After(deadline) {
				t.Fatalf("main container started before the sidecar's startup probe passed: log %q", e.logText(t, p, "main", 0))
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	t.Run("configMap and secret volumes update in place", func(t *testing.T) {
		ctx := t.Context()
		cm, err := e.cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "conf"}, Data: map[string]string{"mode": "fast"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.cs.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds"}, Data: map[string][]byte{"password": []byte("hunter2")}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		mode := int32(0o400)
		p := e.create(t, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "volumes"},
			Spec: corev1.PodSpec{
				Volumes: []corev1.Volume{
					{Name: "conf", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "conf"}}}},
					{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds", DefaultMode: &mode}}},
				},
				Containers: []corev1.Container{{Name: "main",
					Command:      sh("last=; while true; do v=\"$(cat /etc/conf/mode) $(cat /etc/creds/password) $(stat -L -c %a /etc/creds/password)\"; [ \"$v\" != \"$last\" ] && echo \"$v\"; last=$v; sleep 0.2; done"),
					VolumeMounts: []corev1.VolumeMount{{Name: "conf", MountPath: "/etc/conf"}, {Name: "creds", MountPath: "/etc/creds", ReadOnly: true}},
				}},
			},
		})
		p = e.waitPod(t, p.Name, 30*time.Second, "Running", running)
		waitLog := func(want string) {
			t.Helper()
			deadline := time.Now().Add(30 * time.Second)
			for {
				got := e.logText(t, p, "main", 0)
				if strings.Contains(got, want) {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("log %q never showed %q", got, want)
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
		waitLog("fast hunter2 400\n")
		cm.Data["mode"] = "slow"
		if _, err := e.cs.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitLog("slow hunter2 400\n")
		if p2, _ := e.cs.CoreV1().Pods("default").Get(ctx, p.Name, metav1.GetOptions{}); p2.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Fatal("the update restarted the container")
		}
	})

	t.Run("hostPort on 127.0.0.1 and pod to pod", func(t *testing.T) {
		hostPort := int32(freePort(t))
		srv := e.create(t, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "httpd",
				Command: sh("mkdir -p /www && echo served-by-$(hostname) > /www/index.html && exec httpd -f -p 8080 -h /www"),
				Ports:   []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, HostPort: hostPort}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/index.html", Port: intstr.FromString("http")}},
					PeriodSeconds: 1},
			}}},
		})
		srv = e.waitPod(t, srv.Name, 30*time.Second, "Ready", running)
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/index.html", hostPort))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "served-by-web\n" {
			t.Fatalf("hostPort answered %q", body)
		}
		client := e.create(t, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "client"},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "wget",
				Command: sh(fmt.Sprintf("wget -q -O - http://%s:8080/index.html", srv.Status.PodIP))}}},
		})
		client = e.waitPod(t, client.Name, 30*time.Second, "finished", func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
		})
		if got := e.logText(t, client, "wget", 0); client.Status.Phase != corev1.PodSucceeded || got != "served-by-web\n" {
			t.Fatalf("pod to pod: %s, log %q", statusSummary(client), got)
		}
		if client.Status.PodIP == srv.Status.PodIP || client.Status.PodIP == "" {
			t.Fatalf("pod IPs %s and %s", client.Status.PodIP, srv.Status.PodIP)
		}
	})

	t.Run("routes to another node's pod CIDR", func(t *testing.T) {
		self, err := e.cs.CoreV1().Nodes().Get(t.Context(), e.node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		own := netip.MustParsePrefix(self.Spec.PodCIDR)
		// A peer whose pod CIDR is the last /24 of the cluster CIDR, reached
		// via an address on the pod bridge: connected, so the kernel takes
		// the route, and no packet leaves the host.
		b := own.Addr().As4()
		peerCIDR := netip.PrefixFrom(netip.AddrFrom4([4]byte{b[0], b[1], 255, 0}), 24)
		gw := netip.AddrFrom4([4]byte{b[0], b[1], b[2], 254})
		peer, err := e.cs.CoreV1().Nodes().Create(t.Context(), &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: e.node + "-peer"},
			Spec:       corev1.NodeSpec{PodCIDR: peerCIDR.String(), PodCIDRs: []string{peerCIDR.String()}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer e.cs.CoreV1().Nodes().Delete(context.Background(), peer.Name, metav1.DeleteOptions{})
		peer.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: gw.String()}}
		if _, err := e.cs.CoreV1().Nodes().UpdateStatus(t.Context(), peer, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("%s via %s dev %s", peerCIDR, gw, e.bridge)
		routes := func() string {
			out, err := exec.Command("ip", "-4", "route", "show", "proto", "181").CombinedOutput()
			if err != nil {
				t.Fatalf("ip route: %v %s", err, out)
			}
			return string(out)
		}
		waitFor(t, 10*time.Second, "the route "+want, func() bool { return strings.Contains(routes(), want) })
		if err := e.cs.CoreV1().Nodes().Delete(t.Context(), peer.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "the route to go with its node", func() bool { return !strings.Contains(routes(), peerCIDR.String()) })
	})

	t.Run("liveness probe failure restarts the container", func(t *testing.T) {
		p := e.create(t, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "unhealthy"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main",
				Command: sh("touch /tmp/healthy; sleep 2; rm /tmp/healthy; sleep 3600"),
				LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"cat", "/tmp/healthy"}}},
					PeriodSeconds: 1, FailureThreshold: 2},
			}}, TerminationGracePeriodSeconds: ptr(int64(1))},
		})
		p = e.waitPod(t, p.Name, 40*time.Second, "restarted", func(p *corev1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount >= 1
		})
		evs := e.events(t, p.Name)
		if !hasEvent(evs, "Unhealthy", "Liveness probe failed") || !hasEvent(evs, "Killing", "failed liveness probe, will be restarted") {
			t.Fatalf("events: %+v", evs)
		}
	})

	t.Run("memory limit gives OOMKilled", func(t *testing.T) {
		p := e.create(t, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "hog"},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "main",
				Command:   sh("exec dd if=/dev/zero of=/dev/null bs=200M count=1"),
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi")}},
			}}},
		})
		p = e.waitPod(t, p.Name, 30*time.Second, "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
		term := p.Status.ContainerStatuses[0].State.Terminated
		if term == nil || term.Reason != "OOMKilled" || term.ExitCode != 137 {
			t.Fatalf("status: %s", statusSummary(p))
		}
	})

	t.Run("graceful delete runs preStop", func(t *testing.T) {
		hostDir := t.TempDir()
		dirType := corev1.HostPathDirectory
		p := e.create(t, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "graceful"},
			Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: ptr(int64(10)),
				Volumes:                       []corev1.Volume{{Name: "out", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: hostDir, Type: &dirType}}}},
				Containers: []corev1.Container{{Name: "main",
					Command:      sh("trap 'echo got-term >> /out/log; exit 0' TERM; while true; do sleep 0.1; done"),
					VolumeMounts: []corev1.VolumeMount{{Name: "out", MountPath: "/out"}},
					Lifecycle:    &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: sh("echo prestop >> /out/log; sleep 1")}}},
				}},
			},
		})
		e.waitPod(t, p.Name, 30*time.Second, "Running", running)
		start := time.Now()
		if err := e.cs.CoreV1().Pods("default").Delete(t.Context(), p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		for {
			_, err := e.cs.CoreV1().Pods("default").Get(t.Context(), p.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			if time.Since(start) > 20*time.Second {
				t.Fatal("pod not gone 20s after delete")
			}
			time.Sleep(100 * time.Millisecond)
		}
		took := time.Since(start)
		b, _ := os.ReadFile(filepath.Join(hostDir, "log"))
		if string(b) != "prestop\ngot-term\n" || took < time.Second || took > 8*time.Second {
			t.Fatalf("after delete (%v): log %q", took, b)
		}
	})

	t.Run("restart of bonsai restarts no container", func(t *testing.T) {
		before, err := e.cs.CoreV1().Pods("default").Get(t.Context(), "web", metav1.GetOptions{})
		if err != nil || !running(before) {
			t.Fatalf("web: %v %s", err, statusSummary(before))
		}
		e.restart(t)
		e.waitNodeReady(t)
		// Give the kubelet time to re-sync every pod.
		time.Sleep(3 * time.Second)
		after := e.waitPod(t, "web", 20*time.Second, "Ready", running)
		b, a := before.Status.ContainerStatuses[0], after.Status.ContainerStatuses[0]
		if a.ContainerID != b.ContainerID || a.RestartCount != b.RestartCount || !a.State.Running.StartedAt.Equal(&b.State.Running.StartedAt) {
			t.Fatalf("container changed across restart: before %+v after %+v", b, a)
		}
		hostPort := before.Spec.Containers[0].Ports[0].HostPort
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", hostPort), 2*time.Second)
		if err != nil {
			t.Fatalf("hostPort after restart: %v", err)
		}
		conn.Close()
	})

	t.Run("a pod deleted while the node was down is cleaned up", func(t *testing.T) {
		p := e.create(t, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "doomed"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Command: []string{"sleep", "3607"}}}},
		})
		e.waitPod(t, p.Name, 30*time.Second, "Running", running)
		alive := func() bool { return exec.Command("pgrep", "-f", "sleep 3607").Run() == nil }
		netns := filepath.Join("/run/bonsai", e.bridge, "netns", string(p.UID))
		if _, err := os.Stat(netns); err != nil || !alive() {
			t.Fatalf("pod not running as expected: netns %v, process %v", err, alive())
		}
		// The node goes away; the control plane alone deletes the pod.
		if code, _ := e.s.sigterm(t); code != 0 {
			t.Fatalf("exit %d", code)
		}
		cp := startServer(e.t, e.s.dataDir)
		cfg, _ := clientcmd.RESTConfigFromKubeConfig(cp.kubeconfig(t).raw)
		if err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Pods("default").Delete(t.Context(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
			t.Fatal(err)
		}
		if code, _ := cp.sigterm(t); code != 0 {
			t.Fatalf("exit %d", code)
		}
		if !alive() {
			t.Fatal("the container died with the node agent")
		}
		e.s = startServer(e.t, e.s.dataDir, e.args...)
		cfg, _ = clientcmd.RESTConfigFromKubeConfig(e.s.kubeconfig(t).raw)
		e.cs = kubernetes.NewForConfigOrDie(cfg)
		e.waitNodeReady(t)
		deadline := time.Now().Add(30 * time.Second)
		for alive() {
			if time.Now().After(deadline) {
				t.Fatal("the deleted pod's container still runs after the node came back")
			}
			time.Sleep(200 * time.Millisecond)
		}
		for {
			if _, err := os.Stat(netns); os.IsNotExist(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the deleted pod's network namespace is still there")
			}
			time.Sleep(200 * time.Millisecond)
		}
	})

	t.Run("pull through registries.yaml from a local registry", func(t *testing.T) {
		bb, err := testenv.BusyboxPath()
		if err != nil {
			t.Fatal(err)
		}
		layer, config, err := testenv.BusyboxLayer(bb)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.registry.Push("tools/pulled", "2", layer, config); err != nil {
			t.Fatal(err)
		}
		p := e.create(t, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "pulled"},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "main",
				Image: "registry.bonsai.test/tools/pulled:2", ImagePullPolicy: corev1.PullAlways, Command: sh("echo pulled-ok")}}},
		})
		p = e.waitPod(t, p.Name, 60*time.Second, "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
		if got := e.logText(t, p, "main", 0); got != "pulled-ok\n" {
			t.Fatalf("log %q", got)
		}
		if !hasEvent(e.events(t, p.Name), "Pulled", "Successfully pulled image \"registry.bonsai.test/tools/pulled:2\"") {
			t.Fatalf("events: %+v", e.events(t, p.Name))
		}
		// An image nobody serves fails with Kubernetes' reasons.
		bad := e.create(t, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "badimage"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "registry.bonsai.test/tools/missing:1"}}},
		})
		e.waitPod(t, bad.Name, 30*time.Second, "in ErrImagePull or ImagePullBackOff", func(p *corev1.Pod) bool {
			cs := p.Status.ContainerStatuses
			return len(cs) == 1 && cs[0].State.Waiting != nil && (cs[0].State.Waiting.Reason == "ErrImagePull" || cs[0].State.Waiting.Reason == "ImagePullBackOff")
		})
		// The pull is tried again after its 10 s back-off, and the
		// repeat raises the count of the same Event, as the kubelet's
		// event correlator does, rather than adding an Event per retry
		// (a pod that can never pull must not fill the store).
		deadline := time.Now().Add(40 * time.Second)
		for {
			evs := e.events(t, bad.Name)
			seen := map[string]string{}
			retried := false
			for _, ev := range evs {
				k := ev.Reason + "|" + ev.Message + "|" + ev.InvolvedObject.FieldPath
				if other, ok := seen[k]; ok {
					t.Fatalf("events %s and %s repeat %q: a repeat must raise the count of one Event", other, ev.Name, k)
				}
				seen[k] = ev.Name
				if ev.Reason == "Failed" && ev.Message == "Error: ErrImagePull" && ev.Count >= 2 {
					retried = true
				}
			}
			if retried {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no second pull counted on one Event in 40 s: %+v", evs)
			}
			time.Sleep(time.Second)
		}
	})

	t.Run("bonsai images import and list", func(t *testing.T) {
		bb, _ := testenv.BusyboxPath()
		archive, err := testenv.BuildBusyboxImage(bb, "bonsai.test/by-hand:3")
		if err != nil {
			t.Fatal(err)
		}
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		zw.Write(archive)
		zw.Close()
		file := filepath.Join(t.TempDir(), "by-hand.tar.gz")
		if err := os.WriteFile(file, gz.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bonsaiBin, "images", "import", "--data-dir", e.s.dataDir, "--container-runtime-endpoint", "/nonexistent.sock", file).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "imported docker.io/bonsai.test/by-hand:3") && !strings.Contains(string(out), "imported bonsai.test/by-hand:3") {
			t.Fatalf("images import: %v\n%s", err, out)
		}
		out, err = exec.Command(bonsaiBin, "images", "list", "--data-dir", e.s.dataDir, "--container-runtime-endpoint", "/nonexistent.sock").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "by-hand:3") || !strings.Contains(string(out), "busybox:1") {
			t.Fatalf("images list: %v\n%s", err, out)
		}
		out, err = exec.Command(bonsaiBin, "images", "import", "--data-dir", e.s.dataDir, filepath.Join(t.TempDir(), "missing.tar")).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "missing.tar") {
			t.Fatalf("import of a missing file: %v\n%s", err, out)
		}
		p := e.create(t, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "by-hand"},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "main",
				Image: "bonsai.test/by-hand:3", ImagePullPolicy: corev1.PullNever, Command: sh("true")}}},
		})
		e.waitPod(t, p.Name, 30*time.Second, "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	})

	t.Run("static pod with its mirror", func(t *testing.T) {
		dir := filepath.Join(e.s.dataDir, "pod-manifests")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		manifest := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: static-web\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: main\n    image: " + podImage + "\n    imagePullPolicy: Never\n    command: [sleep, '3600']\n"
		if err := os.WriteFile(filepath.Join(dir, "web.yaml"), []byte(manifest), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "broken.yaml"), []byte("kind: Pod\nspec: [\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		name := "static-web-" + e.node
		p := e.waitPod(t, name, 30*time.Second, "Running as a mirror pod", running)
		if p.Annotations["kubernetes.io/config.mirror"] == "" || p.Annotations["kubernetes.io/config.source"] != "file" || len(p.OwnerReferences) != 1 || p.OwnerReferences[0].Kind != "Node" {
			t.Fatalf("mirror pod: annotations %v owners %v", p.Annotations, p.OwnerReferences)
		}
		id := p.Status.ContainerStatuses[0].ContainerID
		// Deleting the mirror does not stop the static pod: it comes back.
		if err := e.cs.CoreV1().Pods("default").Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		p = e.waitPod(t, name, 30*time.Second, "mirrored again", func(q *corev1.Pod) bool { return q.UID != p.UID && running(q) })
		if got := p.Status.ContainerStatuses[0].ContainerID; got != id {
			t.Fatalf("container changed from %s to %s when the mirror was deleted", id, got)
		}
		if !strings.Contains(e.s.stderrText(), "broken.yaml") {
			t.Errorf("the invalid manifest was not reported:\n%s", e.s.stderrText())
		}
		// Removing the file ends it.
		os.Remove(filepath.Join(dir, "web.yaml"))
		os.Remove(filepath.Join(dir, "broken.yaml"))
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, err := e.cs.CoreV1().Pods("default").Get(t.Context(), name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("static pod still there after its manifest was removed: %v", err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})

	t.Run("security context and active deadline", func(t *testing.T) {
		p := e.create(t, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "locked-down"},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr(int64(65534)), RunAsGroup: ptr(int64(65534))},
				Containers: []corev1.Container{{Name: "main",
					Command: sh("echo uid=$(id -u) gid=$(id -g); touch /rootfs-file 2>/dev/null && echo rootfs-writable || echo rootfs-readonly; echo bye > /dev/termination-log"),
					SecurityContext: &corev1.SecurityContext{ReadOnlyRootFilesystem: ptr(true), AllowPrivilegeEscalation: ptr(false),
						Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
				}}},
		})
		p = e.waitPod(t, p.Name, 30*time.Second, "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
		if got := e.logText(t, p, "main", 0); got != "uid=65534 gid=65534\nrootfs-readonly\n" {
			t.Fatalf("log %q", got)
		}
		if msg := p.Status.ContainerStatuses[0].State.Terminated.Message; msg != "bye\n" {
			t.Fatalf("termination message %q", msg)
		}
		// runAsNonRoot against an image that runs as root is refused.
		root := e.create(t, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "nonroot"},
			Spec: corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr(true)},
				Containers: []corev1.Container{{Name: "main", Command: sh("true")}}},
		})
		e.waitPod(t, root.Name, 30*time.Second, "refused with CreateContainerConfigError", func(p *corev1.Pod) bool {
			cs := p.Status.ContainerStatuses
			return len(cs) == 1 && cs[0].State.Waiting != nil && cs[0].State.Waiting.Reason == "CreateContainerConfigError" &&
				strings.Contains(cs[0].State.Waiting.Message, "runAsNonRoot")
		})
		dl := e.create(t, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "deadline"},
			Spec: corev1.PodSpec{ActiveDeadlineSeconds: ptr(int64(2)), TerminationGracePeriodSeconds: ptr(int64(0)),
				Containers: []corev1.Container{{Name: "main", Command: sh("sleep 3600")}}},
		})
		dl = e.waitPod(t, dl.Name, 30*time.Second, "Failed with DeadlineExceeded", func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodFailed && p.Status.Reason == "DeadlineExceeded"
		})
		if term := dl.Status.ContainerStatuses[0].State.Terminated; term == nil {
			t.Fatalf("container still running past the deadline: %s", statusSummary(dl))
		}
	})

	t.Run("hostNetwork, downwardAPI and projected volumes", func(t *testing.T) {
		port := freePort(t)
		labels := map[string]string{"app": "probe", "tier": "edge"}
		p := e.create(t, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "hostnet", Labels: labels, Annotations: map[string]string{"note": "hi"}},
			Spec: corev1.PodSpec{HostNetwork: true, TerminationGracePeriodSeconds: ptr(int64(0)),
				Volumes: []corev1.Volume{
					{Name: "info", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
						{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
						{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}},
					}}}},
					{Name: "all", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
						{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "conf"}, Items: []corev1.KeyToPath{{Key: "mode", Path: "conf/mode"}}}},
						{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}}},
						{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "note", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['note']"}}}}},
					}}}},
				},
				Containers: []corev1.Container{{Name: "main",
					Command:      sh(fmt.Sprintf("cat /info/labels; echo; cat /info/name; echo; cat /all/conf/mode /all/password; echo; cat /all/note; echo; exec httpd -f -p %d -h /info", port)),
					VolumeMounts: []corev1.VolumeMount{{Name: "info", MountPath: "/info"}, {Name: "all", MountPath: "/all"}},
				}}},
		})
		p = e.waitPod(t, p.Name, 30*time.Second, "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		if p.Status.PodIP != p.Status.HostIP {
			t.Fatalf("hostNetwork pod IP %s, host IP %s", p.Status.PodIP, p.Status.HostIP)
		}
		deadline := time.Now().Add(10 * time.Second)
		want := "app=\"probe\"\ntier=\"edge\"\nhostnet\nslowhunter2\nhi\n"
		for {
			got := e.logText(t, p, "main", 0)
			if got == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("log %q, want %q", got, want)
			}
			time.Sleep(100 * time.Millisecond)
		}
		// The host network: the pod's server answers on the host's loopback.
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/name", port))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "hostnet" {
			t.Fatalf("host port answered %q", body)
		}
	})

	t.Run("crash loop back-off", func(t *testing.T) {
		p := e.create(t, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "crasher"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Command: sh("echo crashing; exit 1")}}},
		})
		p = e.waitPod(t, p.Name, 30*time.Second, "in CrashLoopBackOff", func(p *corev1.Pod) bool {
			cs := p.Status.ContainerStatuses
			return len(cs) == 1 && cs[0].State.Waiting != nil && cs[0].State.Waiting.Reason == "CrashLoopBackOff"
		})
		cs := p.Status.ContainerStatuses[0]
		if cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 1 || p.Status.Phase != corev1.PodRunning {
			t.Fatalf("status: %s", statusSummary(p))
		}
		// The first restart is at once, the next after 10 s, then 20 s.
		first := cs.RestartCount
		lastFinish := cs.LastTerminationState.Terminated.FinishedAt.Time
		p = e.waitPod(t, p.Name, 30*time.Second, "restarted after its back-off", func(p *corev1.Pod) bool {
			return p.Status.ContainerStatuses[0].RestartCount > first
		})
		next := p.Status.ContainerStatuses[0]
		var started time.Time
		if next.State.Running != nil {
			started = next.State.Running.StartedAt.Time
		} else if next.State.Terminated != nil {
			started = next.State.Terminated.StartedAt.Time
		} else if next.LastTerminationState.Terminated != nil {
			started = next.LastTerminationState.Terminated.StartedAt.Time
		}
		gap := started.Sub(lastFinish)
		want := 10 * time.Second
		if first >= 2 {
			want = 20 * time.Second
		}
		if gap < want-time.Second || gap > want+3*time.Second {
			t.Fatalf("restart %d came %v after the crash, want about %v", first+1, gap, want)
		}
		if !hasEvent(e.events(t, p.Name), "BackOff", "Back-off restarting failed container") {
			t.Fatal("no BackOff event")
		}
	})
}

func ptr[T any](v T) *T { return &v }

// TestNodeWithoutRuntime: when the runtime cannot be reached the node is
// not registered, the log says why, and the control plane serves on.
func TestNodeWithoutRuntime(t *testing.T) {
	requireBinary(t)
	dir := t.TempDir()
	notASocket := filepath.Join(dir, "containerd.sock")
	if err := os.WriteFile(notASocket, []byte("not a socket"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, dir, "--runtime=containerd", "--node-name=no-runtime", "--container-runtime-endpoint="+notASocket)
	defer s.sigterm(t)
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(s.stderrText(), "the node is not registered") {
		if time.Now().After(deadline) {
			t.Fatalf("no error about the runtime:\n%s", s.stderrText())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(s.stderrText(), notASocket) {
		t.Fatalf("the error does not name the endpoint:\n%s", s.stderrText())
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.kubeconfig(t).raw)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	if _, err := cs.CoreV1().Nodes().Get(t.Context(), "no-runtime", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("node registered without a runtime: %v", err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(t.Context(), "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("control plane not serving: %v", err)
	}
}
