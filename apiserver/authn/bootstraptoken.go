package authn

import (
	"crypto/subtle"
	"net/http"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Bootstrap tokens, as Kubernetes defines them: a Secret
// bootstrap-token-<id> of type bootstrap.kubernetes.io/token in
// kube-system, presented as the bearer token "<id>.<secret>".
const (
	BootstrapTokenSecretType     = corev1.SecretType("bootstrap.kubernetes.io/token")
	BootstrapTokenSecretPrefix   = "bootstrap-token-"
	BootstrapUserPrefix          = "system:bootstrap:"
	GroupBootstrappers           = "system:bootstrappers"
	BootstrapTokenIDKey          = "token-id"
	BootstrapTokenSecretKey      = "token-secret"
	BootstrapTokenExpirationKey  = "expiration"
	BootstrapTokenDescriptionKey = "description"
	BootstrapTokenExtraGroupsKey = "auth-extra-groups"
	BootstrapTokenUsagePrefix    = "usage-bootstrap-"
)

// BootstrapTokenPattern is a bootstrap token: 6 and 16 characters of
// [a-z0-9] joined by a dot.
var BootstrapTokenPattern = regexp.MustCompile(`^([a-z0-9]{6})\.([a-z0-9]{16})$`)

// SecretGetter reads a Secret (from the store, so a deleted token stops
// working at once).
type SecretGetter interface {
	GetSecret(namespace, name string) (*corev1.Secret, error)
}

// BootstrapTokens authenticates bootstrap tokens as kube-apiserver's
// bootstrap token authenticator does: the Secret must exist, not be
// deleting or expired, allow authentication, and hold the same secret.
// The user is system:bootstrap:<id> in system:bootstrappers and the
// Secret's auth-extra-groups.
type BootstrapTokens struct {
	secrets SecretGetter
	// Now is the clock; tests move it.
	Now func() time.Time
}

// NewBootstrapTokens authenticates against the Secrets of getter.
func NewBootstrapTokens(getter SecretGetter) *BootstrapTokens {
	return &BootstrapTokens{secrets: getter, Now: time.Now}
}

// AuthenticateRequest has no opinion on bearer tokens of another shape,
// and refuses (without saying why, as Kubernetes) a bootstrap-shaped
// token that is not valid.
func (b *BootstrapTokens) AuthenticateRequest(r *http.Request) (*User, bool, error) {
	tok, ok := bearerToken(r)
	if !ok {
		return nil, false, nil
	}
	m := BootstrapTokenPattern.FindStringSubmatch(tok)
	if m == nil {
		return nil, false, nil
	}
	id, secret := m[1], m[2]
	s, err := b.secrets.GetSecret("kube-system", BootstrapTokenSecretPrefix+id)
	if err != nil || s.Type != BootstrapTokenSecretType || s.DeletionTimestamp != nil {
		return nil, false, nil
	}
	get := func(k string) string {
		if v, ok := s.Data[k]; ok {
			return string(v)
		}
		return s.StringData[k]
	}
	if get(BootstrapTokenIDKey) != id || subtle.ConstantTimeCompare([]byte(get(BootstrapTokenSecretKey)), []byte(secret)) != 1 {
		return nil, false, nil
	}
	if exp := get(BootstrapTokenExpirationKey); exp != "" {
		t, err := time.Parse(time.RFC3339, exp)
		if err != nil || !b.Now().Before(t) {
			return nil, false, nil
		}
	}
	if get(BootstrapTokenUsagePrefix+"authentication") != "true" {
		return nil, false, nil
	}
	u := &User{Name: BootstrapUserPrefix + id, Groups: []string{GroupBootstrappers}}
	for _, g := range strings.Split(get(BootstrapTokenExtraGroupsKey), ",") {
		if g = strings.TrimSpace(g); strings.HasPrefix(g, GroupBootstrappers+":") {
			u.Groups = append(u.Groups, g)
		}
	}
	u.Groups = append(u.Groups, GroupAuthenticated)
	return u, true, nil
}

// WithBootstrapTokens tries bootstrap tokens before others (a static
// token file refuses tokens it does not know); a token of the bootstrap
// shape that is no valid bootstrap token still goes to others.
func WithBootstrapTokens(b *BootstrapTokens, others Authenticator) Authenticator {
	return bootstrapFirst{b: b, others: others}
}

type bootstrapFirst struct {
	b      *BootstrapTokens
	others Authenticator
}

func (a bootstrapFirst) AuthenticateRequest(r *http.Request) (*User, bool, error) {
	if u, ok, _ := a.b.AuthenticateRequest(r); ok {
		return u, true, nil
	}
	return a.others.AuthenticateRequest(r)
}
