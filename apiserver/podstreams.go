package apiserver

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"bonsai.dev/bonsai/apiserver/params"
)

// The pod subresources that reach the pod's kubelet: the API server looks
// up the pod and its node and proxies to the kubelet API (kubelet.Server)
// with its kubelet-client certificate, as kube-apiserver does.
// connectSubresources upgrade to SPDY or WebSocket streams; pods/log is a
// plain streamed GET.
var connectSubresources = map[string]bool{"exec": true, "attach": true, "portforward": true}

// defaultKubeletPort is the port of a kubelet whose Node does not report
// status.daemonEndpoints.kubeletEndpoint.
const defaultKubeletPort = 10250

// newKubeletTransport is how the API server calls kubelets. HTTP/1.1 only:
// exec, attach and port-forward upgrade the connection.
func newKubeletTransport(cfg *tls.Config, insecure bool) *http.Transport {
	tc := &tls.Config{}
	if cfg != nil {
		tc = cfg.Clone()
	}
	tc.NextProtos = []string{"http/1.1"}
	if insecure {
		tc.InsecureSkipVerify = true
	}
	return &http.Transport{
		Proxy:               nil, // kubelets are reached directly, never through HTTPS_PROXY
		DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     tc,
		TLSHandshakeTimeout: 10 * time.Second,
		IdleConnTimeout:     90 * time.Second,
		MaxIdleConnsPerHost: 8,
	}
}

// CloseKubeletConnections closes the idle connections to kubelets, so
// that the next call handshakes again, with the kubelet-client
// certificate in force: after a renewal, as client-go drops its
// connections when its client certificate changes. Calls under way
// keep theirs.
func (s *Server) CloseKubeletConnections() {
	s.kubelet.CloseIdleConnections()
	s.kubeletInsecure.CloseIdleConnections()
}

// CloseAggregatedConnections closes the idle connections to aggregated
// API servers, so that the next call presents the front-proxy client
// certificate in force: after its renewal.
func (s *Server) CloseAggregatedConnections() {
	if s.aggregator != nil {
		s.aggregator.CloseIdleConnections()
	}
}

// simulatedAnnotation marks a Node the node simulator keeps (see
// kubelet/simulator).
const simulatedAnnotation = "bonsai.dev/simulated"

// errNoKubeletAPI is kubeletHost's answer for a simulated node that
// reports no kubelet endpoint (those of --simulated-nodes, or one a user
// created): nothing serves a kubelet API for it, and its addresses are
// made up, so nothing is dialled. The host's own node under
// --runtime=simulated reports its kubelet's port and is reached as any.
var errNoKubeletAPI = errors.New("simulated node without a kubelet API")

// kubeletHost is where the kubelet of a node listens: its InternalIP (else
// ExternalIP, else host name) and its reported port.
func (s *Server) kubeletHost(ctx context.Context, nodeName string) (string, error) {
	obj, _, err := s.getObject(ctx, s.reg.byGVR[gvr("", "v1", "nodes")], "", nodeName)
	if err != nil {
		return "", err
	}
	node := obj.(*corev1.Node)
	if node.Annotations[simulatedAnnotation] == "true" && node.Status.DaemonEndpoints.KubeletEndpoint.Port == 0 {
		return "", errNoKubeletAPI
	}
	port := int(node.Status.DaemonEndpoints.KubeletEndpoint.Port)
	if port <= 0 {
		port = s.cfg.KubeletPort
	}
	if port <= 0 {
		port = defaultKubeletPort
	}
	for _, t := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP, corev1.NodeHostName} {
		for _, a := range node.Status.Addresses {
			if a.Type == t && a.Address != "" {
				return net.JoinHostPort(a.Address, strconv.Itoa(port)), nil
			}
		}
	}
	return "", fmt.Errorf("no preferred addresses found; known addresses: %v", node.Status.Addresses)
}

// podContainer picks the container a request is for, with
// kube-apiserver's rules and messages: the only one when none is named.
func podContainer(pod *corev1.Pod, name string) (string, error) {
	var all []string
	for _, c := range pod.Spec.InitContainers {
		all = append(all, c.Name)
	}
	for _, c := range pod.Spec.Containers {
		all = append(all, c.Name)
	}
	for _, c := range pod.Spec.EphemeralContainers {
		all = append(all, c.Name)
	}
	if name == "" {
		switch len(pod.Spec.Containers) {
		case 1:
			return pod.Spec.Containers[0].Name, nil
		case 0:
			return "", apierrors.NewBadRequest(fmt.Sprintf("a container name must be specified for pod %s", pod.Name))
		default:
			return "", apierrors.NewBadRequest(fmt.Sprintf("a container name must be specified for pod %s, choose one of: %s", pod.Name, all))
		}
	}
	for _, c := range all {
		if c == name {
			return name, nil
		}
	}
	return "", apierrors.NewBadRequest(fmt.Sprintf("container %s is not valid for pod %s", name, pod.Name))
}

