// Package certificates holds the kind of certificates.k8s.io:
// CertificateSigningRequests, with the requester recorded from the
// request, approval and issuance kept apart (the approval and status
// subresources), kube-apiserver's validation and table columns.
package certificates

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"bonsai.dev/bonsai/apiserver/registry"
)

// Kinds are the group's rows of the table of served kinds.
func Kinds() []registry.Kind {
	return []registry.Kind{
		{GVR: registry.GVR("certificates.k8s.io", "v1", "certificatesigningrequests"), Kind: "CertificateSigningRequest", ShortNames: []string{"csr"},
			Subresources: []string{"approval", "status"}, Strategy: Strategy{}, Defaulter: defaultCSR, Printer: &printer,
			Fields: map[string]func(runtime.Object) string{
				"spec.signerName": func(o runtime.Object) string { return o.(*certificatesv1.CertificateSigningRequest).Spec.SignerName },
			}},
		{GVR: registry.GVR("certificates.k8s.io", "v1", "clustertrustbundles"), Kind: "ClusterTrustBundle",
			Strategy: ctbStrategy{}, Printer: &ctbPrinter,
			Fields: map[string]func(runtime.Object) string{
				"spec.signerName": func(o runtime.Object) string { return o.(*certificatesv1.ClusterTrustBundle).Spec.SignerName },
			}},
	}
}

// legacySignerName is the signer of v1beta1's requests that named none;
// certificates.k8s.io/v1 refuses it on new requests.
const legacySignerName = "kubernetes.io/legacy-unknown"

// defaultCSR: a condition with no status is True, as v1's defaults.
func defaultCSR(obj runtime.Object) {
	csr := obj.(*certificatesv1.CertificateSigningRequest)
	for i := range csr.Status.Conditions {
		if csr.Status.Conditions[i].Status == "" {
			csr.Status.Conditions[i].Status = corev1.ConditionTrue
		}
	}
}

// Strategy holds CertificateSigningRequests' rules: the requester is
// whoever created the request, the spec never changes, approval
// conditions are set through approval and the certificate through status.
type Strategy struct{ registry.DefaultStrategy }

func (Strategy) PrepareForCreate(w *registry.WriteCtx, obj runtime.Object) error {
	csr := obj.(*certificatesv1.CertificateSigningRequest)
	u := w.User
	csr.Spec.Username, csr.Spec.UID, csr.Spec.Groups, csr.Spec.Extra = u.Name, u.UID, slices.Clone(u.Groups), nil
	if len(u.Extra) > 0 {
		csr.Spec.Extra = map[string]certificatesv1.ExtraValue{}
		for k, v := range u.Extra {
			csr.Spec.Extra[k] = slices.Clone(v)
		}
	}
	// A request is never created approved.
	csr.Status = certificatesv1.CertificateSigningRequestStatus{Conditions: []certificatesv1.CertificateSigningRequestCondition{}}
	return nil
}

func (Strategy) PrepareForUpdate(_ *registry.WriteCtx, obj, old runtime.Object) error {
	csr, was := obj.(*certificatesv1.CertificateSigningRequest), old.(*certificatesv1.CertificateSigningRequest)
	csr.Spec, csr.Status = was.Spec, was.Status
	return nil
}

// PrepareForStatusUpdate stamps the conditions' times.
func (Strategy) PrepareForStatusUpdate(_ *registry.WriteCtx, obj, old runtime.Object) error {
	stampConditions(obj.(*certificatesv1.CertificateSigningRequest), old.(*certificatesv1.CertificateSigningRequest), time.Now())
	return nil
}

// PrepareForApprovalUpdate takes only the conditions from an approval
// write.
func (Strategy) PrepareForApprovalUpdate(_ *registry.WriteCtx, obj, old runtime.Object) runtime.Object {
	merged := old.DeepCopyObject().(*certificatesv1.CertificateSigningRequest)
	merged.Status.Conditions = obj.(*certificatesv1.CertificateSigningRequest).Status.Conditions
	stampConditions(merged, old.(*certificatesv1.CertificateSigningRequest), time.Now())
	return merged
}

// stampConditions sets a condition's update time when none is given,
// and its transition time to the old one's of the same type and status,
// or now.
func stampConditions(csr, old *certificatesv1.CertificateSigningRequest, now time.Time) {
	t := metav1.NewTime(now).Rfc3339Copy() // what the store keeps: seconds
	for i := range csr.Status.Conditions {
		c := &csr.Status.Conditions[i]
		if c.LastUpdateTime.IsZero() {
			c.LastUpdateTime = t
		}
		if !c.LastTransitionTime.IsZero() {
			continue
		}
		c.LastTransitionTime = t
		for _, o := range old.Status.Conditions {
			if o.Type == c.Type && o.Status == c.Status && !o.LastTransitionTime.IsZero() {
				c.LastTransitionTime = o.LastTransitionTime
				break
			}
		}
	}
}

