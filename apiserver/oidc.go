package apiserver

import (
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"strconv"
)

// Service-account issuer discovery, as kube-apiserver serves it, so that
// other systems can verify the cluster's service-account tokens.
const (
	openIDConfigPath = "/.well-known/openid-configuration"
	jwksPath         = "/openid/v1/jwks"
)

// openIDConfiguration is the OpenID Connect discovery document of the
// service-account issuer.
type openIDConfiguration struct {
	Issuer        string   `json:"issuer"`
	JWKSURI       string   `json:"jwks_uri"`
	ResponseTypes []string `json:"response_types_supported"`
	SubjectTypes  []string `json:"subject_types_supported"`
	SigningAlgs   []string `json:"id_token_signing_alg_values_supported"`
}

// serveOpenIDConfiguration answers with the discovery document; its
// jwks_uri is on this server's external address, as kube-apiserver's
// default.
func (s *Server) serveOpenIDConfiguration(w http.ResponseWriter, r *http.Request) {
	host := r.Host
	if s.cfg.AdvertiseAddress.IsValid() && s.cfg.SecurePort != 0 {
		host = net.JoinHostPort(s.cfg.AdvertiseAddress.String(), strconv.Itoa(s.cfg.SecurePort))
	}
	doc := openIDConfiguration{
		Issuer:        s.saSigner.Issuer,
		JWKSURI:       (&url.URL{Scheme: "https", Host: host, Path: jwksPath}).String(),
		ResponseTypes: []string{"id_token"},
		SubjectTypes:  []string{"public"},
		SigningAlgs:   []string{s.saSigner.Algorithm()},
	}
	writeCacheable(w, "application/json", doc)
}

func (s *Server) serveJWKS(w http.ResponseWriter, r *http.Request) {
	writeCacheable(w, "application/jwk-set+json", s.saSigner.JWKS())
}

// writeCacheable writes a public document relying parties may cache for
// an hour, as kube-apiserver allows.
func writeCacheable(w http.ResponseWriter, contentType string, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Cache-Control", "public, max-age=3600")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Write(body)
}
