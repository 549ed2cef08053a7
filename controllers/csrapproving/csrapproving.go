// Package csrapproving approves kubelets' CertificateSigningRequests, as
// kube-controller-manager's csrapproving controller does:
//
//   - a client certificate for the signer
//     kubernetes.io/kube-apiserver-client-kubelet asked by the node itself
//     (requester system:node:<name>, subject system:node:<name>) when a
//     SubjectAccessReview allows the requester create on
//     certificatesigningrequests/selfnodeclient;
//   - one asked by anyone else (a bootstrap token) when it allows create on
//     certificatesigningrequests/nodeclient.
//
// Beyond upstream, which leaves kubelet serving certificates to an admin,
// it approves a kubernetes.io/kubelet-serving request asked by the node
// itself (in system:nodes) when every subjectAltName it asks for is one of
// that Node's status addresses: a node can get a serving certificate for
// itself and for nothing else.
//
// A request that matches no rule, or whose review says no, is left pending
// for an admin; it never denies. It writes only the Approved condition,
// through the approval subresource.
package csrapproving

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certlisters "k8s.io/client-go/listers/certificates/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"bonsai.dev/bonsai/apiserver/registry/certificates"
	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/worker"
)

// Config is what the controller needs.
type Config struct {
	Client    *client.Clientset
	Informers *client.Informers
	Logger    *slog.Logger
	Clock     clock.WithTicker
}

// Controller is the CSR approving controller.
type Controller struct {
	cfg    Config
	csrs   cache.SharedIndexInformer
	nodes  cache.SharedIndexInformer
	lister certlisters.CertificateSigningRequestLister
	nodeLs corelisters.NodeLister
	queue  workqueue.TypedRateLimitingInterface[string]
}

// New builds the controller and registers its handlers.
func New(cfg Config) (*Controller, error) {
	if cfg.Client == nil || cfg.Informers == nil {
		return nil, errors.New("csrapproving controller: Client and Informers are required")
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.Clock = cmp.Or[clock.WithTicker](cfg.Clock, clock.RealClock{})
	// A serving request waits for its Node's addresses: retry within
	// seconds, not the default limiter's minutes.
	limiter := workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 10*time.Second)
	c := &Controller{
		cfg:   cfg,
		csrs:  cfg.Informers.For(&certificatesv1.CertificateSigningRequest{}),
		nodes: cfg.Informers.For(&corev1.Node{}),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig[string](limiter,
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "csrapproving", Clock: cfg.Clock}),
	}
	c.lister = certlisters.NewCertificateSigningRequestLister(c.csrs.GetIndexer())
	c.nodeLs = corelisters.NewNodeLister(c.nodes.GetIndexer())
	enqueue := func(obj any) {
		if csr, ok := obj.(*certificatesv1.CertificateSigningRequest); ok && pending(csr) {
			c.queue.Add(csr.Name)
		}
	}
	if _, err := c.csrs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return nil, fmt.Errorf("csrapproving controller: %w", err)
	}
	return c, nil
}

// Run waits for the caches and works until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	worker.Run(ctx, c.queue, 1, c.sync, c.cfg.Logger, "csr", c.csrs.HasSynced, c.nodes.HasSynced)
	return nil
}

func pending(csr *certificatesv1.CertificateSigningRequest) bool {
	return len(csr.Status.Certificate) == 0 && certificates.Condition(csr) == "Pending"
}

// rule is one kind of request the controller may approve.
type rule struct {
	// subresource is what the SubjectAccessReview asks create on; ""
	// for a rule checked against the Node instead.
	subresource string
	message     string
	recognize   func(*certificatesv1.CertificateSigningRequest, *x509.CertificateRequest) bool
}

