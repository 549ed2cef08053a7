package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
)

// TestServiceHealthCheck: the count is of this node's ready endpoints,
// each address once across the Service's ports; terminating ones, even
// serving, fail the check as under kube-proxy.
func TestServiceHealthCheck(t *testing.T) {
	local := func(a string, ready, terminating bool) endpoint {
		return endpoint{addr: netip.MustParseAddrPort(a), local: true, ready: ready, serving: true, terminating: terminating}
	}
	ports := []servicePort{
		{endpoints: []endpoint{local("10.42.0.5:80", true, false), local("10.42.0.6:80", false, true),
			{addr: netip.MustParseAddrPort("10.42.1.7:80"), ready: true}}},
		{endpoints: []endpoint{local("10.42.0.5:443", true, false), local("10.42.0.8:443", true, false)}},
	}
	tests := []struct {
		name  string
		port  int32
		ports []servicePort
		want  healthCheck
	}{
		{"two local ready addresses", 30999, ports, healthCheck{port: 30999, local: 2}},
		{"local terminating and remote ready", 30999, []servicePort{{endpoints: ports[0].endpoints[1:]}}, healthCheck{port: 30999}},
		{"no port", 0, ports, healthCheck{}},
		{"no endpoints", 30999, []servicePort{{}}, healthCheck{port: 30999}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := serviceHealthCheck(tt.port, tt.ports); got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// healthAnswer is kube-proxy's health-check body.
type healthAnswer struct {
	Service struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"service"`
	LocalEndpoints      int  `json:"localEndpoints"`
	ServiceProxyHealthy bool `json:"serviceProxyHealthy"`
}

// getHealth asks addr's /healthz from ns.
func getHealth(ns netns.NsHandle, addr string) (int, healthAnswer, error) {
	var ans healthAnswer
	var code int
	// The transport dials on goroutines of its own: each dial enters
	// ns itself.
	dial := func(ctx context.Context, network, a string) (c net.Conn, err error) {
		err = inNS(ns, func() error {
			c, err = (&net.Dialer{}).DialContext(ctx, network, a)
			return err
		})
		return c, err
	}
	err := func() error {
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, DialContext: dial, Proxy: nil}}
		resp, err := c.Get("http://" + addr + "/healthz")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		code = resp.StatusCode
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			b, _ := io.ReadAll(resp.Body)
			return fmt.Errorf("%d Content-Type %q: %q %v", resp.StatusCode, ct, b, resp.Header)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		return json.Unmarshal(b, &ans)
	}()
	return code, ans, err
}

// TestHealthCheckNodePort serves an externalTrafficPolicy: Local
// Service's health-check node port in the node's namespace and asks it
// from the client's: 200 with local ready endpoints, 503 without, and
// nothing once the Service no longer needs it.
func TestHealthCheckNodePort(t *testing.T) {
	n := newTestNetwork(t, 1)
	p := newTestProxier(t, n.node)
	lb := newService("web", "10.96.0.10", 80, nodePort(30080, corev1.ServiceExternalTrafficPolicyLocal), func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.HealthCheckNodePort = 30999
	})
	p.set(t, lb, newSlice("web", "web-1", 8080, readyEP(n.endpointIPs[0].String(), testNode), readyEP("10.200.1.7", "node-b")))
	hc := nodeClientIP + ":30999"
	check := func(wantCode, wantLocal int, wantHealthy bool) {
		t.Helper()
		code, ans, err := getHealth(n.client, hc)
		if err != nil {
			t.Fatalf("GET %s/healthz: %v", hc, err)
		}
		want := healthAnswer{LocalEndpoints: wantLocal, ServiceProxyHealthy: wantHealthy}
		want.Service.Namespace, want.Service.Name = "default", "web"
		if code != wantCode || ans != want {
			t.Errorf("GET %s/healthz: %d %+v, want %d %+v", hc, code, ans, wantCode, want)
		}
	}
	check(http.StatusOK, 1, true)

	// Only another node's endpoint: the load balancer must skip us.
	p.set(t, newSlice("web", "web-1", 8080, readyEP("10.200.1.7", "node-b")))
	check(http.StatusServiceUnavailable, 0, true)
	p.set(t, newSlice("web", "web-1", 8080, readyEP(n.endpointIPs[0].String(), testNode)))
	check(http.StatusOK, 1, true)

	// A change the kernel has not taken for too long: unhealthy.
	p.mu.Lock()
	p.pendingSince = time.Now().Add(-2 * healthTimeout)
	p.mu.Unlock()
	check(http.StatusServiceUnavailable, 1, false)
	p.mu.Lock()
	p.pendingSince = time.Time{}
	p.mu.Unlock()

	// A new port: the old one closes, the new one answers.
	lb.Spec.HealthCheckNodePort = 30998
	p.set(t, lb)
	if err := refused(n.client, hc); err != nil {
		t.Errorf("old port: %v", err)
	}
	hc = nodeClientIP + ":30998"
	check(http.StatusOK, 1, true)

	// Cluster policy: no health check.
	p.set(t, newService("web", "10.96.0.10", 80, nodePort(30080, corev1.ServiceExternalTrafficPolicyCluster), func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
	}))
	if err := refused(n.client, hc); err != nil {
		t.Errorf("after externalTrafficPolicy: Cluster: %v", err)
	}

	// A full sync serves them again from scratch.
	p.set(t, lb)
	p.needFull = true
	if err := p.sync(); err != nil {
		t.Fatal(err)
	}
	check(http.StatusOK, 1, true)
}

// TestNodePortAddresses: with NodePortAddresses, NodePorts and
// health-check ports answer on the node's addresses in them alone.
func TestNodePortAddresses(t *testing.T) {
	n := newTestNetwork(t, 1)
	n.serve(t, 0, 8080, "ep0")
	p := newTestProxier(t, n.node, func(c *Config) {
		c.NodePortAddresses = []netip.Prefix{netip.MustParsePrefix("10.201.0.0/24")}
	})
	lb := newService("web", "10.96.0.10", 80, nodePort(30080, corev1.ServiceExternalTrafficPolicyLocal), func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.HealthCheckNodePort = 30999
	})
	p.set(t, lb, newSlice("web", "web-1", 8080, readyEP(n.endpointIPs[0].String(), testNode)))
	checkKernelView(t, p)
	if name, _, err := dial(n.client, nodeClientIP+":30080"); err != nil || name != "ep0" {
		t.Errorf("NodePort at %s, inside the CIDRs: answer %q, err %v", nodeClientIP, name, err)
	}
	if code, _, err := getHealth(n.client, nodeClientIP+":30999"); err != nil || code != http.StatusOK {
		t.Errorf("health check at %s: %d, %v", nodeClientIP, code, err)
	}
	// The node's bridge address and 127.0.0.1 are outside: nothing
	// there takes the port.
	for _, a := range []string{nodeBridgeIP + ":30080", nodeBridgeIP + ":30999"} {
		if err := refused(n.client, a); err != nil {
			t.Errorf("%s, outside the CIDRs: %v", a, err)
		}
	}
	for _, a := range []string{"127.0.0.1:30080", "127.0.0.1:30999"} {
		if err := refused(n.node, a); err != nil {
			t.Errorf("%s from the node, outside the CIDRs: %v", a, err)
		}
	}
}

// refused checks that a connection from ns to addr is refused.
func refused(ns netns.NsHandle, addr string) error {
	return inNS(ns, func() error {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err == nil {
			c.Close()
			return fmt.Errorf("connected to %s", addr)
		}
		if !isRefused(err) {
			return fmt.Errorf("%w, want connection refused", err)
		}
		return nil
	})
}
