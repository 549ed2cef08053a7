package authn

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// Service-account identities, as Kubernetes names them.
const (
	ServiceAccountUsernamePrefix = "system:serviceaccount:"
	GroupServiceAccounts         = "system:serviceaccounts"

	// Keys of User.Extra for tokens bound to a pod, and the token's ID.
	ExtraPodName      = "authentication.kubernetes.io/pod-name"
	ExtraPodUID       = "authentication.kubernetes.io/pod-uid"
	ExtraNodeName     = "authentication.kubernetes.io/node-name"
	ExtraNodeUID      = "authentication.kubernetes.io/node-uid"
	ExtraCredentialID = "authentication.kubernetes.io/credential-id"
)

// ServiceAccountUsername is the user name of a service account.
func ServiceAccountUsername(namespace, name string) string {
	return ServiceAccountUsernamePrefix + namespace + ":" + name
}

// ServiceAccountClaims is the private claim of a service-account token,
// under "kubernetes.io", as kube-apiserver writes it.
type ServiceAccountClaims struct {
	Kubernetes KubernetesClaims `json:"kubernetes.io,omitempty"`
}

// KubernetesClaims names the account and the object the token is bound to.
type KubernetesClaims struct {
	Namespace      string `json:"namespace,omitempty"`
	ServiceAccount Ref    `json:"serviceaccount,omitempty"`
	Pod            *Ref   `json:"pod,omitempty"`
	Secret         *Ref   `json:"secret,omitempty"`
	Node           *Ref   `json:"node,omitempty"`
	// WarnAfter is set on the year-long tokens kubelets ask for with the
	// legacy 3607 s lifetime: past it the token still works but is stale.
	WarnAfter *jwt.NumericDate `json:"warnafter,omitempty"`
}

// Ref names one object by name and uid.
type Ref struct {
	Name string `json:"name,omitempty"`
	UID  string `json:"uid,omitempty"`
}

// TokenBinding is what a token is bound to: a pod (with the node it runs
// on, if any), a secret, a node, or nothing.
type TokenBinding struct {
	Pod    *corev1.Pod
	Node   *corev1.Node
	Secret *corev1.Secret
}

// TokenSigner issues service-account tokens and publishes the key that
// verifies them.
type TokenSigner struct {
	Issuer string
	key    crypto.Signer
	keyID  string
	alg    jose.SignatureAlgorithm
	signer jose.Signer
}

// NewTokenSigner signs with key (ECDSA P-256 or RSA) for issuer.
func NewTokenSigner(key crypto.Signer, issuer string) (*TokenSigner, error) {
	var alg jose.SignatureAlgorithm
	switch k := key.Public().(type) {
	case *ecdsa.PublicKey:
		if k.Curve.Params().BitSize != 256 {
			return nil, fmt.Errorf("service-account key: ECDSA curve %s, want P-256", k.Curve.Params().Name)
		}
		alg = jose.ES256
	case *rsa.PublicKey:
		alg = jose.RS256
	default:
		return nil, fmt.Errorf("service-account key: %T is not ECDSA or RSA", k)
	}
	kid, err := keyID(key.Public())
	if err != nil {
		return nil, err
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: jose.JSONWebKey{Key: key, KeyID: kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return nil, fmt.Errorf("service-account key: %w", err)
	}
	return &TokenSigner{Issuer: issuer, key: key, keyID: kid, alg: alg, signer: signer}, nil
}

// keyID is the key's "kid", derived from the public key as kube-apiserver
// does (base64url of the SHA-256 of its PKIX DER) so that it is stable
// across restarts.
func keyID(pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("service-account key: %w", err)
	}
	sum := sha256.Sum256(der)
	return base64.RawURLEncoding.EncodeToString(sum[:]), nil
}

// Issue signs a token for sa bound to b, valid from now for expiration,
// for audiences. warnAfter, if not zero, is when the token turns stale.
func (s *TokenSigner) Issue(sa *corev1.ServiceAccount, b TokenBinding, audiences []string, now time.Time, expiration, warnAfter time.Duration) (string, error) {
	if b.Secret != nil && (b.Pod != nil || b.Node != nil) {
		return "", errors.New("internal error, token can only be bound to one object type")
	}
	public := issuedClaims{Claims: jwt.Claims{
		Issuer:    s.Issuer,
		Subject:   ServiceAccountUsername(sa.Namespace, sa.Name),
		IssuedAt:  jwt.NewNumericDate(now),
		NotBefore: jwt.NewNumericDate(now),
		Expiry:    jwt.NewNumericDate(now.Add(expiration)),
		ID:        string(uuid.NewUUID()),
	}, Audience: audiences}
	private := ServiceAccountClaims{Kubernetes: KubernetesClaims{
		Namespace:      sa.Namespace,
		ServiceAccount: Ref{Name: sa.Name, UID: string(sa.UID)},
	}}
	switch {
	case b.Pod != nil:
		private.Kubernetes.Pod = &Ref{Name: b.Pod.Name, UID: string(b.Pod.UID)}
		if b.Node != nil {
			private.Kubernetes.Node = &Ref{Name: b.Node.Name, UID: string(b.Node.UID)}
		}
	case b.Secret != nil:
		private.Kubernetes.Secret = &Ref{Name: b.Secret.Name, UID: string(b.Secret.UID)}
	case b.Node != nil:
		private.Kubernetes.Node = &Ref{Name: b.Node.Name, UID: string(b.Node.UID)}
	}
	if warnAfter != 0 {
		private.Kubernetes.WarnAfter = jwt.NewNumericDate(now.Add(warnAfter))
	}
	return jwt.Signed(s.signer).Claims(public).Claims(private).Serialize()
}

