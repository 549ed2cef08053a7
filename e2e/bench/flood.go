package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"bonsai.dev/bonsai/testsupport/testenv"
)

// floodSuite is the overload row of the request limits: 200 client-go
// clients create ConfigMaps as fast as they can while 100 nodes, each on
// its own TLS connection with its own node certificate, renew their
// Leases every second. The renewals' latency is what the nodes' own
// seats and the workload level's queue protect.
func floodSuite(ctx context.Context, b *bench) ([]Row, error) {
	var p50, p99, failed, creates, tooMany *float64
	rows := func() []Row {
		return []Row{
			{Name: "flood: Lease renewal p50, 100 nodes under 200 creating clients", Unit: "ms", Bonsai: p50},
			{Name: "flood: Lease renewal p99, 100 nodes under 200 creating clients", Unit: "ms", Bonsai: p99, Target: atMost(1000, "ms")},
			{Name: "flood: Lease renewals failed", Unit: "renewals", Bonsai: failed, Target: atMost(0, "renewals")},
			{Name: "flood: ConfigMap creates/s of the 200 clients meanwhile", Unit: "creates/s", Bonsai: creates},
			{Name: "flood: creates refused with 429", Unit: "requests", Bonsai: tooMany},
		}
	}
	tokens := filepath.Join(b.dir, "flood-tokens.csv")
	if err := os.WriteFile(tokens, []byte("flood-token,flood,1001\n"), 0o600); err != nil {
		return rows(), err
	}
	srv, stop, err := startSuiteServer(ctx, b, "flood", "--token-file", tokens)
	if err != nil {
		return rows(), err
	}
	defer stop()
	cfg, err := srv.restConfig("bonsai-bench")
	if err != nil {
		return rows(), err
	}
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return rows(), err
	}
	if _, err := admin.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "flood-edit"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "flood"}}}, metav1.CreateOptions{}); err != nil {
		return rows(), err
	}
	d := 30 * time.Second
	if b.quick {
		d = 10 * time.Second
	}
	b.logf("flood: 100 nodes renewing every second, 200 clients creating, %v", d)
	res, err := testenv.Flood{DataDir: srv.dir, Nodes: 100, Users: 200, RenewEvery: time.Second, Duration: d,
		UserToken: "flood-token", Namespace: "default"}.Run(ctx)
	if err != nil {
		return rows(), err
	}
	if res.FirstFailure != nil {
		b.logf("flood: first failed renewal: %v", res.FirstFailure)
	}
	q50, err := testenv.Percentile(res.Renewals, 50)
	if err != nil {
		return rows(), fmt.Errorf("flood: %w", err)
	}
	q99, _ := testenv.Percentile(res.Renewals, 99)
	p50, p99 = ms(q50), ms(q99)
	failed, tooMany = num(float64(res.RenewFailures)), num(float64(res.TooMany))
	creates = num(float64(res.Created) / d.Seconds())
	return rows(), nil
}