func (Strategy) Validate(_ *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	return validate(obj.(*certificatesv1.CertificateSigningRequest), tolerate(obj.(*certificatesv1.CertificateSigningRequest), nil))
}

func (Strategy) ValidateUpdate(_ *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	csr, was := obj.(*certificatesv1.CertificateSigningRequest), old.(*certificatesv1.CertificateSigningRequest)
	return validateUpdate(csr, was, tolerate(csr, was))
}

// ValidateStatusUpdate: a signer may set the certificate, not the
// approval.
func (Strategy) ValidateStatusUpdate(_ *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	csr, was := obj.(*certificatesv1.CertificateSigningRequest), old.(*certificatesv1.CertificateSigningRequest)
	o := tolerate(csr, was)
	o.setCertificate = true
	return validateUpdate(csr, was, o)
}

// ValidateApprovalUpdate: an approver may set Approved or Denied.
func (Strategy) ValidateApprovalUpdate(_ *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	csr, was := obj.(*certificatesv1.CertificateSigningRequest), old.(*certificatesv1.CertificateSigningRequest)
	o := tolerate(csr, was)
	o.setApproval = true
	return validateUpdate(csr, was, o)
}

// options are what one write may do, and which faults of the stored
// object it must tolerate (present before the rule, or written through
// v1beta1), as kube-apiserver's.
type options struct {
	setApproval, setCertificate bool

	bothApprovedAndDenied, legacySigner, duplicateConditions, emptyConditionType bool
	anyCertificate, duplicateUsages, unknownUsages                               bool
}

func tolerate(csr, old *certificatesv1.CertificateSigningRequest) options {
	if old == nil {
		return options{}
	}
	o := options{legacySigner: old.Spec.SignerName == legacySignerName}
	seen := map[certificatesv1.RequestConditionType]bool{}
	for _, c := range old.Status.Conditions {
		o.duplicateConditions = o.duplicateConditions || seen[c.Type]
		o.emptyConditionType = o.emptyConditionType || c.Type == ""
		seen[c.Type] = true
	}
	o.bothApprovedAndDenied = seen[certificatesv1.CertificateApproved] && seen[certificatesv1.CertificateDenied]
	o.anyCertificate = bytes.Equal(csr.Status.Certificate, old.Status.Certificate) || validateCertificate(old.Status.Certificate) != nil
	usages := map[certificatesv1.KeyUsage]bool{}
	for _, u := range old.Spec.Usages {
		o.duplicateUsages = o.duplicateUsages || usages[u]
		o.unknownUsages = o.unknownUsages || !slices.Contains(validUsages, u)
		usages[u] = true
	}
	return o
}

var validUsages = []certificatesv1.KeyUsage{
	certificatesv1.UsageAny, certificatesv1.UsageCRLSign, certificatesv1.UsageCertSign, certificatesv1.UsageClientAuth,
	certificatesv1.UsageCodeSigning, certificatesv1.UsageContentCommitment, certificatesv1.UsageDataEncipherment,
	certificatesv1.UsageDecipherOnly, certificatesv1.UsageDigitalSignature, certificatesv1.UsageEmailProtection,
	certificatesv1.UsageEncipherOnly, certificatesv1.UsageIPsecEndSystem, certificatesv1.UsageIPsecTunnel,
	certificatesv1.UsageIPsecUser, certificatesv1.UsageKeyAgreement, certificatesv1.UsageKeyEncipherment,
	certificatesv1.UsageMicrosoftSGC, certificatesv1.UsageNetscapeSGC, certificatesv1.UsageOCSPSigning,
	certificatesv1.UsageSMIME, certificatesv1.UsageServerAuth, certificatesv1.UsageSigning, certificatesv1.UsageTimestamping,
}

func usageNames() []string {
	out := make([]string, len(validUsages))
	for i, u := range validUsages {
		out[i] = string(u)
	}
	slices.Sort(out)
	return out
}

// ParseRequest decodes a request's PEM PKCS#10 certificate request.
func ParseRequest(pemBytes []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("PEM block type must be CERTIFICATE REQUEST")
	}
	return x509.ParseCertificateRequest(block.Bytes)
}

