package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"bonsai.dev/bonsai/kubelet/tlsbootstrap"
)

// agent is one running `bonsai agent`.
type agent struct {
	cmd    *exec.Cmd
	stderr string
	done   chan struct{}
	start  time.Time
}

func (a *agent) stderrText() string {
	b, _ := os.ReadFile(a.stderr)
	return string(b)
}

// startAgent runs `bonsai agent` with a simulated runtime (no containers,
// no pod network) on dataDir, its kubelet API on a free loopback port.
func startAgent(t *testing.T, dataDir string, args ...string) *agent {
	t.Helper()
	logf, err := os.CreateTemp(t.TempDir(), "agent-stderr-")
	if err != nil {
		t.Fatal(err)
	}
	all := append([]string{"agent", "--data-dir", dataDir, "--config", emptyConfig(t), "--bind-address", "127.0.0.1",
		"--kubelet-port", fmt.Sprint(freePort(t)), "--kubelet-root-dir", filepath.Join(dataDir, "kubelet")}, args...)
	cmd := exec.Command(bonsaiBin, all...)
	cmd.Stdout, cmd.Stderr = logf, logf
	a := &agent{cmd: cmd, stderr: logf.Name(), done: make(chan struct{}), start: time.Now()}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { cmd.Wait(); logf.Close(); close(a.done) }()
	t.Cleanup(func() {
		select {
		case <-a.done:
		default:
			cmd.Process.Signal(os.Interrupt)
			select {
			case <-a.done:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				<-a.done
			}
		}
		if t.Failed() {
			t.Logf("agent stderr:\n%s", a.stderrText())
		}
	})
	return a
}

