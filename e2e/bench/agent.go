package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"bonsai.dev/bonsai/testsupport/testenv"
)

// agentJoins is how many fresh agents are timed from exec to Node Ready.
const agentJoins = 5

// agentSuite joins `bonsai agent` processes to a running server with a
// join token: exec to Node Ready (CA discovery, the CSR of kubelet TLS
// bootstrap approved and signed by the server, registration), and the
// idle agent's RSS. The agents run the simulated runtime: no containerd
// or pod network, so the RSS is the agent's own floor.
func agentSuite(ctx context.Context, b *bench) ([]Row, error) {
	var ready, rss, anon *float64
	row := func(name, unit string, v *float64, t *Target) Row {
		return Row{Name: "agent: " + name, Unit: unit, Bonsai: v, Target: t}
	}
	rows := func() []Row {
		return []Row{
			row(fmt.Sprintf("agent exec to Node Ready, server up (median of %d joins, simulated runtime)", agentJoins), "ms", ready, atMost(2000, "ms")),
			row("agent RSS idle, 0 pods (simulated runtime)", "MB", rss, atMost(30, "MB")),
			row("agent RssAnon idle, 0 pods (simulated runtime)", "MB", anon, nil),
		}
	}
	srv, stop, err := startSuiteServer(ctx, b, "agent")
	if err != nil {
		return rows(), err
	}
	defer stop()
	bin, err := buildBonsai(ctx, b)
	if err != nil {
		return rows(), err
	}
	out, err := execCommand(ctx, bin, "token", "create", "--data-dir", srv.dir).Output()
	if err != nil {
		return rows(), fmt.Errorf("bonsai token create: %v\n%s", err, out)
	}
	token := strings.TrimSpace(string(out))
	rc, err := srv.restConfig("bench-agent")
	if err != nil {
		return rows(), err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return rows(), err
	}
	cfgFile := filepath.Join(b.dir, "agent-empty-config.yaml")
	if err := os.WriteFile(cfgFile, nil, 0o600); err != nil {
		return rows(), err
	}
	var times []float64
	var last *bonsaiProc
	for i := range agentJoins {
		name := fmt.Sprintf("bench-agent-%d", i)
		dir := filepath.Join(b.dir, name)
		port, err := testenv.FreePort()
		if err != nil {
			return rows(), err
		}
		logf, err := os.Create(dir + ".log")
		if err != nil {
			return rows(), err
		}
		cmd := execCommand(ctx, bin, "agent", "--server", rc.Host, "--token", token, "--data-dir", dir, "--config", cfgFile,
			"--runtime=simulated", "--node-name", name, "--bind-address", "127.0.0.1", "--kubelet-port", strconv.Itoa(port),
			"--kubelet-root-dir", filepath.Join(dir, "kubelet"))
		cmd.Stdout, cmd.Stderr = logf, logf
		p := &bonsaiProc{cmd: cmd, dir: dir, log: logf.Name(), done: make(chan struct{})}
		start := time.Now()
		if err := cmd.Start(); err != nil {
			logf.Close()
			return rows(), err
		}
		go func() { cmd.Wait(); logf.Close(); close(p.done) }()
		b.onCleanup(p.stop)
		if err := waitReadyNode(ctx, cs, name, p, 30*time.Second); err != nil {
			return rows(), err
		}
		times = append(times, float64(time.Since(start))/float64(time.Millisecond))
		if last != nil {
			last.cmd.Process.Signal(syscall.SIGTERM)
		}
		last = p
	}
	ready = num(median(times))
	// Idle: past the start-up burst, the memory handed back to the OS
	// and the first status updates.
	if err := sleep(ctx, 15*time.Second); err != nil {
		return rows(), err
	}
	if rss, err = last.rssMB(); err != nil {
		return rows(), err
	}
	a, err := anonBytes(last.cmd.Process.Pid)
	if err != nil {
		return rows(), err
	}
	anon = num(float64(a) / (1 << 20))
	return rows(), nil
}

func waitReadyNode(ctx context.Context, cs kubernetes.Interface, name string, p *bonsaiProc, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return fmt.Errorf("agent %s exited:\n%s", name, p.logTail())
		default:
		}
		if n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err == nil {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					return nil
				}
			}
		}
		if err := sleep(ctx, 5*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("node %s not Ready within %v:\n%s", name, timeout, p.logTail())
}
