package certificates

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"bonsai.dev/bonsai/apiserver/registry"
)

// maxTrustBundleSize bounds spec.trustBundle, as kube-apiserver does.
const maxTrustBundleSize = 1 << 20

// ClusterTrustBundles publish trust anchors (CA certificates) cluster
// wide, for a signer or on their own. Creating or changing one for a
// signer needs attest on it (apiserver/admission_certificates.go).
type ctbStrategy struct{ registry.DefaultStrategy }

func (ctbStrategy) Validate(_ *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	return validateCTB(obj.(*certificatesv1.ClusterTrustBundle), true)
}

func (ctbStrategy) ValidateUpdate(_ *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	b, was := obj.(*certificatesv1.ClusterTrustBundle), old.(*certificatesv1.ClusterTrustBundle)
	// An unchanged bundle is not parsed again: a newer Go's stricter
	// X.509 parser must not make old objects unwritable.
	errs := validateCTB(b, b.Spec.TrustBundle != was.Spec.TrustBundle)
	if b.Spec.SignerName != was.Spec.SignerName {
		errs = append(errs, field.Invalid(field.NewPath("spec", "signerName"), b.Spec.SignerName, "field is immutable"))
	}
	return errs
}

// ClusterTrustBundleNameErrors is what is wrong with a bundle's name: a
// signer's bundles are named after the signer ("example.com:foo:" and a
// DNS subdomain), others have no colon.
func ClusterTrustBundleNameErrors(name, signer string) []string {
	if signer == "" {
		if strings.Contains(name, ":") {
			return []string{`ClusterTrustBundle without signer name must not have ":" in its name`}
		}
		return apivalidation.NameIsDNSSubdomain(name, false)
	}
	prefix := strings.ReplaceAll(signer, "/", ":") + ":"
	if !strings.HasPrefix(name, prefix) {
		return []string{fmt.Sprintf("ClusterTrustBundle for signerName %s must be named with prefix %s", signer, prefix)}
	}
	return apivalidation.NameIsDNSSubdomain(strings.TrimPrefix(name, prefix), false)
}

func validateCTB(b *certificatesv1.ClusterTrustBundle, parse bool) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range ClusterTrustBundleNameErrors(b.Name, b.Spec.SignerName) {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), b.Name, msg))
	}
	if b.Spec.SignerName != "" {
		errs = append(errs, ValidateSignerName(field.NewPath("spec", "signerName"), b.Spec.SignerName)...)
	}
	if parse {
		errs = append(errs, validateTrustAnchors(field.NewPath("spec", "trustBundle"), b.Spec.TrustBundle)...)
	}
	return errs
}

// validateTrustAnchors: PEM CERTIFICATE blocks without headers, each an
// X.509 CA certificate, none twice, at least one.
func validateTrustAnchors(p *field.Path, in string) field.ErrorList {
	if len(in) > maxTrustBundleSize {
		return field.ErrorList{field.TooLong(p, "", maxTrustBundleSize)}
	}
	var errs field.ErrorList
	bad := func(i int, what string) {
		errs = append(errs, field.Invalid(p, "<value omitted>", fmt.Sprintf("entry %d %s", i, what)))
	}
	seen := map[string][]int{}
	var order []string
	rest := []byte(in)
	for i := 0; ; i++ {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			bad(i, "has bad block type: "+b.Type)
			continue
		}
		if len(b.Headers) != 0 {
			bad(i, "has PEM block headers")
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		switch {
		case err != nil:
			bad(i, "does not parse as X.509")
		case !c.IsCA:
			bad(i, "does not have the CA bit set")
		case !c.BasicConstraintsValid:
			bad(i, "has invalid basic constraints")
		default:
			if seen[string(b.Bytes)] == nil {
				order = append(order, string(b.Bytes))
			}
			seen[string(b.Bytes)] = append(seen[string(b.Bytes)], i)
		}
	}
	if len(errs) > 0 {
		return errs
	}
	if len(seen) == 0 {
		return field.ErrorList{field.Invalid(p, "<value omitted>", "at least one trust anchor must be provided")}
	}
	for _, k := range order {
		if is := seen[k]; len(is) > 1 {
			errs = append(errs, field.Invalid(p, "<value omitted>", fmt.Sprintf("duplicate trust anchor (indices %v)", is)))
		}
	}
	return errs
}

var ctbPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("SignerName", registry.TString, certificatesv1.ClusterTrustBundleSpec{}.SwaggerDoc()["signerName"])),
	Cells: func(o runtime.Object) []any {
		b := o.(*certificatesv1.ClusterTrustBundle)
		return []any{b.Name, registry.OrNone(b.Spec.SignerName)}
	},
}
