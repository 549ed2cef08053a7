package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"bonsai.dev/bonsai/testsupport/testenv"
)

// ingressEnv is a pod env whose built-in Ingress controller serves on
// free ports of 127.0.0.1, with a busybox httpd pod behind each of the
// Services the reference's examples name, each answering its own name.
type ingressEnv struct {
	*podEnv
	k                   *kubectlRunner
	httpPort, httpsPort int
	curl                string
}

// ingressServices are the Services of the examples and their ports (all
// to the pod's 8080).
var ingressServices = map[string][]int32{
	"test":     {80},
	"service1": {80, 4200},
	"service2": {80, 8080},
	"service3": {80},
}

func startIngressEnv(t *testing.T) *ingressEnv {
	curl, err := testenv.LookPath("curl")
	testenv.Require(t, err == nil, "curl (Debian package curl): %v", err)
	kcs := testenv.Kubectls(t)
	httpPort, httpsPort := freePort(t), freePort(t)
	e := &ingressEnv{podEnv: startPodEnv(t, fmt.Sprintf("--ingress-http-port=%d", httpPort), fmt.Sprintf("--ingress-https-port=%d", httpsPort)),
		httpPort: httpPort, httpsPort: httpsPort, curl: curl}
	e.k = &kubectlRunner{t: t, bin: kcs[len(kcs)-1].Path, kubeconfig: filepath.Join(e.s.dataDir, "kubeconfig.yaml"), cacheDir: t.TempDir()}
	ctx := t.Context()
	for name, ports := range ingressServices {
		e.create(t, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "httpd",
				// Every path the examples ask for answers the name.
				Command: sh(fmt.Sprintf("mkdir -p /www && for f in index.html foo bar testpath; do echo %s > /www/$f; done && exec httpd -f -p 8080 -h /www", name)),
				Ports:   []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/index.html", Port: intstr.FromString("http")}},
					PeriodSeconds: 1},
			}}},
		})
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": name}}}
		for _, p := range ports {
			svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: fmt.Sprintf("p%d", p), Port: p, TargetPort: intstr.FromInt32(8080)})
		}
		if _, err := e.cs.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for name := range ingressServices {
		e.waitPod(t, name, 60*time.Second, "Ready", podReady)
	}
	return e
}

// get curls url with host resolved to 127.0.0.1, and returns "<code>
// <http version> <body>" (the body trimmed).
func (e *ingressEnv) get(host string, port int, path string, extra ...string) string {
	e.t.Helper()
	scheme := "http"
	if port == e.httpsPort {
		scheme = "https"
	}
	args := append([]string{"-sS", "--max-time", "5", "--resolve", fmt.Sprintf("%s:%d:127.0.0.1", host, port),
		"-w", "\n%{http_code} %{http_version}"}, extra...)
	args = append(args, fmt.Sprintf("%s://%s:%d%s", scheme, host, port, path))
	out, err := exec.Command(e.curl, args...).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("curl: %v: %s", err, out)
	}
	s := strings.TrimSpace(string(out))
	i := strings.LastIndexByte(s, '\n')
	if i < 0 {
		return s
	}
	return s[i+1:] + " " + strings.TrimSpace(s[:i])
}