// TestAgentJoins: `bonsai agent` joins a server with the join token of
// `bonsai token create`. It refuses a server whose CA is not the
// token's before sending the token anywhere, and a token without a CA
// hash; with the right token it gets its client certificate through a
// CSR asked by the bootstrap identity and approved and signed by the
// server's controllers, registers its Node as system:node:<name>, which
// goes Ready, and serves its kubelet API with a serving certificate it
// got the same way. Restarted without a token, it comes back with the
// certificates it has.
func TestAgentJoins(t *testing.T) {
	s := startServer(t, t.TempDir())
	kc := s.kubeconfig(t)
	rc, err := clientcmd.RESTConfigFromKubeConfig(kc.raw)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bonsaiBin, "token", "create", "--data-dir", s.dataDir).CombinedOutput()
	if err != nil {
		t.Fatalf("bonsai token create: %v\n%s", err, out)
	}
	joinToken := strings.TrimSpace(string(out))
	_, bootstrap, err := tlsbootstrap.ParseJoinToken(joinToken)
	if err != nil {
		t.Fatal(err)
	}
	serverURL := fmt.Sprintf("https://127.0.0.1:%d", s.port)

	// Wrong pins and plain tokens: a clear error, and no request made.
	wrong := "K10" + strings.Repeat("ab", 32) + "::" + bootstrap
	for _, c := range []struct{ token, want string }{
		{wrong, "does not match the join token's CA hash"},
		{bootstrap, "the token has no CA hash"},
		{"K10zz::" + bootstrap, "CA hash is not 64 hex digits"},
	} {
		dir := t.TempDir()
		out, err := exec.Command(bonsaiBin, "agent", "--server", serverURL, "--token", c.token, "--data-dir", dir, "--config", emptyConfig(t),
			"--runtime=simulated", "--node-name", "bad", "--bind-address", "127.0.0.1", "--kubelet-port", fmt.Sprint(freePort(t))).CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("agent --token %s: %v, want an error saying %q:\n%s", c.token, err, c.want, out)
		}
		if _, err := os.Stat(filepath.Join(dir, "agent", "pki", tlsbootstrap.CAFile)); err == nil {
			t.Errorf("agent --token %s kept a CA", c.token)
		}
	}
	if csrs, err := cs.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{}); err != nil || len(csrs.Items) > 0 {
		t.Fatalf("refused joins made requests: %v %d", err, len(csrs.Items))
	}

	dir := t.TempDir()
	a := startAgent(t, dir, "--server", serverURL, "--token", joinToken, "--runtime=simulated", "--node-name", "agent-1")
	waitNodeReady(t, cs, "agent-1", 60*time.Second)
	t.Logf("agent exec -> Node Ready: %v", time.Since(a.start))

	// Its requests: the client certificate asked by the bootstrap token,
	// the serving one by the node; both approved and issued.
	var asked []string
	waitNoErr(t, 30*time.Second, func() error {
		csrs, err := cs.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		asked = asked[:0]
		for _, c := range csrs.Items {
			if len(c.Status.Certificate) == 0 {
				return fmt.Errorf("%s (%s) not issued yet", c.Name, c.Spec.SignerName)
			}
			asked = append(asked, c.Spec.SignerName+" by "+c.Spec.Username)
		}
		if len(asked) != 2 {
			return fmt.Errorf("requests %v, want 2", asked)
		}
		return nil
	})
	want := map[string]bool{
		certificatesv1.KubeAPIServerClientKubeletSignerName + " by system:bootstrap:" + bootstrap[:6]: true,
		certificatesv1.KubeletServingSignerName + " by system:node:agent-1":                           true,
	}
	for _, got := range asked {
		if !want[got] {
			t.Errorf("request %q; want %v", got, want)
		}
	}
	// The kubelet API serves the issued certificate, which the cluster
	// CA verifies for the node's address.
	node, err := cs.CoreV1().Nodes().Get(context.Background(), "agent-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	port := node.Status.DaemonEndpoints.KubeletEndpoint.Port
	waitNoErr(t, 30*time.Second, func() error {
		conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{RootCAs: kc.caPool, ServerName: "127.0.0.1"})
		if err != nil {
			return err
		}
		defer conn.Close()
		if cn := conn.ConnectionState().PeerCertificates[0].Subject.CommonName; cn != "system:node:agent-1" {
			return fmt.Errorf("kubelet API serves %q", cn)
		}
		return nil
	})

	// Restarted without the token: the stored certificates do.
	a.cmd.Process.Signal(os.Interrupt)
	<-a.done
	b := startAgent(t, dir, "--server", serverURL, "--runtime=simulated", "--node-name", "agent-1")
	waitNoErr(t, 30*time.Second, func() error {
		if !strings.Contains(b.stderrText(), "joined") {
			return fmt.Errorf("not joined yet")
		}
		return nil
	})
	if csrs, err := cs.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{}); err != nil || len(csrs.Items) != 2 {
		t.Errorf("after a restart: %v, %d requests; want the 2 of the first join", err, len(csrs.Items))
	}
	waitNodeReady(t, cs, "agent-1", 60*time.Second)
}

func waitNodeReady(t *testing.T, cs kubernetes.Interface, name string, timeout time.Duration) {
	t.Helper()
	waitNoErr(t, timeout, func() error {
		n, err := cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("node %s not Ready", name)
	})
}

func waitNoErr(t *testing.T, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// agentClient is a clientset with the client certificate an agent got
// at join.
func agentClient(t *testing.T, kc kubeconfig, dataDir string) kubernetes.Interface {
	t.Helper()
	pair, err := os.ReadFile(filepath.Join(dataDir, "agent", "pki", tlsbootstrap.ClientFile))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: kc.server, TLSClientConfig: rest.TLSClientConfig{CAData: kc.ca, CertData: pair, KeyData: pair}})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestAgentsNodeAuthorization: two agents joined with the same token
