package deployment

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"bonsai.dev/bonsai/testsupport/testenv"
)

// kubectl runs the real kubectl (the e2e suite's: on PATH, or built)
// against the environment's API server over HTTP.
type kubectl struct {
	t      *testing.T
	path   string
	server string
}

func (e *env) kubectl() *kubectl {
	e.T.Helper()
	ks := testenv.Kubectls(e.T)
	srv := httptest.NewServer(e.Server.Handler())
	e.T.Cleanup(srv.Close)
	return &kubectl{t: e.T.(*testing.T), path: ks[len(ks)-1].Path, server: srv.URL}
}

// run returns kubectl's output and whether it exited 0.
func (k *kubectl) run(args ...string) (string, bool) {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, k.path, append([]string{"--server", k.server, "-n", ns}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+os.DevNull)
	out, err := cmd.CombinedOutput()
	k.t.Logf("kubectl %s:\n%s", strings.Join(args, " "), out)
	return string(out), err == nil
}

func (k *kubectl) must(args ...string) string {
	k.t.Helper()
	out, ok := k.run(args...)
	if !ok {
		k.t.Fatalf("kubectl %s failed: %s", strings.Join(args, " "), out)
	}
	return out
}

// kubectl rollout status, history, undo, pause, resume, restart and
// kubectl scale work as on Kubernetes: they read what the controller
// writes.
func TestKubectlRollout(t *testing.T) {
	e := start(t, 2)
	k := e.kubectl()
	d := newDeployment("web", 2)
	d.Annotations = map[string]string{"kubernetes.io/change-cause": "first"}
	e.create(d)
	if out := k.must("rollout", "status", "deployment/web", "--timeout=60s"); !strings.Contains(out, `deployment "web" successfully rolled out`) {
		t.Fatalf("rollout status: %s", out)
	}
	k.must("set", "image", "deployment/web", "c=busybox:2")
	k.must("annotate", "deployment/web", "kubernetes.io/change-cause=second", "--overwrite")
	k.must("rollout", "status", "deployment/web", "--timeout=60s")
	history := func() []string {
		return regexp.MustCompile(`(?m)^([0-9]+)\s+(\S+)\s*$`).FindAllString(k.must("rollout", "history", "deployment/web"), -1)
	}
	if got, want := history(), []string{"1         first", "2         second"}; !equalFields(got, want) {
		t.Errorf("rollout history %q, want %q", got, want)
	}
	k.must("rollout", "undo", "deployment/web")
	k.must("rollout", "status", "deployment/web", "--timeout=60s")
	d = e.get("web")
	if rss := e.replicaSets(d); len(rss) != 2 || revision(&rss[1]) != 3 || rss[1].Spec.Template.Spec.Containers[0].Image != "busybox:1" {
		t.Fatalf("after undo: %s", describe(rss))
	}
	// Revision 1 became 3.
	if got, want := history(), []string{"2 second", "3 first"}; !equalFields(got, want) {
		t.Errorf("rollout history after undo %q, want %q", got, want)
	}
	if out := k.must("rollout", "history", "deployment/web", "--revision=3"); !strings.Contains(out, "busybox:1") {
		t.Errorf("history of revision 3: %s", out)
	}

	k.must("rollout", "pause", "deployment/web")
	k.must("set", "image", "deployment/web", "c=busybox:3")
	k.must("scale", "deployment/web", "--replicas=3")
	e.waitCondition("web", appsv1.DeploymentProgressing, "Unknown", reasonPaused, 10*time.Second)
	if _, ok := k.run("rollout", "undo", "deployment/web"); ok {
		t.Error("rollout undo of a paused deployment succeeded")
	}
	k.must("rollout", "resume", "deployment/web")
	k.must("rollout", "status", "deployment/web", "--timeout=60s")
	d = e.get("web")
	if *d.Spec.Replicas != 3 || d.Status.UpdatedReplicas != 3 || d.Spec.Template.Spec.Containers[0].Image != "busybox:3" {
		t.Fatalf("after resume: %+v", d.Status)
	}
	k.must("rollout", "restart", "deployment/web")
	k.must("rollout", "status", "deployment/web", "--timeout=60s")
	if rss := e.replicaSets(e.get("web")); revision(&rss[len(rss)-1]) != 5 {
		t.Fatalf("after restart: %s", describe(rss))
	}
}

// equalFields compares lines word by word, whatever the spacing.
func equalFields(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if strings.Join(strings.Fields(got[i]), " ") != strings.Join(strings.Fields(want[i]), " ") {
			return false
		}
	}
	return true
}

// kubectl rollout status fails, with upstream's words, once a rollout is
// past its progress deadline.
func TestKubectlRolloutStatusDeadline(t *testing.T) {
	e := start(t, 1)
	k := e.kubectl()
	d := newDeployment("web", 1)
	d.Spec.ProgressDeadlineSeconds = ptr[int32](2)
	neverReady(&d.Spec.Template)
	e.create(d)
	out, ok := k.run("rollout", "status", "deployment/web", "--timeout=60s")
	if ok || !strings.Contains(out, `deployment "web" exceeded its progress deadline`) {
		t.Fatalf("rollout status of a stuck rollout: ok %v, %s", ok, out)
	}
}