func (s *Server) getPod(ctx context.Context, res *resource, ri requestInfo) (*corev1.Pod, error) {
	obj, _, err := s.getObject(ctx, res, ri.namespace, ri.name)
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.Pod), nil
}

// podLogOptions decodes and validates the query of pods/log.
func podLogOptions(q url.Values, podName string) (*corev1.PodLogOptions, bool, error) {
	opts, err := params.PodLog(q)
	if err != nil {
		return nil, false, err
	}
	var errs field.ErrorList
	if opts.TailLines != nil && *opts.TailLines < 0 {
		errs = append(errs, field.Invalid(field.NewPath("tailLines"), *opts.TailLines, "must be greater than or equal to 0"))
	}
	if opts.LimitBytes != nil && *opts.LimitBytes < 1 {
		errs = append(errs, field.Invalid(field.NewPath("limitBytes"), *opts.LimitBytes, "must be greater than 0"))
	}
	switch {
	case opts.SinceSeconds != nil && opts.SinceTime != nil:
		errs = append(errs, field.Forbidden(field.NewPath(""), "at most one of `sinceTime` or `sinceSeconds` may be specified"))
	case opts.SinceSeconds != nil && *opts.SinceSeconds < 1:
		errs = append(errs, field.Invalid(field.NewPath("sinceSeconds"), *opts.SinceSeconds, "must be greater than 0"))
	}
	if opts.Stream != nil {
		switch *opts.Stream {
		case corev1.LogStreamStdout, corev1.LogStreamStderr, corev1.LogStreamAll:
		default:
			errs = append(errs, field.NotSupported(field.NewPath("stream"), *opts.Stream, []string{corev1.LogStreamStdout, corev1.LogStreamStderr, corev1.LogStreamAll}))
		}
		if *opts.Stream != corev1.LogStreamAll && opts.TailLines != nil {
			errs = append(errs, field.Forbidden(field.NewPath(""), "`tailLines` and specific `stream` are mutually exclusive for now"))
		}
	}
	if len(errs) > 0 {
		return nil, false, apierrors.NewInvalid(schema.GroupKind{Kind: "PodLogOptions"}, podName, errs)
	}
	return opts, opts.InsecureSkipTLSVerifyBackend, nil
}

// serveLog serves pods/log: the kubelet's /containerLogs, streamed.
func (s *Server) serveLog(w http.ResponseWriter, r *http.Request, ri requestInfo, res *resource) error {
	if ri.verb != "get" {
		return methodNotSupported(res, ri.verb)
	}
	opts, insecure, err := podLogOptions(r.URL.Query(), ri.name)
	if err != nil {
		return err
	}
	pod, err := s.getPod(r.Context(), res, ri)
	if err != nil {
		return err
	}
	container, err := podContainer(pod, opts.Container)
	if err != nil {
		return err
	}
	host := ""
	if pod.Spec.NodeName != "" {
		if host, err = s.kubeletHost(r.Context(), pod.Spec.NodeName); err != nil && !errors.Is(err, errNoKubeletAPI) {
			return err
		}
	}
	if host == "" {
		// Not scheduled, or on a simulated node, whose containers never
		// write: no log, and no error either, as upstream before a pod
		// is scheduled.
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusOK)
		return nil
	}
	params := url.Values{}
	setBool := func(name string, v bool) {
		if v {
			params.Set(name, "true")
		}
	}
	setBool("follow", opts.Follow)
	setBool("previous", opts.Previous)
	setBool("timestamps", opts.Timestamps)
	for name, v := range map[string]*int64{"sinceSeconds": opts.SinceSeconds, "tailLines": opts.TailLines, "limitBytes": opts.LimitBytes} {
		if v != nil {
			params.Set(name, strconv.FormatInt(*v, 10))
		}
	}
	if opts.SinceTime != nil {
		params.Set("sinceTime", opts.SinceTime.UTC().Format(time.RFC3339))
	}
	if opts.Stream != nil {
		params.Set("stream", *opts.Stream)
	}
	loc := &url.URL{Scheme: "https", Host: host, Path: fmt.Sprintf("/containerLogs/%s/%s/%s", pod.Namespace, pod.Name, container), RawQuery: params.Encode()}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, loc.String(), nil)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	transport := s.kubelet
	if insecure {
		transport = s.kubeletInsecure
	}
	resp, err := transport.RoundTrip(req)
	if err != nil {
		return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusInternalServerError, Message: err.Error()}}
	}
	defer resp.Body.Close()
	if err := kubeletResponseError(resp, qualified(res), ri.name); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	fl := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return nil
			}
			if opts.Follow {
				fl.Flush()
			}
		}
		if err != nil {
			return nil
		}
	}
}

