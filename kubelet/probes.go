package kubelet

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"

	"bonsai.dev/bonsai/kubelet/cri"
)

// probeState is one container instance's probe results.
type probeState struct {
	id      string
	created time.Time
	started bool // startup probe passed (or none)
	ready   bool
	// consecutive results per probe kind
	succ, fail map[string]int
	next       map[string]time.Time
}

func newProbeState(id string) *probeState {
	return &probeState{id: id, created: time.Now(), succ: map[string]int{}, fail: map[string]int{}, next: map[string]time.Time{}}
}

// runProbes runs the probes that are due for each running container and
// acts on failures: a failed liveness or startup probe kills the
// container (the restart policy then decides), readiness flips Ready.
// It returns when the next probe is due.
func (w *podWorker) runProbes(ctx context.Context, pod *corev1.Pod, inst map[string][]cri.ContainerStatus) time.Duration {
	next := resyncPeriod
	for _, c := range probedContainers(pod) {
		cs := inst[c.Name]
		if len(cs) == 0 || cs[0].State != cri.ContainerRunning {
			continue
		}
		ps := w.probes[c.Name]
		if ps == nil || ps.id != cs[0].ID {
			// A container found running after a restart of bonsai: it
			// was started and ready before, so start from there rather
			// than flapping Ready.
			ps = newProbeState(cs[0].ID)
			ps.created = cs[0].StartedAt
			ps.started = true
			ps.ready = c.ReadinessProbe == nil || (pod.Status.ContainerStatuses != nil && wasReady(pod, c.Name))
			w.probes[c.Name] = ps
		}
		if c.StartupProbe == nil {
			ps.started = true
		}
		for _, kind := range []string{"Startup", "Liveness", "Readiness"} {
			p := probeOf(c, kind)
			if p == nil || (kind == "Startup" && ps.started) || (kind != "Startup" && !ps.started) {
				continue
			}
			due := ps.next[kind]
			if due.IsZero() {
				due = ps.created.Add(time.Duration(p.InitialDelaySeconds) * time.Second)
			}
			if wait := time.Until(due); wait > 0 {
				next = min(next, wait)
				continue
			}
			ok, msg := w.probe(ctx, pod, c, cs[0].ID, p)
			period := time.Duration(max(p.PeriodSeconds, 1)) * time.Second
			ps.next[kind] = time.Now().Add(period)
			next = min(next, period)
			if ok {
				ps.succ[kind]++
				ps.fail[kind] = 0
			} else {
				ps.fail[kind]++
				ps.succ[kind] = 0
				w.event(ctx, pod, c.Name, corev1.EventTypeWarning, "Unhealthy", kind+" probe failed: "+msg)
			}
			success, failure := int(max(p.SuccessThreshold, 1)), int(max(p.FailureThreshold, 1))
			switch kind {
			case "Startup":
				if ps.succ[kind] >= success {
					ps.started = true
				} else if ps.fail[kind] >= failure {
					w.killForProbe(ctx, pod, c, cs[0].ID, "startup")
				}
			case "Liveness":
				if ps.fail[kind] >= failure {
					w.killForProbe(ctx, pod, c, cs[0].ID, "liveness")
				}
			case "Readiness":
				if ps.succ[kind] >= success {
					ps.ready = true
				} else if ps.fail[kind] >= failure {
					ps.ready = false
				}
			}
		}
	}
	return next
}

func wasReady(pod *corev1.Pod, name string) bool {
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name == name {
			return s.Ready
		}
	}
	return false
}

func probeOf(c *corev1.Container, kind string) *corev1.Probe {
	switch kind {
	case "Startup":
		return c.StartupProbe
	case "Liveness":
		return c.LivenessProbe
	}
	return c.ReadinessProbe
}

