package apiserver

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/store"
)

// webhookClient calls one webhook over HTTPS, trusting its caBundle (or
// the system's roots without one).
type webhookClient struct {
	service *admissionregistrationv1.ServiceReference
	url     *url.URL
	http    *http.Client
}

// maxWebhookResponse bounds what a webhook may answer (kube-apiserver
// reads at most a few MB too).
const maxWebhookResponse = 3 << 20

func newWebhookClient(cc admissionregistrationv1.WebhookClientConfig) (*webhookClient, error) {
	pool, err := caBundlePool(cc.CABundle)
	if err != nil {
		return nil, err
	}
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	c := &webhookClient{service: cc.Service}
	switch {
	case cc.Service != nil:
		// The certificate names the Service's DNS name, whatever
		// address the call goes to.
		tlsCfg.ServerName = cc.Service.Name + "." + cc.Service.Namespace + ".svc"
	case cc.URL != nil:
		u, err := url.Parse(*cc.URL)
		if err != nil {
			return nil, err
		}
		c.url = u
	default:
		return nil, errors.New("neither service nor url set")
	}
	c.http = &http.Client{Transport: serviceTransport(tlsCfg, true)}
	return c, nil
}

// caBundlePool is the pool of a caBundle's certificates; nil (the
// system's roots) for an empty one.
func caBundlePool(caBundle []byte) (*x509.CertPool, error) {
	if len(caBundle) == 0 {
		return nil, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caBundle) {
		return nil, errors.New("caBundle holds no PEM certificate")
	}
	return pool, nil
}

// serviceTransport calls a webhook or an aggregated API server with
// tlsCfg. http2 off keeps connection upgrades (exec, port-forward)
// possible through a proxy.
func serviceTransport(tlsCfg *tls.Config, http2 bool) *http.Transport {
	return &http.Transport{
		TLSClientConfig:     tlsCfg,
		DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:   http2,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
	}
}

// call sends req and checks the answer as kube-apiserver does: an
// AdmissionReview v1 with the request's uid and, if it patches, a JSON
// patch. Every error here is a failure to call the webhook, which the
// failurePolicy decides about.
func (c *webhookClient) call(ctx context.Context, s *Server, h *webhook, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
	target, err := c.target(ctx, s)
	if err != nil {
		return nil, fmt.Errorf("failed to call webhook: %w", err)
	}
	q := target.Query()
	q.Set("timeout", strconv.Itoa(int(h.timeout/time.Second))+"s")
	target.RawQuery = q.Encode()
	body, err := json.Marshal(&admissionv1.AdmissionReview{TypeMeta: admissionReviewType, Request: req})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, target.String(), bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("failed to call webhook: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("failed to call webhook: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxWebhookResponse))
	if err != nil {
		return nil, fmt.Errorf("failed to call webhook: %w", err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, fmt.Errorf("failed to call webhook: the server responded with the status code %d but did not return more information", resp.StatusCode)
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(data, &review); err != nil {
		return nil, fmt.Errorf("failed to call webhook: %w", err)
	}
	if review.TypeMeta != admissionReviewType {
		return nil, fmt.Errorf("received invalid webhook response: expected webhook response of %s, Kind=%s, got %s, Kind=%s",
			admissionReviewType.APIVersion, admissionReviewType.Kind, review.APIVersion, review.Kind)
	}
	r := review.Response
	if r == nil {
		return nil, errors.New("received invalid webhook response: webhook response was absent")
	}
	if r.UID != req.UID {
		return nil, fmt.Errorf("received invalid webhook response: expected response.uid=%q, got %q", req.UID, r.UID)
	}
	if len(r.Patch) > 0 {
		if r.PatchType == nil || *r.PatchType != admissionv1.PatchTypeJSONPatch {
			got := ""
			if r.PatchType != nil {
				got = string(*r.PatchType)
			}
			return nil, fmt.Errorf("received invalid webhook response: expected patchType %q, got %q", admissionv1.PatchTypeJSONPatch, got)
		}
	}
	return r, nil
}

var admissionReviewType = metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}

// target is the URL to call. A Service is reached at one of its ready
// endpoints, read from its EndpointSlices: that works with or without
// the service proxy on this host (--disable-agent runs none). A Service
// without endpoints is reached at its cluster IP, for the proxy to route.
func (c *webhookClient) target(ctx context.Context, s *Server) (*url.URL, error) {
	if c.url != nil {
		u := *c.url
		return &u, nil
	}
	ref := c.service
	port := int32(443)
	if ref.Port != nil {
		port = *ref.Port
	}
	path := ""
	if ref.Path != nil {
		path = *ref.Path
	}
	host, err := s.resolveService(ctx, ref.Namespace, ref.Name, port)
	if err != nil {
		return nil, err
	}
	return &url.URL{Scheme: "https", Host: host, Path: path}, nil
}

// resolveService finds an address for port of a Service.
func (s *Server) resolveService(ctx context.Context, namespace, name string, port int32) (string, error) {
	obj, _, err := s.getObject(ctx, s.reg.byGVR[gvr("", "v1", "services")], namespace, name)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return "", fmt.Errorf("service %q not found", name)
		}
		return "", err
	}
	svc := obj.(*corev1.Service)
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return net.JoinHostPort(svc.Spec.ExternalName, strconv.Itoa(int(port))), nil
	}
	var sp *corev1.ServicePort
	for i := range svc.Spec.Ports {
		if svc.Spec.Ports[i].Port == port {
			sp = &svc.Spec.Ports[i]
			break
		}
	}
	if sp == nil {
		return "", fmt.Errorf("no service port %d found for service %q", port, name)
	}
	if addrs, err := s.readyEndpoints(ctx, namespace, name, sp.Name); err != nil {
		return "", err
	} else if len(addrs) > 0 {
		return addrs[rand.IntN(len(addrs))], nil
	}
	if ip := svc.Spec.ClusterIP; ip != "" && ip != corev1.ClusterIPNone {
		return net.JoinHostPort(ip, strconv.Itoa(int(port))), nil
	}
	return "", fmt.Errorf("endpoints for service/%s in %q have no addresses with port name %q", name, namespace, sp.Name)
}

// readyEndpoints lists host:port of the Service's ready endpoints for the
// named service port.
func (s *Server) readyEndpoints(ctx context.Context, namespace, service, portName string) ([]string, error) {
	res := s.reg.byGVR[gvr("discovery.k8s.io", "v1", "endpointslices")]
	l, err := s.cfg.Store.List(ctx, res.prefix(namespace), store.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, kv := range l.Items {
		obj, err := decodeStored(res, kv)
		if err != nil {
			continue
		}
		es := obj.(*discoveryv1.EndpointSlice)
		if es.Labels[discoveryv1.LabelServiceName] != service {
			continue
		}
		var port int32
		for _, p := range es.Ports {
			if p.Port != nil && (p.Name == nil && portName == "" || p.Name != nil && *p.Name == portName) {
				port = *p.Port
			}
		}
		if port == 0 {
			continue
		}
		for _, ep := range es.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready || len(ep.Addresses) == 0 {
				continue
			}
			out = append(out, net.JoinHostPort(ep.Addresses[0], strconv.Itoa(int(port))))
		}
	}
	return out, nil
}