func validate(csr *certificatesv1.CertificateSigningRequest, o options) field.ErrorList {
	spec := field.NewPath("spec")
	var errs field.ErrorList
	if req, err := ParseRequest(csr.Spec.Request); err != nil {
		errs = append(errs, field.Invalid(spec.Child("request"), csr.Spec.Request, err.Error()))
	} else if err := req.CheckSignature(); err != nil {
		errs = append(errs, field.Invalid(spec.Child("request"), csr.Spec.Request, err.Error()))
	}
	if len(csr.Spec.Usages) == 0 {
		errs = append(errs, field.Required(spec.Child("usages"), ""))
	}
	seen := map[certificatesv1.KeyUsage]bool{}
	for i, u := range csr.Spec.Usages {
		if !o.unknownUsages && !slices.Contains(validUsages, u) {
			errs = append(errs, field.NotSupported(spec.Child("usages").Index(i), u, usageNames()))
		}
		if !o.duplicateUsages && seen[u] {
			errs = append(errs, field.Duplicate(spec.Child("usages").Index(i), u))
		}
		seen[u] = true
	}
	if !o.legacySigner && csr.Spec.SignerName == legacySignerName {
		errs = append(errs, field.Invalid(spec.Child("signerName"), csr.Spec.SignerName, "the legacy signerName is not allowed via this API version"))
	} else {
		errs = append(errs, ValidateSignerName(spec.Child("signerName"), csr.Spec.SignerName)...)
	}
	if e := csr.Spec.ExpirationSeconds; e != nil && *e < 600 {
		errs = append(errs, field.Invalid(spec.Child("expirationSeconds"), *e, "may not specify a duration less than 600 seconds (10 minutes)"))
	}
	errs = append(errs, validateConditions(csr, o)...)
	if !o.anyCertificate {
		if err := validateCertificate(csr.Status.Certificate); err != nil {
			errs = append(errs, field.Invalid(field.NewPath("status", "certificate"), "<certificate data>", err.Error()))
		}
	}
	return errs
}

func validateConditions(csr *certificatesv1.CertificateSigningRequest, o options) field.ErrorList {
	p := field.NewPath("status", "conditions")
	var errs field.ErrorList
	seen := map[certificatesv1.RequestConditionType]bool{}
	approved, denied := false, false
	for i, c := range csr.Status.Conditions {
		if !o.emptyConditionType && c.Type == "" {
			errs = append(errs, field.Required(p.Index(i).Child("type"), ""))
		}
		allowed := []string{string(corev1.ConditionFalse), string(corev1.ConditionTrue), string(corev1.ConditionUnknown)}
		switch c.Type {
		case certificatesv1.CertificateApproved, certificatesv1.CertificateDenied, certificatesv1.CertificateFailed:
			allowed = []string{string(corev1.ConditionTrue)}
		}
		switch {
		case c.Status == "":
			errs = append(errs, field.Required(p.Index(i).Child("status"), ""))
		case !slices.Contains(allowed, string(c.Status)):
			errs = append(errs, field.NotSupported(p.Index(i).Child("status"), c.Status, allowed))
		}
		if !o.bothApprovedAndDenied {
			switch c.Type {
			case certificatesv1.CertificateApproved:
				approved = true
				if denied {
					errs = append(errs, field.Invalid(p, c.Type, "Approved and Denied conditions are mutually exclusive"))
				}
			case certificatesv1.CertificateDenied:
				denied = true
				if approved {
					errs = append(errs, field.Invalid(p, c.Type, "Approved and Denied conditions are mutually exclusive"))
				}
			}
		}
		if !o.duplicateConditions && seen[c.Type] {
			errs = append(errs, field.Duplicate(p.Index(i).Child("type"), c.Type))
		}
		seen[c.Type] = true
	}
	return errs
}

func validateUpdate(csr, old *certificatesv1.CertificateSigningRequest, o options) field.ErrorList {
	errs := validate(csr, o)
	p := field.NewPath("status", "conditions")
	of := func(x *certificatesv1.CertificateSigningRequest, t certificatesv1.RequestConditionType) []certificatesv1.CertificateSigningRequestCondition {
		var out []certificatesv1.CertificateSigningRequestCondition
		for _, c := range x.Status.Conditions {
			if c.Type == t {
				out = append(out, c)
			}
		}
		return out
	}
	for _, t := range []certificatesv1.RequestConditionType{certificatesv1.CertificateApproved, certificatesv1.CertificateDenied, certificatesv1.CertificateFailed} {
		if len(of(csr, t)) < len(of(old, t)) {
			errs = append(errs, field.Forbidden(p, fmt.Sprintf("updates may not remove a condition of type %q", t)))
		}
	}
	if !o.setApproval {
		for _, t := range []certificatesv1.RequestConditionType{certificatesv1.CertificateApproved, certificatesv1.CertificateDenied} {
			now, was := of(csr, t), of(old, t)
			switch {
			case len(now) < len(was):
			case len(now) > len(was):
				errs = append(errs, field.Forbidden(p, fmt.Sprintf("updates may not add a condition of type %q", t)))
			case !equality.Semantic.DeepEqual(now, was):
				errs = append(errs, field.Forbidden(p, fmt.Sprintf("updates may not modify a condition of type %q", t)))
			}
		}
	}
	if !bytes.Equal(csr.Status.Certificate, old.Status.Certificate) {
		if !o.setCertificate {
			errs = append(errs, field.Forbidden(field.NewPath("status", "certificate"), "updates may not set certificate content"))
		} else if len(old.Status.Certificate) > 0 {
			errs = append(errs, field.Forbidden(field.NewPath("status", "certificate"), "updates may not modify existing certificate content"))
		}
	}
	return errs
}