var rules = []rule{
	{"selfnodeclient", "Auto approving self kubelet client certificate after SubjectAccessReview.",
		func(csr *certificatesv1.CertificateSigningRequest, req *x509.CertificateRequest) bool {
			return nodeClient(csr, req) && csr.Spec.Username == req.Subject.CommonName
		}},
	{"nodeclient", "Auto approving kubelet client certificate after SubjectAccessReview.", nodeClient},
	{"", "Auto approving kubelet serving certificate for the node's own addresses.",
		func(csr *certificatesv1.CertificateSigningRequest, req *x509.CertificateRequest) bool {
			return csr.Spec.SignerName == certificatesv1.KubeletServingSignerName &&
				certificates.ValidateKubeletServingRequest(req, csr.Spec.Usages) == nil &&
				csr.Spec.Username == req.Subject.CommonName && slices.Contains(csr.Spec.Groups, certificates.NodesGroup)
		}},
}

func nodeClient(csr *certificatesv1.CertificateSigningRequest, req *x509.CertificateRequest) bool {
	return csr.Spec.SignerName == certificatesv1.KubeAPIServerClientKubeletSignerName &&
		certificates.ValidateKubeletClientRequest(req, csr.Spec.Usages) == nil
}

func (c *Controller) sync(ctx context.Context, name string) error {
	csr, err := c.lister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !pending(csr) {
		return nil
	}
	req, err := certificates.ParseRequest(csr.Spec.Request)
	if err != nil {
		return nil // the API server refuses such requests; nothing to approve
	}
	var tried []string
	for _, r := range rules {
		if !r.recognize(csr, req) {
			continue
		}
		var ok bool
		var err error
		if r.subresource == "" {
			tried = append(tried, "kubelet-serving")
			ok, err = c.ownAddresses(csr, req)
		} else {
			tried = append(tried, r.subresource)
			ok, err = c.authorized(ctx, csr, r.subresource)
		}
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		return c.approve(ctx, csr, r.message)
	}
	if len(tried) > 0 {
		// The requester may be granted the permission, or its Node its
		// addresses, later: look again, as upstream does.
		return worker.Quiet(fmt.Errorf("recognized csr %q as %v but it was not approved", name, tried))
	}
	return nil
}

// authorized asks the API server whether the requester may create
// certificatesigningrequests/subresource.
func (c *Controller) authorized(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, subresource string) (bool, error) {
	extra := make(map[string]authorizationv1.ExtraValue, len(csr.Spec.Extra))
	for k, v := range csr.Spec.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar, err := c.cfg.Client.Authorization.SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: csr.Spec.Username, UID: csr.Spec.UID, Groups: csr.Spec.Groups, Extra: extra,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Group: certificatesv1.GroupName, Resource: "certificatesigningrequests", Subresource: subresource, Verb: "create",
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	return sar.Status.Allowed, nil
}

// ownAddresses reports whether every subjectAltName of a serving request
// is an address of the requester's Node.
func (c *Controller) ownAddresses(csr *certificatesv1.CertificateSigningRequest, req *x509.CertificateRequest) (bool, error) {
	node, err := c.nodeLs.Get(req.Subject.CommonName[len(certificates.NodeUserPrefix):])
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var ips, names []string
	for _, a := range node.Status.Addresses {
		switch a.Type {
		case corev1.NodeInternalIP, corev1.NodeExternalIP:
			ips = append(ips, a.Address)
		case corev1.NodeHostName, corev1.NodeInternalDNS, corev1.NodeExternalDNS:
			names = append(names, a.Address)
		}
	}
	for _, ip := range req.IPAddresses {
		if !slices.ContainsFunc(ips, func(s string) bool { return s == ip.String() }) {
			return false, nil
		}
	}
	for _, n := range req.DNSNames {
		if !slices.Contains(names, n) {
			return false, nil
		}
	}
	return true, nil
}

func (c *Controller) approve(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, message string) error {
	csr = csr.DeepCopy()
	now := metav1.NewTime(c.cfg.Clock.Now())
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "AutoApproved",
		Message: message, LastUpdateTime: now, LastTransitionTime: now,
	})
	_, err := c.cfg.Client.Certificates.CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if apierrors.IsConflict(err) {
		return worker.Quiet(err)
	}
	if err == nil {
		c.cfg.Logger.Info("approved certificate request", "csr", csr.Name, "signer", csr.Spec.SignerName, "requester", csr.Spec.Username)
	}
	return err
}
