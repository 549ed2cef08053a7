package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestServiceHealthCheckNodePort runs a real pod behind a LoadBalancer
// Service with externalTrafficPolicy: Local on a node whose NodePorts
// are limited to 127.0.0.1 (--nodeport-addresses): the health-check node
// port answers kube-proxy's 200 with the pod ready and 503 once it is
// gone, and the NodePort answers at 127.0.0.1 but not at 127.0.0.2,
// another local address outside the CIDR.
func TestServiceHealthCheckNodePort(t *testing.T) {
	e := startPodEnv(t, "--nodeport-addresses=127.0.0.1/32")
	pod := e.create(t, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hc-web", Labels: map[string]string{"app": "hc-web"}},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr[int64](1), Containers: []corev1.Container{{Name: "httpd",
			Command: sh("mkdir -p /www && echo served-by-$(hostname) > /www/index.html && exec httpd -f -p 8080 -h /www"),
			Ports:   []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/index.html", Port: intstr.FromString("http")}},
				PeriodSeconds: 1},
		}}},
	})
	svc, err := e.cs.CoreV1().Services("default").Create(t.Context(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "hc-web"},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Selector: map[string]string{"app": "hc-web"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hcPort, nodePort := svc.Spec.HealthCheckNodePort, svc.Spec.Ports[0].NodePort
	if hcPort == 0 || nodePort == 0 {
		t.Fatalf("healthCheckNodePort %d, nodePort %d: want both allocated", hcPort, nodePort)
	}
	e.waitPod(t, pod.Name, 60*time.Second, "Ready", running)

	hc := fmt.Sprintf("http://127.0.0.1:%d/healthz", hcPort)
	waitHealth := func(wantCode, wantLocal int) {
		t.Helper()
		var last string
		deadline := time.Now().Add(30 * time.Second)
		for !func() bool {
			code, body, err := getLocal(hc)
			if err != nil {
				last = err.Error()
				return false
			}
			last = fmt.Sprintf("%d %s", code, body)
			var ans struct {
				Service             struct{ Namespace, Name string } `json:"service"`
				LocalEndpoints      int                              `json:"localEndpoints"`
				ServiceProxyHealthy bool                             `json:"serviceProxyHealthy"`
			}
			if err := json.Unmarshal(body, &ans); err != nil {
				last += ": " + err.Error()
				return false
			}
			return code == wantCode && ans.LocalEndpoints == wantLocal && ans.ServiceProxyHealthy &&
				ans.Service.Namespace == "default" && ans.Service.Name == "hc-web"
		}() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: want %d with %d local endpoints; last answer %s", hc, wantCode, wantLocal, last)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	waitHealth(http.StatusOK, 1)

	// The NodePort is served at 127.0.0.1 only.
	code, body, err := getLocal(fmt.Sprintf("http://127.0.0.1:%d/index.html", nodePort))
	if err != nil || code != http.StatusOK || string(body) != "served-by-hc-web\n" {
		t.Errorf("NodePort at 127.0.0.1: %d %q %v", code, body, err)
	}
	for _, port := range []int32{nodePort, hcPort} {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.2:%d", port), 2*time.Second)
		if err == nil {
			c.Close()
			t.Errorf("127.0.0.2:%d, outside --nodeport-addresses, connected", port)
		} else if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("127.0.0.2:%d: %v, want connection refused", port, err)
		}
	}

	// No pod on this node: the load balancer should skip it.
	if err := e.cs.CoreV1().Pods("default").Delete(t.Context(), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitHealth(http.StatusServiceUnavailable, 0)
}

// getLocal GETs a loopback URL, with no proxy.
func getLocal(url string) (int, []byte, error) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}
