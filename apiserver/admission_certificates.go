package apiserver

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"bonsai.dev/bonsai/apiserver/admission"
	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/apiserver/authz"
	"bonsai.dev/bonsai/apiserver/registry/certificates"
)

// The certificate plugins of kube-apiserver: who may approve a
// CertificateSigningRequest, who may issue its certificate, and that no
// client certificate for the API server is asked for in system:masters.
// Approving and signing are authorized per signer, on the virtual
// resource signers of certificates.k8s.io (verbs approve and sign),
// named by the signer or by its domain and "/*".

func isCSR(a *admissionAttrs) bool {
	return a.res.gvr.Group == certificatesv1.GroupName && a.res.gvr.Resource == "certificatesigningrequests"
}

// authorizedForSigner reports whether u may verb requests of signer.
func (s *Server) authorizedForSigner(ctx context.Context, u *authn.User, verb, signer string) bool {
	if u == nil {
		return false
	}
	domain, _, _ := strings.Cut(signer, "/")
	for _, name := range []string{signer, domain + "/*"} {
		if s.authorize(ctx, authz.Attributes{User: u, Verb: verb, ResourceRequest: true, APIGroup: certificatesv1.GroupName,
			APIVersion: "*", Resource: "signers", Name: name}) {
			return true
		}
	}
	return false
}

// certificateApproval is CertificateApproval: an approval write needs
// approve on the request's signer.
type certificateApproval struct{ s *Server }

func (certificateApproval) Name() string                        { return "CertificateApproval" }
func (certificateApproval) Handles(op admission.Operation) bool { return op == admission.Update }

func (p certificateApproval) Validate(ctx context.Context, aa admission.Attributes) error {
	a := attrs(aa)
	if !isCSR(a) || a.subresource != "approval" {
		return nil
	}
	// The stored signer: an approval cannot change it anyway.
	signer := a.old.(*certificatesv1.CertificateSigningRequest).Spec.SignerName
	if !p.s.authorizedForSigner(ctx, a.user, "approve", signer) {
		return apierrors.NewForbidden(qualified(a.res), a.name, fmt.Errorf("user not permitted to approve requests with signerName %q", signer))
	}
	return nil
}

// certificateSigning is CertificateSigning: a status write that sets the
// certificate or changes the conditions needs sign on the signer.
type certificateSigning struct{ s *Server }

func (certificateSigning) Name() string                        { return "CertificateSigning" }
func (certificateSigning) Handles(op admission.Operation) bool { return op == admission.Update }

func (p certificateSigning) Validate(ctx context.Context, aa admission.Attributes) error {
	a := attrs(aa)
	if !isCSR(a) || a.subresource != "status" {
		return nil
	}
	csr, old := a.obj.(*certificatesv1.CertificateSigningRequest), a.old.(*certificatesv1.CertificateSigningRequest)
	if bytes.Equal(csr.Status.Certificate, old.Status.Certificate) && equality.Semantic.DeepEqual(csr.Status.Conditions, old.Status.Conditions) {
		return nil
	}
	if !p.s.authorizedForSigner(ctx, a.user, "sign", old.Spec.SignerName) {
		return apierrors.NewForbidden(qualified(a.res), a.name, fmt.Errorf("user not permitted to sign requests with signerName %q", old.Spec.SignerName))
	}
	return nil
}

// certificateSubjectRestriction is CertificateSubjectRestriction: a
// request to the API server's client signer may not ask for
// system:masters.
type certificateSubjectRestriction struct{}

func (certificateSubjectRestriction) Name() string { return "CertificateSubjectRestriction" }
func (certificateSubjectRestriction) Handles(op admission.Operation) bool {
	return op == admission.Create
}

func (certificateSubjectRestriction) Validate(_ context.Context, aa admission.Attributes) error {
	a := attrs(aa)
	if !isCSR(a) || a.subresource != "" {
		return nil
	}
	csr := a.obj.(*certificatesv1.CertificateSigningRequest)
	if csr.Spec.SignerName != certificatesv1.KubeAPIServerClientSignerName {
		return nil
	}
	req, err := certificates.ParseRequest(csr.Spec.Request)
	if err != nil {
		return apierrors.NewForbidden(qualified(a.res), a.name, fmt.Errorf("failed to parse CSR: %v", err))
	}
	if slices.Contains(req.Subject.Organization, authn.GroupMasters) {
		return apierrors.NewForbidden(qualified(a.res), a.name, fmt.Errorf("use of %s signer with %s group is not allowed", csr.Spec.SignerName, authn.GroupMasters))
	}
	return nil
}

// clusterTrustBundleAttest is ClusterTrustBundleAttest: publishing trust
// anchors for a signer needs attest on it. An update that only changes
// what the garbage collector uses (owners, finalizers) needs nothing.
type clusterTrustBundleAttest struct{ s *Server }

func (clusterTrustBundleAttest) Name() string { return "ClusterTrustBundleAttest" }
func (clusterTrustBundleAttest) Handles(op admission.Operation) bool {
	return op == admission.Create || op == admission.Update
}

func (p clusterTrustBundleAttest) Validate(ctx context.Context, aa admission.Attributes) error {
	a := attrs(aa)
	if a.res.gvr.Group != certificatesv1.GroupName || a.res.gvr.Resource != "clustertrustbundles" {
		return nil
	}
	b := a.obj.(*certificatesv1.ClusterTrustBundle)
	if b.Spec.SignerName == "" {
		return nil
	}
	if old, ok := a.old.(*certificatesv1.ClusterTrustBundle); ok && onlyGCFieldsChanged(b, old) {
		return nil
	}
	if !p.s.authorizedForSigner(ctx, a.user, "attest", b.Spec.SignerName) {
		return apierrors.NewForbidden(qualified(a.res), a.name, fmt.Errorf("user not permitted to attest for signerName %q", b.Spec.SignerName))
	}
	return nil
}

// onlyGCFieldsChanged: the two bundles differ at most in owner
// references and finalizers.
func onlyGCFieldsChanged(b, old *certificatesv1.ClusterTrustBundle) bool {
	x, y := b.DeepCopy(), old.DeepCopy()
	x.OwnerReferences, y.OwnerReferences = nil, nil
	x.Finalizers, y.Finalizers = nil, nil
	x.ResourceVersion, y.ResourceVersion = "", ""
	x.ManagedFields, y.ManagedFields = nil, nil
	return equality.Semantic.DeepEqual(x, y)
}
