package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// snapshotObjects is the figure: a snapshot of 10,000 objects
// within 2 s, whatever -quick says.
const (
	snapshotObjects   = 10000
	snapshotValueSize = 1000
	snapshotRuns      = 3
)

type snapshotResults struct {
	save, sizeMB, restore *float64
}

// snapshotSuite fills a real server with 10,000 ConfigMaps and times
// `bonsai snapshot save` against it as a user runs it (a process that
// asks the running server), the file's size, and `bonsai snapshot
// restore` of that file into a new data dir.
func snapshotSuite(ctx context.Context, b *bench) ([]Row, error) {
	res := &snapshotResults{}
	rows := func() []Row { return snapshotRows(res) }
	bin, err := buildBonsai(ctx, b)
	if err != nil {
		return rows(), err
	}
	srv, stop, err := startSuiteServer(ctx, b, "snapshot-server")
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
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench-snapshot"}}, metav1.CreateOptions{}); err != nil {
		return rows(), err
	}
	b.logf("snapshot: creating %s ConfigMaps", fmtNum(snapshotObjects))
	if err := createMany(ctx, ac, "bench-snapshot", "cm", snapshotObjects, 32, snapshotValueSize); err != nil {
		return rows(), err
	}
	ac.closeAll()

	var saves []time.Duration
	var file string
	for i := range snapshotRuns {
		file = filepath.Join(b.dir, fmt.Sprintf("snapshot-%d", i))
		start := time.Now()
		if err := execCommand(ctx, bin, "snapshot", "save", file, "--data-dir", srv.dir).Run(); err != nil {
			return rows(), fmt.Errorf("bonsai snapshot save: %w", err)
		}
		saves = append(saves, time.Since(start))
		if i < snapshotRuns-1 {
			os.Remove(file)
		}
	}
	res.save = ms(percentile(saves, 0.5))
	st, err := os.Stat(file)
	if err != nil {
		return rows(), err
	}
	res.sizeMB = num(float64(st.Size()) / (1 << 20))
	stop()

	dir := filepath.Join(b.dir, "snapshot-restored")
	defer os.RemoveAll(dir)
	start := time.Now()
	if err := execCommand(ctx, bin, "snapshot", "restore", file, "--data-dir", dir).Run(); err != nil {
		return rows(), fmt.Errorf("bonsai snapshot restore: %w", err)
	}
	res.restore = ms(time.Since(start))
	return rows(), nil
}

func snapshotRows(r *snapshotResults) []Row {
	what := fmt.Sprintf("%s x %s KB ConfigMaps", fmtNum(snapshotObjects), fmtNum(snapshotValueSize/1000))
	return []Row{
		{Name: fmt.Sprintf("snapshot: save from the running server, %s (median of %d)", what, snapshotRuns), Unit: "ms", Bonsai: r.save, Target: atMost(2000, "ms")},
		{Name: "snapshot: file size, " + what, Unit: "MB", Bonsai: r.sizeMB},
		{Name: "snapshot: restore into a new data dir, " + what, Unit: "ms", Bonsai: r.restore},
	}
}
