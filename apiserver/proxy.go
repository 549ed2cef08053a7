package apiserver

import (
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/proxy"
)

// serveProxy serves pods/proxy, services/proxy and nodes/proxy:
// /api/v1/namespaces/<ns>/pods/[<scheme>:]<name>[:<port>]/proxy/<path>,
// the same for services, whose port is a port's name or number, and
// /api/v1/nodes/[<scheme>:]<name>[:<port>]/proxy/<path>. Every method is
// passed through (authorized as the verb its method is, on the proxy
// subresource), as kube-apiserver does, to the pod's IP, to a ready
// endpoint of the service picked at random, or to the node: its kubelet
// API (with the API server's kubelet-client certificate) when no port or
// the kubelet's is named, else that port of the node's address. WebSocket
// and other upgrades are passed through too.
func (s *Server) serveProxy(w http.ResponseWriter, r *http.Request, ri requestInfo, res *resource) error {
	if res.namespaced && ri.namespace == "" {
		return notFoundPath()
	}
	scheme, name, port, ok := splitSchemeNamePort(ri.name)
	if !ok || (scheme != "" && scheme != "http" && scheme != "https") {
		what := "request"
		if res.gvr.Resource == "nodes" {
			what = "node request"
		}
		return apierrors.NewBadRequest(fmt.Sprintf("invalid %s %q", what, ri.name))
	}
	if scheme == "" {
		scheme = "http"
	}
	var host string
	transport := http.RoundTripper(proxyTransport())
	switch res.gvr {
	case schema.GroupVersionResource{Version: "v1", Resource: "pods"}:
		obj, _, err := s.getObject(r.Context(), res, ri.namespace, name)
		if err != nil {
			return err
		}
		pod := obj.(*corev1.Pod)
		if port == "" {
			// The first port a container declares, as kube-apiserver
			// picks it.
			for _, c := range pod.Spec.Containers {
				if len(c.Ports) > 0 {
					port = strconv.Itoa(int(c.Ports[0].ContainerPort))
					break
				}
			}
		}
		if pod.Status.PodIP == "" {
			return apierrors.NewServiceUnavailable(fmt.Sprintf("pod %s has no IP address yet", name))
		}
		host = pod.Status.PodIP
		if port != "" {
			host = net.JoinHostPort(host, port)
		}
	case schema.GroupVersionResource{Version: "v1", Resource: "services"}:
		var err error
		if host, err = s.serviceEndpoint(r, res, ri.namespace, name, port); err != nil {
			return err
		}
	case schema.GroupVersionResource{Version: "v1", Resource: "nodes"}:
		kubelet, err := s.kubeletHost(r.Context(), name)
		if errors.Is(err, errNoKubeletAPI) {
			return apierrors.NewServiceUnavailable(fmt.Sprintf("node %s is simulated and serves no kubelet API", name))
		}
		if err != nil {
			return err
		}
		nodeHost, kubeletPort, _ := net.SplitHostPort(kubelet)
		if port == "" || port == kubeletPort {
			scheme, host, transport = "https", kubelet, s.kubelet
		} else {
			host = net.JoinHostPort(nodeHost, port)
		}
	default:
		return methodNotSupported(res, ri.verb)
	}
	// An empty path is redirected to ".../proxy/" by the handler, as
	// kube-apiserver does.
	loc := &url.URL{Scheme: scheme, Host: host, Path: ri.proxyPath, RawQuery: r.URL.RawQuery}
	// Wrapped as upstream's: links in HTML answers and redirects are
	// rewritten to stay under the proxy path, CORS headers dropped.
	h := proxy.NewUpgradeAwareHandler(loc, transport, true, false, proxyResponder{})
	// The caller's credentials are for the API server, not for what runs
	// in the pod.
	r.Header.Del("Authorization")
	h.ServeHTTP(hijackWriter{w}, r)
	return nil
}

// serviceEndpoint picks a ready address of the service's Endpoints for
// the service port named (or numbered) port, as kube-apiserver does.
func (s *Server) serviceEndpoint(r *http.Request, res *resource, namespace, name, port string) (string, error) {
	obj, _, err := s.getObject(r.Context(), res, namespace, name)
	if err != nil {
		return "", err
	}
	svc := obj.(*corev1.Service)
	if n, err := strconv.Atoi(port); err == nil {
		found := false
		for _, p := range svc.Spec.Ports {
			if int(p.Port) == n {
				port, found = p.Name, true
				break
			}
		}
		if !found {
			return "", apierrors.NewServiceUnavailable(fmt.Sprintf("no service port %d found for service %q", n, name))
		}
	}
	epRes := s.lookup(schema.GroupVersionResource{Version: "v1", Resource: "endpoints"})
	if epRes == nil {
		return "", apierrors.NewServiceUnavailable(fmt.Sprintf("no endpoints available for service %q", name))
	}
	epObj, _, err := s.getObject(r.Context(), epRes, namespace, name)
	if apierrors.IsNotFound(err) {
		return "", apierrors.NewServiceUnavailable(fmt.Sprintf("no endpoints available for service %q", name))
	}
	if err != nil {
		return "", err
	}
	var hosts []string
	for _, ss := range epObj.(*corev1.Endpoints).Subsets {
		for _, p := range ss.Ports {
			if p.Name != port {
				continue
			}
			for _, a := range ss.Addresses {
				hosts = append(hosts, net.JoinHostPort(a.IP, strconv.Itoa(int(p.Port))))
			}
		}
	}
	if len(hosts) == 0 {
		return "", apierrors.NewServiceUnavailable(fmt.Sprintf("no endpoints available for service %q", name))
	}
	return hosts[rand.IntN(len(hosts))], nil
}

// splitSchemeNamePort splits "[scheme:]name[:port]" as kube-apiserver
// reads a proxy request's name.
func splitSchemeNamePort(id string) (scheme, name, port string, ok bool) {
	parts := strings.Split(id, ":")
	switch len(parts) {
	case 1:
		name = parts[0]
	case 2:
		name, port = parts[0], parts[1]
	case 3:
		scheme, name, port = parts[0], parts[1], parts[2]
	default:
		return "", "", "", false
	}
	return scheme, name, port, name != ""
}

var (
	proxyTransportOnce sync.Once
	proxyTransportRT   *http.Transport
)

// proxyTransport reaches pods and endpoints: directly (no HTTP proxy
// from the environment), and for https without checking the pod's
// certificate, which no cluster CA signs, as kube-apiserver's proxy
// transport does.
func proxyTransport() *http.Transport {
	proxyTransportOnce.Do(func() {
		proxyTransportRT = &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout: 10 * time.Second,
			TLSClientConfig:     &tls.Config{InsecureSkipVerify: true},
			MaxIdleConnsPerHost: 10,
			IdleConnTimeout:     90 * time.Second,
		}
	})
	return proxyTransportRT
}
