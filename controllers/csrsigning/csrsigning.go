// Package csrsigning issues the certificates of approved
// CertificateSigningRequests for the signers kube-controller-manager's
// csrsigning controller serves with the cluster CA:
// kubernetes.io/kube-apiserver-client, kubernetes.io/kube-apiserver-client-kubelet
// and kubernetes.io/kubelet-serving. A request for one of them that the
// signer's rules refuse gets the Failed condition (SignerValidationFailure)
// and no certificate; requests of other signers are left alone.
//
// It writes only status.certificate and status.conditions, through the
// status subresource; it never approves, denies or deletes.
package csrsigning

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certlisters "k8s.io/client-go/listers/certificates/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"bonsai.dev/bonsai/apiserver/registry/certificates"
	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/worker"
)

const (
	// DefaultDuration is kube-controller-manager's
	// --cluster-signing-duration.
	DefaultDuration = 365 * 24 * time.Hour
	// minDuration is the shortest spec.expirationSeconds honoured, as
	// upstream: shorter requests get this much.
	minDuration = 10 * time.Minute
	// backdate covers clocks a little behind the signer's, as upstream.
	backdate = 5 * time.Minute
)

// Signer issues a certificate for pub from a checked template.
type Signer interface {
	Sign(tmpl *x509.Certificate, pub any, validity, backdate time.Duration) ([]byte, error)
}

// Config is what the controller needs.
type Config struct {
	Client    *client.Clientset
	Informers *client.Informers
	Logger    *slog.Logger
	// CA signs every certificate.
	CA Signer
	// Duration is the longest validity issued (default DefaultDuration).
	Duration time.Duration
	Clock    clock.WithTicker
}

// Controller is the CSR signing controller.
type Controller struct {
	cfg    Config
	csrs   cache.SharedIndexInformer
	lister certlisters.CertificateSigningRequestLister
	queue  workqueue.TypedRateLimitingInterface[string]
}

// New builds the controller and registers its handlers.
func New(cfg Config) (*Controller, error) {
	if cfg.Client == nil || cfg.Informers == nil || cfg.CA == nil {
		return nil, errors.New("csrsigning controller: Client, Informers and CA are required")
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.Clock = cmp.Or[clock.WithTicker](cfg.Clock, clock.RealClock{})
	cfg.Duration = cmp.Or(cfg.Duration, DefaultDuration)
	c := &Controller{
		cfg:  cfg,
		csrs: cfg.Informers.For(&certificatesv1.CertificateSigningRequest{}),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "certificate", Clock: cfg.Clock}),
	}
	c.lister = certlisters.NewCertificateSigningRequestLister(c.csrs.GetIndexer())
	enqueue := func(obj any) {
		if csr, ok := obj.(*certificatesv1.CertificateSigningRequest); ok && toSign(csr) {
			c.queue.Add(csr.Name)
		}
	}
	if _, err := c.csrs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return nil, fmt.Errorf("csrsigning controller: %w", err)
	}
	return c, nil
}

// Run waits for the cache and works until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	worker.Run(ctx, c.queue, 2, c.sync, c.cfg.Logger, "csr", c.csrs.HasSynced)
	return nil
}

// toSign: approved, not denied or failed, no certificate yet, and one
// of this signer's names.
func toSign(csr *certificatesv1.CertificateSigningRequest) bool {
	if len(csr.Status.Certificate) > 0 || validate[csr.Spec.SignerName] == nil {
		return false
	}
	return certificates.Condition(csr) == "Approved"
}

// validate holds each signer's rules for what it issues.
var validate = map[string]func(*x509.CertificateRequest, []certificatesv1.KeyUsage) error{
	certificatesv1.KubeAPIServerClientSignerName:        validateAPIServerClient,
	certificatesv1.KubeAPIServerClientKubeletSignerName: certificates.ValidateKubeletClientRequest,
	certificatesv1.KubeletServingSignerName:             certificates.ValidateKubeletServingRequest,
}

// validateAPIServerClient: a client certificate, and nothing more.
func validateAPIServerClient(_ *x509.CertificateRequest, usages []certificatesv1.KeyUsage) error {
	allowed := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageClientAuth}
	for _, u := range usages {
		if !slices.Contains(allowed, u) {
			return fmt.Errorf("invalid usage for client certificate: %s", u)
		}
	}
	if !slices.Contains(usages, certificatesv1.UsageClientAuth) {
		return errors.New("missing required usage for client certificate: client auth")
	}
	return nil
}

func (c *Controller) sync(ctx context.Context, name string) error {
	csr, err := c.lister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !toSign(csr) {
		return nil
	}
	csr = csr.DeepCopy()
	req, err := certificates.ParseRequest(csr.Spec.Request)
	if err == nil {
		err = req.CheckSignature()
	}
	if err == nil {
		err = validate[csr.Spec.SignerName](req, csr.Spec.Usages)
	}
	if err != nil {
		c.cfg.Logger.Info("refusing to sign a certificate request", "csr", name, "signer", csr.Spec.SignerName, "err", err)
		now := metav1.NewTime(c.cfg.Clock.Now())
		csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateFailed, Status: corev1.ConditionTrue, Reason: "SignerValidationFailure",
			Message: err.Error(), LastUpdateTime: now, LastTransitionTime: now,
		})
	} else {
		tmpl := &x509.Certificate{
			Subject:  req.Subject,
			DNSNames: req.DNSNames, IPAddresses: req.IPAddresses, EmailAddresses: req.EmailAddresses, URIs: req.URIs,
		}
		for _, u := range csr.Spec.Usages {
			switch u {
			case certificatesv1.UsageDigitalSignature:
				tmpl.KeyUsage |= x509.KeyUsageDigitalSignature
			case certificatesv1.UsageKeyEncipherment:
				tmpl.KeyUsage |= x509.KeyUsageKeyEncipherment
			case certificatesv1.UsageClientAuth:
				tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
			case certificatesv1.UsageServerAuth:
				tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
			}
		}
		cert, err := c.cfg.CA.Sign(tmpl, req.PublicKey, c.duration(csr), backdate)
		if err != nil {
			return err
		}
		csr.Status.Certificate = cert
	}
	_, err = c.cfg.Client.Certificates.CertificateSigningRequests().UpdateStatus(ctx, csr, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if apierrors.IsConflict(err) {
		return worker.Quiet(err)
	}
	return err
}

// duration is the validity of the certificate: spec.expirationSeconds
// when set, at least ten minutes and at most the configured duration.
func (c *Controller) duration(csr *certificatesv1.CertificateSigningRequest) time.Duration {
	if csr.Spec.ExpirationSeconds == nil {
		return c.cfg.Duration
	}
	d := time.Duration(*csr.Spec.ExpirationSeconds) * time.Second
	return min(max(d, minDuration), c.cfg.Duration)
}