// issuedClaims writes "aud" as an array even with one audience, as
// Kubernetes' tokens have it (jwt.Audience would write a lone string).
type issuedClaims struct {
	jwt.Claims
	Audience []string `json:"aud,omitempty"`
}

// publicKey is the key as a JWK, for /openid/v1/jwks.
func (s *TokenSigner) publicKey() jose.JSONWebKey {
	return jose.JSONWebKey{Key: s.key.Public(), KeyID: s.keyID, Algorithm: string(s.alg), Use: "sig"}
}

// JWKS is the JSON Web Key Set that verifies the tokens.
func (s *TokenSigner) JWKS() jose.JSONWebKeySet {
	return jose.JSONWebKeySet{Keys: []jose.JSONWebKey{s.publicKey()}}
}

// Algorithm is the signing algorithm, as the discovery document lists it.
func (s *TokenSigner) Algorithm() string { return string(s.alg) }

// ServiceAccountGetter reads the objects a token names, to check that they
// still exist.
type ServiceAccountGetter interface {
	GetServiceAccount(namespace, name string) (*corev1.ServiceAccount, error)
	GetPod(namespace, name string) (*corev1.Pod, error)
	GetSecret(namespace, name string) (*corev1.Secret, error)
	GetNode(name string) (*corev1.Node, error)
}

// ServiceAccountTokens authenticates the bearer tokens a TokenSigner
// issued, as kube-apiserver's service-account token authenticator does.
type ServiceAccountTokens struct {
	signer    *TokenSigner
	audiences []string
	getter    ServiceAccountGetter
	// Now is the clock; tests move it.
	Now func() time.Time
}

// NewServiceAccountTokens accepts tokens of signer for one of audiences
// whose account (and bound object) getter still finds.
func NewServiceAccountTokens(signer *TokenSigner, audiences []string, getter ServiceAccountGetter) *ServiceAccountTokens {
	return &ServiceAccountTokens{signer: signer, audiences: audiences, getter: getter, Now: time.Now}
}

// parse returns the request's bearer token as a JWT of this issuer; ok is
// false for anything else (another authenticator's token).
func (a *ServiceAccountTokens) parse(r *http.Request) (*jwt.JSONWebToken, bool) {
	raw, ok := bearerToken(r)
	if !ok || strings.Count(raw, ".") != 2 {
		return nil, false
	}
	tok, err := jwt.ParseSigned(raw, []jose.SignatureAlgorithm{jose.ES256, jose.ES384, jose.ES512, jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512})
	if err != nil {
		return nil, false
	}
	var public jwt.Claims
	if err := tok.UnsafeClaimsWithoutVerification(&public); err != nil || public.Issuer != a.signer.Issuer {
		return nil, false
	}
	return tok, true
}

// AuthenticateRequest checks, in kube-apiserver's order, the signature,
// the time claims (with jwt's one-minute leeway), the audience, and that
// the account and the pod or secret the token is bound to still exist
// with the uids in the token.
func (a *ServiceAccountTokens) AuthenticateRequest(r *http.Request) (*User, bool, error) {
	tok, ok := a.parse(r)
	if !ok {
		return nil, false, nil
	}
	return a.authenticate(tok)
}

