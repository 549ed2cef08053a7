package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"bonsai.dev/bonsai/testsupport/testenv"
)

// rcPods are the pods labelled app=rc-web, by name, with the name of
// their controller ("" for none), from kubectl.
func rcPods(t *testing.T, k *kubectlRunner) map[string]string {
	t.Helper()
	var list corev1.PodList
	if err := json.Unmarshal([]byte(k.must("get", "pods", "-l", "app=rc-web", "-o", "json")), &list); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		out[p.Name] = ""
		if ref := metav1.GetControllerOf(&p); ref != nil {
			out[p.Name] = ref.APIVersion + "/" + ref.Kind + "/" + ref.Name
		}
	}
	return out
}

// owned are the names of the pods whose controller is the RC web.
func owned(pods map[string]string) []string {
	var out []string
	for name, owner := range pods {
		if owner == "v1/ReplicationController/web" {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// TestKubectlReplicationController: an RC of 3 replicas on the real
// binary adopts a matching orphan, is scaled with kubectl scale rc,
// releases a pod relabelled away and replaces it, and takes its pods
// with it when deleted, as on Kubernetes.
func TestKubectlReplicationController(t *testing.T) {
	e := startPodEnv(t)
	kcs := testenv.Kubectls(t)
	k := &kubectlRunner{t: t, bin: kcs[len(kcs)-1].Path, kubeconfig: filepath.Join(e.s.dataDir, "kubeconfig.yaml"), cacheDir: t.TempDir()}
	e.create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "stray", Labels: map[string]string{"app": "rc-web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Command: sh("exec sleep 3600")}}}})
	manifest := fmt.Sprintf(`apiVersion: v1
kind: ReplicationController
metadata:
  name: web
spec:
  replicas: 3
  template:
    metadata:
      labels:
        app: rc-web
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: %s
        command: ["sh", "-c", "exec sleep 3600"]
`, podImage)
	cmd := k.command(context.Background(), "create", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl create rc: %v\n%s", err, out)
	}
	// The selector was defaulted from the template's labels.
	if sel := k.must("get", "rc", "web", "-o", "jsonpath={.spec.selector.app}"); sel != "rc-web" {
		t.Fatalf("selector app=%q, want rc-web", sel)
	}
	waitReady := func(n int) {
		t.Helper()
		want := fmt.Sprintf("%d/%d/%d/%d", n, n, n, n)
		waitFor(t, 90*time.Second, "rc web with "+want+" replicas/ready/available/fullyLabeled", func() bool {
			got := k.run("get", "rc", "web", "-o", "jsonpath={.status.replicas}/{.status.readyReplicas}/{.status.availableReplicas}/{.status.fullyLabeledReplicas}/{.status.observedGeneration}/{.metadata.generation}").stdout
			parts := strings.Split(got, "/")
			return len(parts) == 6 && strings.Join(parts[:4], "/") == want && parts[4] == parts[5] && len(owned(rcPods(t, k))) == n
		})
	}
	waitReady(3)
	if pods := rcPods(t, k); pods["stray"] != "v1/ReplicationController/web" || len(pods) != 3 {
		t.Fatalf("pods %v, want stray adopted and two created", pods)
	}

	if out := k.must("describe", "rc", "web"); !strings.Contains(out, "3 current / 3 desired") || !strings.Contains(out, "3 Running") {
		t.Errorf("kubectl describe rc web:\n%s", out)
	}
	if out := k.must("get", "rc", "web"); !strings.Contains(out, "DESIRED") || !strings.Contains(out, "web    3         3         3") {
		t.Errorf("kubectl get rc web:\n%s", out)
	}
	k.must("scale", "rc", "web", "--replicas=1")
	waitReady(1)
	k.must("scale", "rc", "web", "--replicas=2")
	waitReady(2)

	// Relabelled away: released, and replaced.
	left := owned(rcPods(t, k))[0]
	k.must("label", "pod", left, "app=elsewhere", "--overwrite")
	waitFor(t, 30*time.Second, "pod "+left+" released", func() bool {
		return k.run("get", "pod", left, "-o", "jsonpath={.metadata.ownerReferences}").stdout == ""
	})
	waitReady(2)
	if slices.Contains(owned(rcPods(t, k)), left) {
		t.Fatalf("released pod %s still counted", left)
	}

	// Deleted with its pods (the garbage collector's background
	// cascade); the released pod stays.
	k.must("delete", "rc", "web")
	waitFor(t, 60*time.Second, "the RC's pods gone", func() bool { return len(rcPods(t, k)) == 0 })
	if out := k.run("get", "pod", left, "-o", "name"); out.code != 0 {
		t.Errorf("released pod %s went with the RC: %s", left, out.stderr)
	}
}

// wsScript is a WebSocket server stand-in for busybox nc: it reads the
// upgrade request, switches protocols and echoes what follows.
const wsScript = `while read -r line; do line=$(printf %s "$line" | tr -d '\r'); [ -z "$line" ] && break; done
printf 'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n'
exec cat
`

// TestKubectlProxy: kubectl proxy reaches a busybox httpd through
// pods/proxy and services/proxy and the node's kubelet through
// nodes/proxy (kubectl get --raw too), and WebSocket upgrades pass
// through all three: an echoing upgrade server in the pod, and exec over
// WebSocket (v5.channel.k8s.io) to the kubelet through nodes/proxy.
func TestKubectlProxy(t *testing.T) {
	e := startPodEnv(t)
	kcs := testenv.Kubectls(t)
	k := &kubectlRunner{t: t, bin: kcs[len(kcs)-1].Path, kubeconfig: filepath.Join(e.s.dataDir, "kubeconfig.yaml"), cacheDir: t.TempDir()}
	e.create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"app": "proxied"}}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "main",
		Command: sh("mkdir -p /tmp/www && echo hello-proxy > /tmp/www/index.html && printf '%s' \"$WS\" > /tmp/ws.sh && chmod +x /tmp/ws.sh && " +
			"(nc -ll -p 9000 -e /tmp/ws.sh &) && exec httpd -f -p 8080 -h /tmp/www"),
		Env:   []corev1.EnvVar{{Name: "WS", Value: wsScript}},
		Ports: []corev1.ContainerPort{{ContainerPort: 8080}, {ContainerPort: 9000}},
	}}}})
	e.waitPod(t, "web", 60*time.Second, "Running", running)
	if _, err := e.cs.CoreV1().Services("default").Create(t.Context(), &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "proxied"}, Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}, {Name: "ws", Port: 9000, TargetPort: intstr.FromInt32(9000)}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	port := freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	proxy := k.command(ctx, "proxy", "--address=127.0.0.1", fmt.Sprintf("--port=%d", port))
	var proxyOut bytes.Buffer
	proxy.Stdout, proxy.Stderr = &proxyOut, &proxyOut
	if err := proxy.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		proxy.Wait()
	}()
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	get := func(path string) (int, string) {
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(base + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct{ path, want string }{
		{"/api/v1/namespaces/default/pods/web:8080/proxy/", "hello-proxy\n"},
		{"/api/v1/namespaces/default/pods/http:web:8080/proxy/index.html", "hello-proxy\n"},
		{"/api/v1/namespaces/default/services/web:80/proxy/", "hello-proxy\n"},
		{"/api/v1/namespaces/default/services/web:http/proxy/index.html", "hello-proxy\n"},
		{"/api/v1/nodes/" + e.node + "/proxy/healthz", "ok"},
	} {
		var code int
		var body string
		// The service's endpoints and kubectl proxy's listener come a
		// moment after the pod.
		waitFor(t, 30*time.Second, "GET "+tc.path, func() bool {
			code, body = get(tc.path)
			return code == http.StatusOK && body == tc.want
		})
	}
	if code, body := get("/api/v1/nodes/" + e.node + "/proxy/no-such-page"); code != http.StatusNotFound {
		t.Errorf("GET nodes/proxy/no-such-page: %d %q, want the kubelet's 404", code, body)
	}
	if out := k.must("get", "--raw", "/api/v1/nodes/"+e.node+"/proxy/healthz"); out != "ok" {
		t.Errorf("kubectl get --raw nodes/proxy/healthz: %q", out)
	}

	// The pods the kubelet runs, as it sees them.
	var pods corev1.PodList
	if err := json.Unmarshal([]byte(k.must("get", "--raw", "/api/v1/nodes/"+e.node+"/proxy/pods")), &pods); err != nil || pods.Kind != "PodList" ||
		!slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool { return p.Namespace == "default" && p.Name == "web" }) {
		t.Errorf("nodes/proxy/pods: %v, %d pods of kind %q, want default/web among them", err, len(pods.Items), pods.Kind)
	}

	// The kubelet's Summary API and resource metrics, through
	// nodes/proxy: the pod's figures from its cgroups and network
	// namespace, sampled every 10 s.
	var sum statsapi.Summary
	waitFor(t, 40*time.Second, "the pod web in /stats/summary with CPU, memory and network figures", func() bool {
		r := k.run("get", "--raw", "/api/v1/nodes/"+e.node+"/proxy/stats/summary")
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &sum) != nil {
			return false
		}
		for _, p := range sum.Pods {
			if p.PodRef.Name == "web" && p.PodRef.Namespace == "default" && len(p.Containers) == 1 && p.Containers[0].Name == "main" &&
				p.CPU != nil && p.Memory != nil && p.Memory.WorkingSetBytes != nil && *p.Memory.WorkingSetBytes > 0 &&
				p.Containers[0].CPU != nil && p.Containers[0].CPU.UsageCoreNanoSeconds != nil && *p.Containers[0].CPU.UsageCoreNanoSeconds > 0 &&
				p.Network != nil && p.Network.Name == "eth0" && p.Network.RxBytes != nil {
				return true
			}
		}
		return false
	})
	if sum.Node.NodeName != e.node || sum.Node.CPU == nil || sum.Node.Memory == nil || sum.Node.Fs == nil || sum.Node.Fs.CapacityBytes == nil {
		t.Errorf("node figures in /stats/summary: %+v", sum.Node)
	}
	if out := k.must("get", "--raw", "/api/v1/nodes/"+e.node+"/proxy/metrics/resource"); !strings.Contains(out, `container_cpu_usage_seconds_total{container="main",namespace="default",pod="web"}`) ||
		!strings.Contains(out, "node_memory_working_set_bytes ") {
		t.Errorf("/metrics/resource:\n%s", out)
	}

	// WebSocket through pods/proxy and services/proxy.
	for _, path := range []string{
		"/api/v1/namespaces/default/pods/web:9000/proxy/",
		"/api/v1/namespaces/default/services/web:ws/proxy/",
	} {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(20 * time.Second))
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", path, port)
		r := bufio.NewReader(conn)
		resp, err := http.ReadResponse(r, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Errorf("upgrade through %s: %v %v, want 101", path, resp, err)
			conn.Close()
			continue
		}
		io.WriteString(conn, "ping over "+path+"\n")
		if line, err := r.ReadString('\n'); err != nil || line != "ping over "+path+"\n" {
			t.Errorf("echo through %s: %q, %v", path, line, err)
		}
		conn.Close()
	}

	// WebSocket exec at the kubelet, through nodes/proxy.
	q := url.Values{"command": {"echo", "through-node-proxy"}, "output": {"1"}}
	u, _ := url.Parse(base + "/api/v1/nodes/" + e.node + "/proxy/exec/default/web/main?" + q.Encode())
	ex, err := remotecommand.NewWebSocketExecutor(&rest.Config{Host: base}, "GET", u.String())
	if err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	if err := ex.StreamWithContext(sctx, remotecommand.StreamOptions{Stdout: &stdout}); err != nil || stdout.String() != "through-node-proxy\n" {
		t.Errorf("exec over WebSocket through nodes/proxy: %q, %v\nkubectl proxy: %s", stdout.String(), err, proxyOut.String())
	}
}
