package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"

	"bonsai.dev/bonsai/testsupport/testenv"
)

// TestOverloadKeepsNodesAlive floods the real binary with 200 client-go
// clients creating ConfigMaps while 100 nodes, each on its own
// connection with its own node certificate, renew their Leases every
// second. No renewal may fail, none may miss a kubelet's 10 s period, and
// no node may go NotReady: nodes have seats of their own that the flood
// cannot take. (Both sides share the two cores with the test's own 300
// clients, so latencies here are the box's, not the server's alone.)
func TestOverloadKeepsNodesAlive(t *testing.T) {
	requireBinary(t)
	tokens := writeFile(t, "tokens.csv", "flood-token,flood,1001\n", 0o600)
	s := startServer(t, t.TempDir(), "--token-file", tokens)
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.kubeconfig(t).raw)
	if err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := admin.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "flood-edit"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "flood"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	flood := testenv.Flood{DataDir: s.dataDir, Nodes: 100, Users: 200, RenewEvery: time.Second, Duration: 20 * time.Second,
		UserToken: "flood-token", Namespace: "default"}
	// The nodes report Ready once; from then on only their Leases say
	// they are alive.
	ready := func() {
		for i := 0; i < flood.Nodes; i++ {
			// The node IPAM controller writes the same Nodes.
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				n, err := admin.CoreV1().Nodes().Get(ctx, testenv.FloodNodeName(i), metav1.GetOptions{})
				if err != nil {
					return err
				}
				now := metav1.Now()
				n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}}
				_, err = admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	// The node monitor may call the nodes unreachable while the others
	// are made: only what happens from their Ready on counts.
	var start time.Time
	flood.OnNodesCreated = func() { ready(); start = time.Now() }
	res, err := flood.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ended := time.Now()
	p99, err := testenv.Percentile(res.Renewals, 99)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d renewals, p99 %v, longest gap %v; users: %d created, %d refused with 429, %d other errors",
		len(res.Renewals), p99, res.LongestGap, res.Created, res.TooMany, res.OtherErrors)
	if res.RenewFailures > 0 {
		t.Errorf("%d Lease renewals failed, the first: %v", res.RenewFailures, res.FirstFailure)
	}
	if res.LongestGap >= 10*time.Second {
		t.Errorf("a node went %v without a renewal, past a kubelet's 10 s period", res.LongestGap)
	}
	if res.Created == 0 {
		t.Errorf("the flood created nothing: it did not load the server")
	}
	for i := 0; i < flood.Nodes; i++ {
		n, err := admin.CoreV1().Nodes().Get(ctx, testenv.FloodNodeName(i), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range n.Status.Conditions {
			// Renewals stop with the flood: a node may go Unknown after.
			if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue && c.LastTransitionTime.Time.After(start) && c.LastTransitionTime.Time.Before(ended) {
				t.Errorf("node %s went %s at %v, %v into the flood: %s", n.Name, c.Status, c.LastTransitionTime.Time, c.LastTransitionTime.Time.Sub(start), c.Message)
			}
		}
	}
}