// expect waits (2 s at most: changes apply within 100 ms) until every
// host/path answers as wanted: "200 service1", or "404 ..." for the
// controller's own answers (prefixes of get's result without the
// version). It returns how long the first answer took to be right.
func (e *ingressEnv) expect(t *testing.T, port int, cases ...[3]string) time.Duration {
	t.Helper()
	start := time.Now()
	var first time.Duration
	for i, c := range cases {
		host, path, want := c[0], c[1], c[2]
		for {
			got := e.get(host, port, path)
			if f := strings.SplitN(got, " ", 3); len(f) == 3 && strings.HasPrefix(f[0]+" "+f[2], want) {
				break
			}
			if time.Since(start) > 2*time.Second {
				t.Fatalf("%s%s: %q, want %q", host, path, got, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if i == 0 {
			first = time.Since(start)
		}
	}
	return first
}

func (e *ingressEnv) apply(t *testing.T, manifest string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "ingress.yaml")
	if err := os.WriteFile(f, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	e.k.must("apply", "-f", f)
}

func TestIngress(t *testing.T) {
	e := startIngressEnv(t)
	ctx := t.Context()
	http, https := e.httpPort, e.httpsPort

	t.Run("class", func(t *testing.T) {
		out := e.k.must("get", "ingressclass", "bonsai", "-o", "jsonpath={.spec.controller} {.metadata.annotations.ingressclass\\.kubernetes\\.io/is-default-class}")
		if out != "bonsai.dev/ingress true" {
			t.Errorf("IngressClass bonsai: %q", out)
		}
	})

	// The reference's minimal-ingress, without its ingressClassName
	// (nginx-example, another controller's): the default class is bonsai.
	t.Run("minimal-ingress", func(t *testing.T) {
		e.apply(t, `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: minimal-ingress
  annotations:
    nginx.ingress.kubernetes.io/rewrite-target: /
spec:
  rules:
  - http:
      paths:
      - path: /testpath
        pathType: Prefix
        backend:
          service:
            name: test
            port:
              number: 80
`)
		e.expect(t, http, [3]string{"anything.example", "/testpath", "200 test"}, [3]string{"127.0.0.1", "/foo", "404 404 Not Found: no Ingress rule"})
		if out := e.k.must("get", "ingress", "minimal-ingress", "-o", "jsonpath={.spec.ingressClassName}"); out != "bonsai" {
			t.Errorf("ingressClassName %q, want bonsai (DefaultIngressClass)", out)
		}
		e.k.must("delete", "ingress", "minimal-ingress")
	})

	t.Run("test-ingress", func(t *testing.T) {
		e.apply(t, `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: test-ingress
spec:
  defaultBackend:
    service:
      name: test
      port:
        number: 80
`)
		e.expect(t, http, [3]string{"any.example", "/", "200 test"}, [3]string{"other.example", "/foo", "200 test"})
		var out string
		deadline := time.Now().Add(5 * time.Second)
		for {
			out = e.k.must("get", "ingress", "test-ingress")
			f := strings.Fields(strings.Split(out, "\n")[1])
			if len(f) == 6 && f[0] == "test-ingress" && f[1] == "bonsai" && f[2] == "*" && f[3] == "127.0.0.1" && f[4] == "80" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("kubectl get ingress:\n%s\nwant test-ingress bonsai * 127.0.0.1 80", out)
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("kubectl get ingress:\n%s", out)
		e.k.must("delete", "ingress", "test-ingress")
	})

	t.Run("simple-fanout-example", func(t *testing.T) {
		e.apply(t, `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: simple-fanout-example
spec:
  rules:
  - host: foo.bar.com
    http:
      paths:
      - path: /foo
        pathType: Prefix
        backend:
          service:
            name: service1
            port:
              number: 4200
      - path: /bar
        pathType: Prefix
        backend:
          service:
            name: service2
            port:
              number: 8080
`)
		e.expect(t, http, [3]string{"foo.bar.com", "/foo", "200 service1"}, [3]string{"foo.bar.com", "/bar", "200 service2"},
			[3]string{"foo.bar.com", "/testpath", "404 404 Not Found: no Ingress rule"}, [3]string{"bar.foo.com", "/foo", "404 404 Not Found"})
		e.k.must("delete", "ingress", "simple-fanout-example")
	})

	t.Run("name-virtual-host-ingress", func(t *testing.T) {
		e.apply(t, `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: name-virtual-host-ingress
spec:
  rules:
  - host: foo.bar.com
    http:
      paths:
      - pathType: Prefix
        path: "/"
        backend:
          service:
            name: service1
            port:
              number: 80
  - host: bar.foo.com
    http:
      paths:
      - pathType: Prefix
        path: "/"
        backend:
          service:
            name: service2
            port:
              number: 80
`)
		e.expect(t, http, [3]string{"foo.bar.com", "/", "200 service1"}, [3]string{"bar.foo.com", "/", "200 service2"},
			[3]string{"baz.foo.com", "/", "404 404 Not Found"})

		// The edit: a third host with kubectl replace, served at once.
		y := e.k.must("get", "ingress", "name-virtual-host-ingress", "-o", "yaml")
		y = strings.Replace(y, "  rules:\n", `  rules:
  - host: bar.baz.com
    http:
      paths:
      - backend:
          service:
            name: service2
            port:
              number: 80
        path: /foo
        pathType: Prefix
`, 1)
		f := filepath.Join(t.TempDir(), "edited.yaml")
		if err := os.WriteFile(f, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		e.k.must("replace", "-f", f)
		took := e.expect(t, http, [3]string{"bar.baz.com", "/foo", "200 service2"}, [3]string{"foo.bar.com", "/", "200 service1"})
		t.Logf("new host served %v after kubectl replace returned", took)
		if out := e.k.must("describe", "ingress", "name-virtual-host-ingress"); !strings.Contains(out, "bar.baz.com") || !strings.Contains(out, "foo.bar.com") {
			t.Errorf("describe:\n%s", out)
		}
		e.k.must("delete", "ingress", "name-virtual-host-ingress")
	})

	t.Run("name-virtual-host-ingress-no-third-host", func(t *testing.T) {
		e.apply(t, `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: name-virtual-host-ingress-no-third-host
spec:
  rules:
  - host: first.bar.com
    http:
      paths:
      - pathType: Prefix
        path: "/"
        backend:
          service:
            name: service1
            port:
              number: 80
  - host: second.bar.com
    http:
      paths:
      - pathType: Prefix
        path: "/"
        backend:
          service:
            name: service2
            port:
              number: 80
  - http:
      paths:
      - pathType: Prefix
        path: "/"
        backend:
          service:
            name: service3
            port:
              number: 80
`)
		e.expect(t, http, [3]string{"first.bar.com", "/", "200 service1"}, [3]string{"second.bar.com", "/", "200 service2"},
			[3]string{"third.bar.com", "/", "200 service3"}, [3]string{"127.0.0.1", "/", "200 service3"})
		e.k.must("delete", "ingress", "name-virtual-host-ingress-no-third-host")
	})

	t.Run("ingress-wildcard-host", func(t *testing.T) {
		e.apply(t, `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: ingress-wildcard-host
spec:
  rules:
  - host: "foo.bar.com"
    http:
      paths:
      - pathType: Prefix
        path: "/bar"
        backend:
          service:
            name: service1
            port:
              number: 80
  - host: "*.foo.com"
    http:
      paths:
      - pathType: Prefix
        path: "/foo"
        backend:
          service:
            name: service2
            port:
              number: 80
`)
		e.expect(t, http, [3]string{"foo.bar.com", "/bar", "200 service1"}, [3]string{"bar.foo.com", "/foo", "200 service2"},
			[3]string{"baz.bar.foo.com", "/foo", "404 404 Not Found"}, [3]string{"foo.com", "/foo", "404 404 Not Found"})
		e.k.must("delete", "ingress", "ingress-wildcard-host")
	})

	t.Run("tls-example-ingress", func(t *testing.T) {
		dir := t.TempDir()
		crt, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
		writeServingCert(t, "https-example.foo.com", crt, key)
		e.k.must("create", "secret", "tls", "testsecret-tls", "--cert", crt, "--key", key)
		e.apply(t, `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: tls-example-ingress
spec:
  tls:
  - hosts:
      - https-example.foo.com
    secretName: testsecret-tls
  rules:
  - host: https-example.foo.com
    http:
      paths:
      - path: /
        pathType: Prefix
        backend:
          service:
            name: service1
            port:
              number: 80
`)
		deadline := time.Now().Add(2 * time.Second)
		var got string
		for {
			// curl checks the certificate against the name.
			got = e.get("https-example.foo.com", https, "/", "--cacert", crt)
			if got == "200 2 service1" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("https://https-example.foo.com/: %q, want 200 over HTTP/2 from service1", got)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if got := e.get("https-example.foo.com", https, "/", "--cacert", crt, "--http1.1"); got != "200 1.1 service1" {
			t.Errorf("HTTP/1.1 over TLS: %q", got)
		}
		if got := e.get("https-example.foo.com", http, "/"); got != "200 1.1 service1" {
			t.Errorf("plain HTTP: %q", got)
		}
		e.k.must("delete", "ingress", "tls-example-ingress")
	})

	t.Run("bad ingress gets a warning", func(t *testing.T) {
		e.apply(t, `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: bad
spec:
  rules:
  - host: bad.example
    http:
      paths:
      - path: /
        pathType: Prefix
        backend:
          service:
            name: no-such-service
            port:
              number: 80
`)
		e.expect(t, http, [3]string{"bad.example", "/", "503 503 Service Unavailable: backend default/no-such-service:80 of Ingress default/bad: Service default/no-such-service not found"})
		deadline := time.Now().Add(5 * time.Second)
		for {
			evs, err := e.cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Ingress,involvedObject.name=bad"})
			if err == nil && len(evs.Items) > 0 && evs.Items[0].Reason == "ServiceNotFound" && evs.Items[0].Type == corev1.EventTypeWarning {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no Warning ServiceNotFound event on Ingress bad: %v %+v", err, evs)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// writeServingCert writes a self-signed certificate for host and its key.
func writeServingCert(t *testing.T, host, crtPath, keyPath string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(crtPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestIngressPortInUse: a taken port stops the start with the flag's
// name, before the data dir exists.
func TestIngressPortInUse(t *testing.T) {
	requireBinary(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	dataDir := filepath.Join(t.TempDir(), "data")
	code, stderr := runToExit(t, "server", "--data-dir", dataDir, "--https-listen-port", fmt.Sprint(freePort(t)), "--bind-address", "127.0.0.1",
		"--config", emptyConfig(t), "--runtime=simulated", "--kubelet-port", fmt.Sprint(freePort(t)),
		"--ingress-http-port", fmt.Sprint(port), "--ingress-https-port", fmt.Sprint(freePort(t)))
	want := fmt.Sprintf("bonsai: --ingress-http-port: port %d on 127.0.0.1 is already in use (--disable-ingress runs no Ingress controller)\n", port)
	if code == 0 || stderr != want {
		t.Errorf("exit %d, stderr %q; want %q", code, stderr, want)
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Errorf("data dir made (%v)", err)
	}
}
