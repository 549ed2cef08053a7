package apiserver

import (
	"crypto/tls"
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

// serveProxy serves pods/proxy and services/proxy:
// /api/v1/namespaces/<ns>/pods/[<scheme>:]<name>[:<port>]/proxy/<path> and
// the same for services, whose port is a port's name or number. Every
// method is passed through (authorized as the verb its method is), as
// kube-apiserver does, to the pod's IP or to a ready endpoint of the
// service picked at random.
func (s *Server) serveProxy(w http.ResponseWriter, r *http.Request, ri requestInfo, res *resource) error {
	if res.namespaced && ri.namespace == "" {
		return notFoundPath()
	}
	scheme, name, port, ok := splitSchemeNamePort(ri.name)
	if !ok || (scheme != "" && scheme != "http" && scheme != "https") {
		return apierrors.NewBadRequest(fmt.Sprintf("invalid request %q", ri.name))
	}
	if scheme == "" {
		scheme = "http"
	}
	var host string
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
	default:
		return methodNotSupported(res, ri.verb)
	}
	loc := &url.URL{Scheme: scheme, Host: host, Path: ri.proxyPath, RawQuery: r.URL.RawQuery}
	if loc.Path == "" {
		loc.Path = "/"
	}
	h := proxy.NewUpgradeAwareHandler(loc, proxyTransport(), false, false, proxyResponder{})
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