func (w *podWorker) killForProbe(ctx context.Context, pod *corev1.Pod, c *corev1.Container, id, kind string) {
	w.event(ctx, pod, c.Name, corev1.EventTypeNormal, "Killing", fmt.Sprintf("Container %s failed %s probe, will be restarted", c.Name, kind))
	grace := containerGrace(pod)
	var p *corev1.Probe
	if kind == "liveness" {
		p = c.LivenessProbe
	} else {
		p = c.StartupProbe
	}
	if p != nil && p.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*p.TerminationGracePeriodSeconds) * time.Second
	}
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		hctx, cancel := context.WithTimeout(ctx, grace)
		w.runHandler(hctx, pod, c, id, c.Lifecycle.PreStop)
		cancel()
	}
	w.m.rt.StopContainer(ctx, id, grace)
	delete(w.probes, c.Name)
}

// probe runs one probe once.
func (w *podWorker) probe(ctx context.Context, pod *corev1.Pod, c *corev1.Container, id string, p *corev1.Probe) (bool, string) {
	timeout := time.Duration(max(p.TimeoutSeconds, 1)) * time.Second
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case p.Exec != nil:
		out, errOut, code, err := w.m.rt.ExecSync(pctx, id, p.Exec.Command, timeout)
		if err != nil {
			if pctx.Err() != nil {
				return false, fmt.Sprintf("command timed out: %q timed out after %s", strings.Join(p.Exec.Command, " "), timeout)
			}
			return false, err.Error()
		}
		if code != 0 {
			return false, strings.TrimSpace(string(out) + string(errOut))
		}
		return true, ""
	case p.HTTPGet != nil:
		url, err := w.httpURL(pod, c, p.HTTPGet)
		if err != nil {
			return false, err.Error()
		}
		req, _ := http.NewRequestWithContext(pctx, http.MethodGet, url, nil)
		req.Header.Set("User-Agent", "kube-probe/"+strings.TrimPrefix(w.m.cfg.KubeletVersion, "v"))
		req.Header.Set("Accept", "*/*")
		for _, h := range p.HTTPGet.HTTPHeaders {
			req.Header.Set(h.Name, h.Value)
		}
		resp, err := probeClient.Do(req)
		if err != nil {
			return false, fmt.Sprintf("Get %q: %v", url, err)
		}
		resp.Body.Close()
		if resp.StatusCode >= 200 && resp.StatusCode < 400 {
			return true, ""
		}
		return false, fmt.Sprintf("HTTP probe failed with statuscode: %d", resp.StatusCode)
	case p.TCPSocket != nil:
		port, err := resolvePort(p.TCPSocket.Port, c)
		if err != nil {
			return false, err.Error()
		}
		addr := net.JoinHostPort(w.hostFor(p.TCPSocket.Host), strconv.Itoa(port))
		conn, err := (&net.Dialer{}).DialContext(pctx, "tcp", addr)
		if err != nil {
			return false, fmt.Sprintf("dial tcp %s: %v", addr, err)
		}
		conn.Close()
		return true, ""
	case p.GRPC != nil:
		addr := net.JoinHostPort(w.hostFor(""), strconv.Itoa(int(p.GRPC.Port)))
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return false, err.Error()
		}
		defer conn.Close()
		service := ""
		if p.GRPC.Service != nil {
			service = *p.GRPC.Service
		}
		resp, err := healthpb.NewHealthClient(conn).Check(pctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			return false, fmt.Sprintf("timeout: failed to connect service %q within %s: %v", addr, timeout, err)
		}
		if resp.Status != healthpb.HealthCheckResponse_SERVING {
			return false, fmt.Sprintf("service unhealthy (responded with %q)", resp.Status)
		}
		return true, ""
	}
	return false, "probe has no action"
}

// probeClient follows redirects to the same host only and never verifies
// certificates, as the kubelet's prober.
var probeClient = &http.Client{
	Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true},
	CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return fmt.Errorf("stopped after 10 redirects")
		}
		if req.URL.Hostname() != via[0].URL.Hostname() {
			return http.ErrUseLastResponse
		}
		return nil
	},
}
