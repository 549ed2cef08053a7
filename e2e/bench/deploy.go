package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// deployChanges is how many edits of a manifest the deploy suite times;
// -quick: fewer.
func deployChanges(quick bool) int {
	if quick {
		return 10
	}
	return 40
}

// deploySuite times a change to a file of --manifests-dir until the
// object it holds has the change: what the directory's poll interval
// (2 s) and an apply add up to.
func deploySuite(ctx context.Context, b *bench) ([]Row, error) {
	var p50, p99 *float64
	n := deployChanges(b.quick)
	rows := func() []Row {
		return []Row{
			{Name: fmt.Sprintf("manifest change → applied p50 (%d edits)", n), Unit: "ms", Bonsai: p50},
			{Name: fmt.Sprintf("manifest change → applied p99 (%d edits)", n), Unit: "ms", Bonsai: p99, Target: atMost(3000, "ms")},
		}
	}
	mdir := filepath.Join(b.dir, "deploy-manifests")
	if err := os.MkdirAll(mdir, 0o700); err != nil {
		return rows(), err
	}
	defer os.RemoveAll(mdir)
	srv, stop, err := startSuiteServer(ctx, b, "deploy-server", "--manifests-dir", mdir)
	if err != nil {
		return rows(), err
	}
	defer stop()
	ac := &apiClients{kubeconfig: filepath.Join(srv.dir, "kubeconfig.yaml")}
	defer ac.closeAll()
	admin, err := ac.client()
	if err != nil {
		return rows(), err
	}
	var took []time.Duration
	for i := range n {
		want := fmt.Sprint(i)
		doc := fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bench-deploy, namespace: default}\ndata: {edit: %q}\n", want)
		tmp := filepath.Join(b.dir, "deploy.yaml.tmp")
		if err := os.WriteFile(tmp, []byte(doc), 0o600); err != nil {
			return rows(), err
		}
		start := time.Now()
		if err := os.Rename(tmp, filepath.Join(mdir, "bench.yaml")); err != nil {
			return rows(), err
		}
		for {
			cm, err := admin.CoreV1().ConfigMaps("default").Get(ctx, "bench-deploy", metav1.GetOptions{})
			if err == nil && cm.Data["edit"] == want {
				break
			}
			if time.Since(start) > 30*time.Second {
				return rows(), fmt.Errorf("edit %d of the manifest not applied within 30s (last error: %v); server log:\n%s", i, err, srv.logTail())
			}
			time.Sleep(10 * time.Millisecond)
		}
		took = append(took, time.Since(start))
		// Edits land at every phase of the poll interval.
		time.Sleep(time.Duration(i%7) * 300 * time.Millisecond)
	}
	p50, p99 = ms(percentile(took, 0.5)), ms(percentile(took, 0.99))
	return rows(), nil
}
