package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// TestSimulatedNode: bonsai server --runtime=simulated registers its own
// node, Ready, with its labels and taints, and keeps its Lease fresh.
func TestSimulatedNode(t *testing.T) {
	s := startServer(t, t.TempDir(), "--runtime=simulated", "--node-name=edge-1", "--node-labels=site=plant-7", "--node-taints=dedicated=cam:NoSchedule")
	defer s.sigterm(t)
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.kubeconfig(t).raw)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	deadline := time.Now().Add(15 * time.Second)
	var node *corev1.Node
	for {
		node, err = cs.CoreV1().Nodes().Get(t.Context(), "edge-1", metav1.GetOptions{})
		if err == nil && len(node.Status.Conditions) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node edge-1 not registered: %v\n%s", err, s.stderrText())
		}
		time.Sleep(50 * time.Millisecond)
	}
	ready := false
	for _, c := range node.Status.Conditions {
		ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
	}
	if !ready || node.Labels["site"] != "plant-7" || len(node.Spec.Taints) != 1 || node.Spec.Taints[0].Value != "cam" ||
		!strings.HasPrefix(node.Status.NodeInfo.ContainerRuntimeVersion, "simulated://") || node.Status.DaemonEndpoints.KubeletEndpoint.Port <= 0 {
		t.Fatalf("node: ready %v labels %v taints %v info %+v endpoints %+v", ready, node.Labels, node.Spec.Taints, node.Status.NodeInfo, node.Status.DaemonEndpoints)
	}
	// The node is registered with its status; its Lease follows.
	for {
		lease, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(t.Context(), "edge-1", metav1.GetOptions{})
		if err == nil && lease.Spec.RenewTime != nil && *lease.Spec.HolderIdentity == "edge-1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease: %+v %v", lease, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
