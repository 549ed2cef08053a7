package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"bonsai.dev/bonsai/apiserver/pki"
)

// Webhook is the admission webhook server of e2e/testdata/webhook, built
// from the module and running on 127.0.0.1 with a CA of its own.
type Webhook struct {
	Port int
	// CABundle is the PEM of the CA that signed its certificate, which
	// names 127.0.0.1 and the DNS names StartWebhook was given.
	CABundle []byte
	cmd      *exec.Cmd
	done     chan struct{}
}

// URL is the webhook's URL for path ("/mutate", "/validate", "/allow").
func (w *Webhook) URL(path string) string {
	return "https://127.0.0.1:" + strconv.Itoa(w.Port) + path
}

// BuildWebhook builds e2e/testdata/webhook, statically, into dir.
func BuildWebhook(dir string) (string, error) {
	goBin, err := goTool()
	if err != nil {
		return "", err
	}
	out, err := exec.Command(goBin, "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside the bonsai module: the webhook server is built from it")
	}
	bin := filepath.Join(dir, "webhook")
	build := exec.Command(goBin, "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./e2e/testdata/webhook")
	build.Dir = filepath.Dir(gomod)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build e2e/testdata/webhook: %v\n%s", err, b)
	}
	return bin, nil
}

// WebhookCerts makes a CA and a serving certificate for 127.0.0.1 and
// dnsNames in dir (pki's file names: ca.crt, serving.crt, serving.key).
func WebhookCerts(dir string, dnsNames ...string) (*pki.Certs, error) {
	return pki.Ensure(dir, pki.SANs{DNSNames: dnsNames, IPs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}})
}

// StartWebhook builds and starts the webhook server in dir; dnsNames are
// the Service names (name.namespace.svc) it will be reached by.
func StartWebhook(dir string, dnsNames ...string) (*Webhook, error) {
	bin, err := BuildWebhook(dir)
	if err != nil {
		return nil, err
	}
	pkiDir := filepath.Join(dir, "webhook-pki")
	certs, err := WebhookCerts(pkiDir, dnsNames...)
	if err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		w := &Webhook{Port: port, CABundle: certs.CA.CertPEM, done: make(chan struct{})}
		w.cmd = exec.Command(bin, "-listen", "127.0.0.1:"+strconv.Itoa(port),
			"-cert", filepath.Join(pkiDir, pki.ServingCertFile), "-key", filepath.Join(pkiDir, pki.ServingKeyFile))
		var stderr strings.Builder
		w.cmd.Stderr = &stderr
		stdout, err := w.cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := w.cmd.Start(); err != nil {
			return nil, err
		}
		ready := make(chan bool, 1)
		go func() {
			sc := bufio.NewScanner(stdout)
			ready <- sc.Scan() && sc.Text() == "listening"
			for sc.Scan() {
			}
		}()
		go func() { w.cmd.Wait(); close(w.done) }()
		select {
		case ok := <-ready:
			if ok {
				return w, nil
			}
		case <-time.After(30 * time.Second):
		}
		w.Stop()
		if attempt < 2 && strings.Contains(stderr.String(), "address already in use") {
			continue
		}
		return nil, fmt.Errorf("webhook server did not start: %s", stderr.String())
	}
}

// Stop kills the server and waits for it.
func (w *Webhook) Stop() {
	select {
	case <-w.done:
		return
	default:
	}
	w.cmd.Process.Kill()
	<-w.done
}