// validateCertificate: status.certificate is empty or only CERTIFICATE
// PEM blocks, without headers, each holding a certificate.
func validateCertificate(data []byte) error {
	if len(data) == 0 {
		return nil
	}
	blocks := 0
	for {
		block, rest := pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return fmt.Errorf("only CERTIFICATE PEM blocks are allowed, found %q", block.Type)
		}
		if len(block.Headers) != 0 {
			return errors.New("no PEM block headers are permitted")
		}
		blocks++
		certs, err := x509.ParseCertificates(block.Bytes)
		if err != nil {
			return err
		}
		if len(certs) == 0 {
			return errors.New("found CERTIFICATE PEM block containing 0 certificates")
		}
		data = rest
	}
	if blocks == 0 {
		return errors.New("must contain at least one CERTIFICATE PEM block")
	}
	return nil
}

// ValidateSignerName: a signer is named <domain>/<path>, the domain of
// at least two DNS labels, the path of DNS subdomains separated by dots.
func ValidateSignerName(p *field.Path, name string) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	domain, rest, ok := strings.Cut(name, "/")
	if !ok || strings.Contains(rest, "/") {
		return field.ErrorList{field.Invalid(p, name, "must be a fully qualified domain and path of the form 'example.com/signer-name'")}
	}
	var errs field.ErrorList
	if len(domain) > validation.DNS1123SubdomainMaxLength {
		errs = append(errs, field.TooLong(p, "", validation.DNS1123SubdomainMaxLength))
	}
	labels := strings.Split(domain, ".")
	for _, l := range labels {
		if msgs := validation.IsDNS1123Label(l); len(msgs) > 0 {
			for _, m := range msgs {
				errs = append(errs, field.Invalid(p, domain, fmt.Sprintf("validating label %q: %s", l, m)))
			}
			break
		}
	}
	if len(labels) < 2 {
		errs = append(errs, field.Invalid(p, domain, "should be a domain with at least two segments separated by dots"))
	}
	for _, l := range strings.Split(rest, ".") {
		if msgs := validation.IsDNS1123Subdomain(l); len(msgs) > 0 {
			for _, m := range msgs {
				errs = append(errs, field.Invalid(p, rest, fmt.Sprintf("validating label %q: %s", l, m)))
			}
			break
		}
	}
	if max := 2*validation.DNS1123SubdomainMaxLength + validation.DNS1123LabelMaxLength + 2; len(name) > max {
		errs = append(errs, field.TooLong(p, "", max))
	}
	return errs
}

// Condition is what kubectl get csr shows: Approved, Denied or Pending,
// then Failed and Issued.
func Condition(csr *certificatesv1.CertificateSigningRequest) string {
	var approved, denied, failed bool
	for _, c := range csr.Status.Conditions {
		switch c.Type {
		case certificatesv1.CertificateApproved:
			approved = true
		case certificatesv1.CertificateDenied:
			denied = true
		case certificatesv1.CertificateFailed:
			failed = true
		}
	}
	s := "Pending"
	if denied {
		s = "Denied"
	} else if approved {
		s = "Approved"
	}
	if failed {
		s += ",Failed"
	}
	if len(csr.Status.Certificate) > 0 {
		s += ",Issued"
	}
	return s
}

var printer = registry.Printer{
	Columns: registry.Cols(registry.NameCol, registry.AgeCol,
		registry.Col("SignerName", registry.TString, certificatesv1.CertificateSigningRequestSpec{}.SwaggerDoc()["signerName"]),
		registry.Col("Requestor", registry.TString, "Name of the user who requested the CSR"),
		registry.Col("RequestedDuration", registry.TString, certificatesv1.CertificateSigningRequestSpec{}.SwaggerDoc()["expirationSeconds"]),
		registry.Col("Condition", registry.TString, certificatesv1.CertificateSigningRequestStatus{}.SwaggerDoc()["conditions"]),
	),
	Cells: func(o runtime.Object) []any {
		csr := o.(*certificatesv1.CertificateSigningRequest)
		requested := "<none>"
		if e := csr.Spec.ExpirationSeconds; e != nil {
			requested = duration.HumanDuration(time.Duration(*e) * time.Second)
		}
		return []any{csr.Name, registry.Age(csr), registry.OrNone(csr.Spec.SignerName), csr.Spec.Username, requested, Condition(csr)}
	},
}