// kubeletResponseError turns a kubelet's error answer into the API error
// kube-apiserver makes of it: a 400's text is the message kubectl shows.
func kubeletResponseError(resp *http.Response, gr schema.GroupResource, name string) error {
	if resp.StatusCode >= 200 && resp.StatusCode <= 206 {
		return nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 50000))
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	text := strings.TrimSpace(string(body))
	switch resp.StatusCode {
	case http.StatusInternalServerError:
		return apierrors.NewInternalError(fmt.Errorf("%s", text))
	case http.StatusBadRequest:
		return apierrors.NewBadRequest(text)
	}
	return apierrors.NewGenericServerResponse(resp.StatusCode, "", gr, name, text, 0, false)
}

// serveConnect serves pods/exec, pods/attach and pods/portforward (GET or
// POST, upgraded to SPDY or WebSocket) by passing the upgraded connection
// through to the kubelet.
func (s *Server) serveConnect(w http.ResponseWriter, r *http.Request, ri requestInfo, res *resource) error {
	if ri.verb != "get" && ri.verb != "create" {
		return methodNotSupported(res, ri.verb)
	}
	pod, err := s.getPod(r.Context(), res, ri)
	if err != nil {
		return err
	}
	opts, err := connectOptions(ri.subresource, r.URL.Query())
	if err != nil {
		return err
	}
	// Admission may change the options; the connection is made with what
	// it leaves.
	if err := s.admitConnect(r.Context(), res, ri, opts); err != nil {
		return err
	}
	params := url.Values{}
	var path string
	switch o := opts.(type) {
	case *corev1.PodPortForwardOptions:
		var ports []string
		for _, n := range o.Ports {
			if n < 1 || n > 65535 {
				return apierrors.NewBadRequest(fmt.Sprintf("ports: invalid value %q: must be between 1 and 65535", strconv.Itoa(int(n))))
			}
			ports = append(ports, strconv.Itoa(int(n)))
		}
		if len(ports) > 0 {
			params.Set("port", strings.Join(ports, ","))
		}
		path = fmt.Sprintf("/portForward/%s/%s", pod.Namespace, pod.Name)
	case *corev1.PodExecOptions, *corev1.PodAttachOptions:
		var name string
		var flags [4]bool
		if e, ok := o.(*corev1.PodExecOptions); ok {
			name, flags = e.Container, [4]bool{e.Stdin, e.Stdout, e.Stderr, e.TTY}
			params["command"] = e.Command
		} else {
			a := o.(*corev1.PodAttachOptions)
			name, flags = a.Container, [4]bool{a.Stdin, a.Stdout, a.Stderr, a.TTY}
		}
		container, err := podContainer(pod, name)
		if err != nil {
			return err
		}
		for i, param := range []string{"input", "output", "error", "tty"} {
			if flags[i] {
				params.Set(param, "1")
			}
		}
		path = fmt.Sprintf("/%s/%s/%s/%s", ri.subresource, pod.Namespace, pod.Name, container)
	}
	if pod.Spec.NodeName == "" {
		return apierrors.NewBadRequest(fmt.Sprintf("pod %s does not have a host assigned", pod.Name))
	}
	host, err := s.kubeletHost(r.Context(), pod.Spec.NodeName)
	if errors.Is(err, errNoKubeletAPI) {
		return apierrors.NewBadRequest(fmt.Sprintf("pod %s runs on simulated node %s, which has no containers: %s is not possible", pod.Name, pod.Spec.NodeName, ri.subresource))
	}
	if err != nil {
		return err
	}
	loc := &url.URL{Scheme: "https", Host: host, Path: path, RawQuery: params.Encode()}
	h := proxy.NewUpgradeAwareHandler(loc, s.kubelet, false, true, proxyResponder{})
	// The caller's credentials are for the API server, not the kubelet.
	r.Header.Del("Authorization")
	h.ServeHTTP(hijackWriter{w}, r)
	return nil
}

// proxyResponder answers a proxy failure (the kubelet cannot be dialled)
// with a Status, as kube-apiserver does.
type proxyResponder struct{}

func (proxyResponder) Error(w http.ResponseWriter, _ *http.Request, err error) {
	writeStatus(w, &metav1.Status{Code: http.StatusInternalServerError, Message: err.Error()})
}

// hijackWriter lets the proxy take over the connection through the
// wrappers of the handler chain (they unwrap to the server's writer).
type hijackWriter struct{ http.ResponseWriter }

func (h hijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(h.ResponseWriter).Hijack()
}

func (h hijackWriter) Flush() { http.NewResponseController(h.ResponseWriter).Flush() }