func (a *ServiceAccountTokens) authenticate(tok *jwt.JSONWebToken) (*User, bool, error) {
	var public jwt.Claims
	var private ServiceAccountClaims
	if err := tok.Claims(a.signer.key.Public(), &public, &private); err != nil {
		return nil, false, errors.New("invalid bearer token: signature is invalid")
	}
	// A token without audiences is a legacy one, meant for the API server.
	if len(public.Audience) > 0 && !intersects(public.Audience, a.audiences) {
		return nil, false, fmt.Errorf("invalid bearer token: token audiences %q is invalid for the target audiences %q", []string(public.Audience), a.audiences)
	}
	now := a.Now()
	switch err := public.Validate(jwt.Expected{Time: now}); {
	case err == nil:
	case errors.Is(err, jwt.ErrExpired):
		return nil, false, errors.New("service account token has expired")
	case errors.Is(err, jwt.ErrNotValidYet):
		return nil, false, errors.New("service account token is not valid yet")
	case errors.Is(err, jwt.ErrIssuedInTheFuture):
		return nil, false, errors.New("service account token is issued in the future")
	default:
		return nil, false, fmt.Errorf("service account token claims could not be validated: %w", err)
	}
	k := private.Kubernetes
	if k.Namespace == "" || k.ServiceAccount.Name == "" || public.Subject != ServiceAccountUsername(k.Namespace, k.ServiceAccount.Name) {
		return nil, false, errors.New("service account token does not name a service account")
	}
	// Objects deleted within the leeway still count, as upstream.
	deletedBefore := now.Add(-jwt.DefaultLeeway)
	sa, err := a.getter.GetServiceAccount(k.Namespace, k.ServiceAccount.Name)
	if err != nil {
		return nil, false, err
	}
	if sa.DeletionTimestamp != nil && sa.DeletionTimestamp.Time.Before(deletedBefore) {
		return nil, false, fmt.Errorf("service account %s/%s has been deleted", k.Namespace, k.ServiceAccount.Name)
	}
	if string(sa.UID) != k.ServiceAccount.UID {
		return nil, false, fmt.Errorf("service account UID (%s) does not match claim (%s)", sa.UID, k.ServiceAccount.UID)
	}
	if k.Secret != nil {
		sec, err := a.getter.GetSecret(k.Namespace, k.Secret.Name)
		if err != nil {
			return nil, false, err
		}
		if sec.DeletionTimestamp != nil && sec.DeletionTimestamp.Time.Before(deletedBefore) {
			return nil, false, fmt.Errorf("secret %s/%s has been deleted", k.Namespace, k.Secret.Name)
		}
		if string(sec.UID) != k.Secret.UID {
			return nil, false, fmt.Errorf("secret UID (%s) does not match service account secret ref claim (%s)", sec.UID, k.Secret.UID)
		}
	}
	u := &User{
		Name:   ServiceAccountUsername(k.Namespace, k.ServiceAccount.Name),
		UID:    k.ServiceAccount.UID,
		Groups: []string{GroupServiceAccounts, GroupServiceAccounts + ":" + k.Namespace, GroupAuthenticated},
		Extra:  map[string][]string{},
	}
	if k.Pod != nil {
		pod, err := a.getter.GetPod(k.Namespace, k.Pod.Name)
		if err != nil {
			return nil, false, err
		}
		if string(pod.UID) != k.Pod.UID {
			return nil, false, fmt.Errorf("pod UID (%s) does not match claim (%s)", pod.UID, k.Pod.UID)
		}
		if pod.DeletionTimestamp != nil && pod.DeletionTimestamp.Time.Before(deletedBefore) {
			return nil, false, fmt.Errorf("pod %s/%s has been deleted", k.Namespace, k.Pod.Name)
		}
		u.Extra[ExtraPodName] = []string{k.Pod.Name}
		u.Extra[ExtraPodUID] = []string{k.Pod.UID}
	} else if k.Node != nil {
		// A token bound to the node itself lives as long as the node.
		node, err := a.getter.GetNode(k.Node.Name)
		if err != nil {
			return nil, false, err
		}
		if string(node.UID) != k.Node.UID {
			return nil, false, fmt.Errorf("node UID (%s) does not match claim (%s)", node.UID, k.Node.UID)
		}
		if node.DeletionTimestamp != nil && node.DeletionTimestamp.Time.Before(deletedBefore) {
			return nil, false, fmt.Errorf("node %s has been deleted", k.Node.Name)
		}
	}
	if k.Node != nil {
		// A pod's node is as the token was issued: the pod's check
		// stands for it.
		u.Extra[ExtraNodeName] = []string{k.Node.Name}
		if k.Node.UID != "" {
			u.Extra[ExtraNodeUID] = []string{k.Node.UID}
		}
	}
	if public.ID != "" {
		u.Extra[ExtraCredentialID] = []string{"JTI=" + public.ID}
	}
	if len(u.Extra) == 0 {
		u.Extra = nil
	}
	return u, true, nil
}

func intersects(a, b []string) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return true
			}
		}
	}
	return false
}

// WithServiceAccounts puts sa in front of others. A request whose bearer
// token is a service-account token of sa is judged on that token by sa
// alone, and on its other credentials (a client certificate) by others
// with the token hidden: the static token file would otherwise reject
// every service-account token as a token it does not know. As in Union,
// an invalid credential anywhere rejects the request, and a client
// certificate wins over a token.
func WithServiceAccounts(sa *ServiceAccountTokens, others Authenticator) Authenticator {
	return saFirst{sa: sa, others: others}
}

type saFirst struct {
	sa     *ServiceAccountTokens
	others Authenticator
}

func (a saFirst) AuthenticateRequest(r *http.Request) (*User, bool, error) {
	tok, ok := a.sa.parse(r)
	if !ok {
		return a.others.AuthenticateRequest(r)
	}
	u, _, err := a.sa.authenticate(tok)
	if err != nil {
		return nil, false, err
	}
	rest := r.Clone(r.Context())
	rest.Header.Del("Authorization")
	other, ok, err := a.others.AuthenticateRequest(rest)
	if err != nil {
		return nil, false, err
	}
	if ok {
		return other, true, nil
	}
	return u, true, nil
}
