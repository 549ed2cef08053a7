package kubelet

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Service-account token refresh, as the kubelet's token manager: a token
// is renewed once 80 % of its lifetime has passed or it is a day old,
// whichever comes first, with a little jitter so that the pods of a node
// do not all ask at once.
const (
	tokenMaxTTL    = 24 * time.Hour
	tokenMaxJitter = 10 * time.Second
)

// tokenManager caches the service-account tokens of projected volumes, so
// that the pod's every sync does not ask the API server for a new one.
type tokenManager struct {
	request func(ctx context.Context, namespace, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error)
	now     func() time.Time

	mu     sync.Mutex
	tokens map[tokenKey]*authenticationv1.TokenRequest
}

// tokenKey is what makes two requests ask for the same token.
type tokenKey struct {
	namespace, name, audiences string
	expirationSeconds          int64
	bound                      authenticationv1.BoundObjectReference
}

func newTokenManager(c *Client) *tokenManager {
	return &tokenManager{request: c.createToken, now: time.Now, tokens: map[tokenKey]*authenticationv1.TokenRequest{}}
}

func keyOf(namespace, name string, tr *authenticationv1.TokenRequest) tokenKey {
	k := tokenKey{namespace: namespace, name: name, audiences: fmt.Sprintf("%q", tr.Spec.Audiences)}
	if tr.Spec.ExpirationSeconds != nil {
		k.expirationSeconds = *tr.Spec.ExpirationSeconds
	}
	if tr.Spec.BoundObjectRef != nil {
		k.bound = *tr.Spec.BoundObjectRef
	}
	return k
}

// get returns the cached token for tr, or a new one when it is due for
// refresh. A failed refresh keeps the cached token while it is valid.
func (m *tokenManager) get(ctx context.Context, namespace, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	key := keyOf(namespace, name, tr)
	m.mu.Lock()
	cached := m.tokens[key]
	m.mu.Unlock()
	if cached != nil && !m.requiresRefresh(cached) {
		return cached, nil
	}
	fresh, err := m.request(ctx, namespace, name, tr)
	switch {
	case err == nil:
	case cached == nil:
		return nil, fmt.Errorf("failed to fetch token: %w", err)
	case m.now().After(cached.Status.ExpirationTimestamp.Time):
		return nil, fmt.Errorf("token %s/%s expired and refresh failed: %w", namespace, name, err)
	default:
		return cached, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	// Expired tokens of others are dropped here, as the kubelet's
	// periodic clean-up does.
	for k, t := range m.tokens {
		if m.now().After(t.Status.ExpirationTimestamp.Time) {
			delete(m.tokens, k)
		}
	}
	m.tokens[key] = fresh
	return fresh, nil
}

// requiresRefresh: older than 80 % of its lifetime, or than a day.
func (m *tokenManager) requiresRefresh(tr *authenticationv1.TokenRequest) bool {
	if tr.Spec.ExpirationSeconds == nil {
		return false
	}
	now := m.now()
	ttl := time.Duration(*tr.Spec.ExpirationSeconds) * time.Second
	exp := tr.Status.ExpirationTimestamp.Time
	iat := exp.Add(-ttl)
	jitter := time.Duration(rand.Float64() * float64(tokenMaxJitter))
	return now.After(iat.Add(tokenMaxTTL-jitter)) || now.After(exp.Add(-ttl/5-jitter))
}

// forgetPod drops the tokens bound to a pod that is gone.
func (m *tokenManager) forgetPod(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.tokens {
		if k.bound.UID == uid {
			delete(m.tokens, k)
		}
	}
}

// serviceAccountTokenFiles is a projected volume's serviceAccountToken
// source: a token of the pod's account bound to the pod, for the
// source's audience (the API server's when it names none).
func (w *podWorker) serviceAccountTokenFiles(ctx context.Context, pod *corev1.Pod, src *corev1.ServiceAccountTokenProjection, def *int32) (map[string]volumeFile, error) {
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: src.ExpirationSeconds,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID},
	}}
	if src.Audience != "" {
		tr.Spec.Audiences = []string{src.Audience}
	}
	out, err := w.m.tokens.get(ctx, pod.Namespace, pod.Spec.ServiceAccountName, tr)
	if err != nil {
		return nil, err
	}
	return map[string]volumeFile{src.Path: {[]byte(out.Status.Token), fileMode(nil, def)}}, nil
}

// createToken asks the API server for a token (serviceaccounts/token).
func (c *Client) createToken(ctx context.Context, namespace, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	out := &authenticationv1.TokenRequest{}
	return out, c.core.Post().Namespace(namespace).Resource("serviceaccounts").Name(name).SubResource("token").Body(tr).Do(ctx).Into(out)
}