// are two nodes to the Node authorizer and NodeRestriction. Each reads
// the Secret of a pod bound to it and not the other's, and cannot edit
// the other's Node or delete the other's pods; its own it can.
func TestAgentsNodeAuthorization(t *testing.T) {
	s := startServer(t, t.TempDir())
	kc := s.kubeconfig(t)
	rc, err := clientcmd.RESTConfigFromKubeConfig(kc.raw)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bonsaiBin, "token", "create", "--data-dir", s.dataDir).CombinedOutput()
	if err != nil {
		t.Fatalf("bonsai token create: %v\n%s", err, out)
	}
	token := strings.TrimSpace(string(out))
	serverURL := fmt.Sprintf("https://127.0.0.1:%d", s.port)
	ctx := context.Background()
	dirs := map[string]string{}
	for _, name := range []string{"agent-1", "agent-2"} {
		dirs[name] = t.TempDir()
		startAgent(t, dirs[name], "--server", serverURL, "--token", token, "--runtime=simulated", "--node-name", name)
	}
	for name := range dirs {
		waitNodeReady(t, admin, name, 60*time.Second)
	}
	for _, n := range []string{"1", "2"} {
		if _, err := admin.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s" + n},
			StringData: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p" + n},
			Spec: corev1.PodSpec{NodeName: "agent-" + n, AutomountServiceAccountToken: new(bool),
				Containers: []corev1.Container{{Name: "c", Image: "busybox", EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "s" + n}}}}}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	one, two := agentClient(t, kc, dirs["agent-1"]), agentClient(t, kc, dirs["agent-2"])
	// Its own pod's Secret: allowed once the authorizer has seen the pod.
	waitNoErr(t, 30*time.Second, func() error {
		_, err := one.CoreV1().Secrets("default").Get(ctx, "s1", metav1.GetOptions{})
		return err
	})
	waitNoErr(t, 30*time.Second, func() error {
		_, err := two.CoreV1().Secrets("default").Get(ctx, "s2", metav1.GetOptions{})
		return err
	})
	forbidden := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want Forbidden", what, err)
		}
	}
	_, err = two.CoreV1().Secrets("default").Get(ctx, "s1", metav1.GetOptions{})
	forbidden("agent-2 reads agent-1's pod's Secret", err)
	_, err = one.CoreV1().Secrets("default").Get(ctx, "s2", metav1.GetOptions{})
	forbidden("agent-1 reads agent-2's pod's Secret", err)
	_, err = two.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{})
	forbidden("agent-2 lists Secrets", err)
	patch := []byte(`{"metadata":{"labels":{"owned-by":"agent-2"}}}`)
	_, err = two.CoreV1().Nodes().Patch(ctx, "agent-1", types.MergePatchType, patch, metav1.PatchOptions{})
	forbidden("agent-2 labels agent-1's Node", err)
	_, err = two.CoreV1().Nodes().Patch(ctx, "agent-1", types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{})
	forbidden("agent-2 cordons agent-1", err)
	_, err = two.CoreV1().Nodes().PatchStatus(ctx, "agent-1", []byte(`{"status":{"conditions":[{"type":"Ready","status":"False"}]}}`))
	forbidden("agent-2 marks agent-1 not Ready", err)
	forbidden("agent-2 deletes agent-1's Node", two.CoreV1().Nodes().Delete(ctx, "agent-1", metav1.DeleteOptions{}))
	forbidden("agent-2 deletes agent-1's pod", two.CoreV1().Pods("default").Delete(ctx, "p1", metav1.DeleteOptions{}))
	// Its own Node it may label (outside the kubelet-restricted prefixes).
	if _, err := one.CoreV1().Nodes().Patch(ctx, "agent-1", types.MergePatchType, []byte(`{"metadata":{"labels":{"example.com/rack":"r1"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("agent-1 labels its own Node: %v", err)
	}
	if n, err := admin.CoreV1().Nodes().Get(ctx, "agent-1", metav1.GetOptions{}); err != nil || n.Labels["owned-by"] != "" || n.Spec.Unschedulable {
		t.Errorf("agent-1's Node after agent-2's attempts: %v %v unschedulable=%v", err, n.Labels, n.Spec.Unschedulable)
	}
}
