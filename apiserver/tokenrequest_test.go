package apiserver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"bonsai.dev/bonsai/apiserver/authn"
)

const testIssuer = "https://kubernetes.default.svc.cluster.local"

// tokenClaims decodes a JWT's payload without checking it: the tests of
// what the token says.
func tokenClaims(t *testing.T, tok string) map[string]any {
	t.Helper()
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("token %q is not a compact JWS", tok)
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// saFixture makes account "builder", node "n1", pod "web" running as
// the account on n1, and secret "s", in the default namespace.
type saFixture struct {
	sa     *corev1.ServiceAccount
	node   *corev1.Node
	pod    *corev1.Pod
	secret *corev1.Secret
}

func newSAFixture(t *testing.T, e *testEnv) saFixture {
	t.Helper()
	var f saFixture
	var err error
	if f.sa, err = e.cs.CoreV1().ServiceAccounts("default").Create(e.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "builder"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if f.node, err = e.cs.CoreV1().Nodes().Create(e.ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.pod = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.PodSpec{
		ServiceAccountName: "builder", NodeName: "n1",
		Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
	}}
	if f.pod, err = e.cs.CoreV1().Pods("default").Create(e.ctx, f.pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if f.secret, err = e.cs.CoreV1().Secrets("default").Create(e.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return f
}

func podRef(p *corev1.Pod) *authenticationv1.BoundObjectReference {
	return &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID}
}

func TestTokenRequestClaims(t *testing.T) {
	e := newTestEnv(t)
	f := newSAFixture(t, e)
	sas := e.cs.CoreV1().ServiceAccounts("default")
	saClaim := map[string]any{"name": "builder", "uid": string(f.sa.UID)}
	for _, tc := range []struct {
		name string
		spec authenticationv1.TokenRequestSpec
		// lifetime is exp-iat; status is how far the status's expiry
		// lies after the request.
		lifetime, status time.Duration
		aud              []any
		k8s              map[string]any
	}{
		{
			name: "defaults", lifetime: time.Hour, status: time.Hour, aud: []any{testIssuer},
			k8s: map[string]any{"namespace": "default", "serviceaccount": saClaim},
		},
		{
			name: "pod-bound, audiences", spec: authenticationv1.TokenRequestSpec{Audiences: []string{"vault", "api"}, ExpirationSeconds: ptrTo[int64](600), BoundObjectRef: podRef(f.pod)},
			lifetime: 10 * time.Minute, status: 10 * time.Minute, aud: []any{"vault", "api"},
			k8s: map[string]any{"namespace": "default", "serviceaccount": saClaim,
				"pod":  map[string]any{"name": "web", "uid": string(f.pod.UID)},
				"node": map[string]any{"name": "n1", "uid": string(f.node.UID)}},
		},
		{
			name: "kubelet's legacy 3607 s token lives a year and warns after 3607 s", spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrTo[int64](3607), BoundObjectRef: podRef(f.pod)},
			lifetime: extendedTokenExpiration, status: 3607 * time.Second, aud: []any{testIssuer},
			k8s: map[string]any{"namespace": "default", "serviceaccount": saClaim,
				"pod":  map[string]any{"name": "web", "uid": string(f.pod.UID)},
				"node": map[string]any{"name": "n1", "uid": string(f.node.UID)}},
		},
		{
			name: "3607 s for another audience is not extended", spec: authenticationv1.TokenRequestSpec{Audiences: []string{"vault"}, ExpirationSeconds: ptrTo[int64](3607), BoundObjectRef: podRef(f.pod)},
			lifetime: 3607 * time.Second, status: 3607 * time.Second, aud: []any{"vault"},
			k8s: map[string]any{"namespace": "default", "serviceaccount": saClaim,
				"pod":  map[string]any{"name": "web", "uid": string(f.pod.UID)},
				"node": map[string]any{"name": "n1", "uid": string(f.node.UID)}},
		},
		{
			name: "node-bound", spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Node", Name: "n1", UID: f.node.UID}},
			lifetime: time.Hour, status: time.Hour, aud: []any{testIssuer},
			k8s: map[string]any{"namespace": "default", "serviceaccount": saClaim, "node": map[string]any{"name": "n1", "uid": string(f.node.UID)}},
		},
		{
			name: "secret-bound", spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Secret", Name: "s"}},
			lifetime: time.Hour, status: time.Hour, aud: []any{testIssuer},
			k8s: map[string]any{"namespace": "default", "serviceaccount": saClaim, "secret": map[string]any{"name": "s", "uid": string(f.secret.UID)}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := time.Now().Truncate(time.Second)
			tr, err := sas.CreateToken(e.ctx, "builder", &authenticationv1.TokenRequest{Spec: tc.spec}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			after := time.Now()
			if tr.Name != "builder" || tr.Namespace != "default" {
				t.Errorf("token request names %s/%s", tr.Namespace, tr.Name)
			}
			if exp := tr.Status.ExpirationTimestamp.Time; exp.Before(before.Add(tc.status)) || exp.After(after.Add(tc.status)) {
				t.Errorf("status expiry %v, want %v after the request", exp, tc.status)
			}
			c := tokenClaims(t, tr.Status.Token)
			iat := int64(c["iat"].(float64))
			if iat < before.Unix() || iat > after.Unix() {
				t.Errorf("iat %d not within the request", iat)
			}
			if got := int64(c["exp"].(float64)) - iat; got != int64(tc.lifetime.Seconds()) {
				t.Errorf("exp-iat = %d, want %v", got, tc.lifetime)
			}
			if c["nbf"] != c["iat"] {
				t.Errorf("nbf %v, want iat %v", c["nbf"], c["iat"])
			}
			if jti, _ := c["jti"].(string); len(jti) < 32 {
				t.Errorf("jti %q", jti)
			}
			k8s := c["kubernetes.io"].(map[string]any)
			if tc.status != tc.lifetime {
				if got := int64(k8s["warnafter"].(float64)) - iat; got != int64(tc.status.Seconds()) {
					t.Errorf("warnafter-iat = %d, want %v", got, tc.status)
				}
				delete(k8s, "warnafter")
			}
			want := map[string]any{"iss": testIssuer, "sub": "system:serviceaccount:default:builder", "aud": tc.aud, "kubernetes.io": tc.k8s}
			for _, k := range []string{"iat", "exp", "nbf", "jti"} {
				delete(c, k)
			}
			if diff := cmp.Diff(want, c); diff != "" {
				t.Errorf("claims (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTokenRequestErrors(t *testing.T) {
	e := newTestEnv(t)
	newSAFixture(t, e)
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	if _, err := e.cs.CoreV1().Pods("default").Create(e.ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		sa      string
		req     authenticationv1.TokenRequest
		code    int32
		reason  metav1.StatusReason
		message string
	}{
		{"too short", "builder", authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrTo[int64](599)}},
			422, metav1.StatusReasonInvalid, `TokenRequest.authentication.k8s.io "" is invalid: spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes`},
		{"too long", "builder", authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrTo[int64](1<<32 + 1)}},
			422, metav1.StatusReasonInvalid, `may not specify a duration larger than 2^32 seconds`},
		{"no such account", "nope", authenticationv1.TokenRequest{},
			404, metav1.StatusReasonNotFound, `serviceaccounts "nope" not found`},
		{"name differs from the URL", "builder", authenticationv1.TokenRequest{ObjectMeta: metav1.ObjectMeta{Name: "x"}},
			422, metav1.StatusReasonInvalid, `metadata.name: Invalid value: "x": must match the service account name if specified`},
		{"no such pod", "builder", authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: "nope"}}},
			404, metav1.StatusReasonNotFound, `pods "nope" not found`},
		{"pod uid differs", "builder", authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: "web", UID: types.UID("old")}}},
			409, metav1.StatusReasonConflict, `the UID in the bound object reference (old) does not match the UID in record. The object might have been deleted and then recreated`},
		{"pod runs as another account", "builder", authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: podRef(other)}},
			400, metav1.StatusReasonBadRequest, `cannot bind token for serviceaccount "builder" to pod running with different serviceaccount name.`},
		{"unsupported kind", "builder", authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "d"}}},
			400, metav1.StatusReasonBadRequest, `cannot bind token to object of type apps/v1, Kind=Deployment`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.cs.CoreV1().ServiceAccounts("default").CreateToken(e.ctx, tc.sa, &tc.req, metav1.CreateOptions{})
			var st apierrors.APIStatus
			if !errorsAs(err, &st) {
				t.Fatalf("err %v is not a Status", err)
			}
			s := st.Status()
			if s.Code != tc.code || s.Reason != tc.reason || !strings.Contains(s.Message, tc.message) {
				t.Errorf("got %d %s %q, want %d %s %q", s.Code, s.Reason, s.Message, tc.code, tc.reason, tc.message)
			}
		})
	}
}

func errorsAs(err error, st *apierrors.APIStatus) bool {
	s, ok := err.(apierrors.APIStatus)
	if ok {
		*st = s
	}
	return ok
}

func TestTokenRequestDiscovery(t *testing.T) {
	e := newTestEnv(t)
	list, err := e.cs.Discovery().ServerResourcesForGroupVersion("v1")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range list.APIResources {
		if r.Name == "serviceaccounts/token" {
			if r.Group != "authentication.k8s.io" || r.Version != "v1" || r.Kind != "TokenRequest" || !cmp.Equal([]string(r.Verbs), []string{"create"}) {
				t.Errorf("serviceaccounts/token: %+v", r)
			}
			return
		}
	}
	t.Fatal("serviceaccounts/token not in discovery")
}

// authEnv is a server that authenticates (a static token "admin-token"
// for an admin), with the fixture of newSAFixture; its clientset is
// in-process, past authentication.
func authEnv(t *testing.T) (*testEnv, saFixture) {
	t.Helper()
	// These tests are about who is asking; what they may do is
	// authorization's (rbac_test.go).
	s, st := newAuthServer(t, "admin-token,admin,1,system:masters\n", AuthorizationAlwaysAllow)
	cfg := s.ClientConfig(&authn.User{Name: "test-admin", Groups: []string{authn.GroupMasters}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	e := &testEnv{s: s, st: st, cs: kubernetes.NewForConfigOrDie(cfg), cfg: cfg, ctx: ctx}
	return e, newSAFixture(t, e)
}

func bearerRequest(token string) *http.Request {
	req := httptest.NewRequest(http.MethodGet, "/api", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	return req
}

func httpGet(s *Server, path, token string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	return rec
}

func TestServiceAccountTokenAuthentication(t *testing.T) {
	e, f := authEnv(t)
	sas, pods := e.cs.CoreV1().ServiceAccounts("default"), e.cs.CoreV1().Pods("default")
	newToken := func(spec authenticationv1.TokenRequestSpec) string {
		t.Helper()
		tr, err := sas.CreateToken(e.ctx, "builder", &authenticationv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	podToken := newToken(authenticationv1.TokenRequestSpec{BoundObjectRef: podRef(f.pod)})
	plain := newToken(authenticationv1.TokenRequestSpec{})
	vault := newToken(authenticationv1.TokenRequestSpec{Audiences: []string{"vault"}})

	u, ok, err := e.s.cfg.Authenticator.AuthenticateRequest(bearerRequest(podToken))
	if err != nil || !ok {
		t.Fatalf("pod-bound token: ok=%v err=%v", ok, err)
	}
	jti := tokenClaims(t, podToken)["jti"].(string)
	want := map[string][]string{
		"authentication.kubernetes.io/pod-name":      {"web"},
		"authentication.kubernetes.io/pod-uid":       {string(f.pod.UID)},
		"authentication.kubernetes.io/node-name":     {"n1"},
		"authentication.kubernetes.io/node-uid":      {string(f.node.UID)},
		"authentication.kubernetes.io/credential-id": {"JTI=" + jti},
	}
	if u.Name != "system:serviceaccount:default:builder" || u.UID != string(f.sa.UID) ||
		!cmp.Equal(u.Groups, []string{"system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"}) {
		t.Errorf("user %+v", u)
	}
	if diff := cmp.Diff(want, u.Extra); diff != "" {
		t.Errorf("extra (-want +got):\n%s", diff)
	}

	const podsPath = "/api/v1/namespaces/default/pods"
	for _, tc := range []struct {
		name, token string
		code        int
	}{
		{"pod-bound", podToken, 200},
		{"unbound", plain, 200},
		{"static token beside them", "admin-token", 200},
		{"other audience", vault, 401},
		{"tampered", plain[:len(plain)-4] + "AAAA", 401},
		{"anonymous", "", 401},
	} {
		if rec := httpGet(e.s, podsPath, tc.token); rec.Code != tc.code {
			t.Errorf("%s: GET pods %d, want %d: %s", tc.name, rec.Code, tc.code, rec.Body)
		}
	}

	// Another server's key: same issuer, other signature.
	other, _ := newTestServer(t)
	foreign, err := other.saSigner.Issue(f.sa, authn.TokenBinding{}, []string{testIssuer}, time.Now(), time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	if rec := httpGet(e.s, podsPath, foreign); rec.Code != 401 {
		t.Errorf("token of another key: %d, want 401", rec.Code)
	}

	// The pod goes and comes back with a new uid: its token is dead.
	if err := pods.Delete(e.ctx, "web", metav1.DeleteOptions{GracePeriodSeconds: ptrTo[int64](0)}); err != nil {
		t.Fatal(err)
	}
	if rec := httpGet(e.s, podsPath, podToken); rec.Code != 401 {
		t.Errorf("token of a deleted pod: %d, want 401", rec.Code)
	}
	again := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.PodSpec{ServiceAccountName: "builder", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	if _, err := pods.Create(e.ctx, again, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if rec := httpGet(e.s, podsPath, podToken); rec.Code != 401 {
		t.Errorf("token of a recreated pod: %d, want 401", rec.Code)
	}
	if rec := httpGet(e.s, podsPath, plain); rec.Code != 200 {
		t.Errorf("unbound token after the pod went: %d, want 200", rec.Code)
	}

	// The account goes and comes back: every token of it is dead.
	if err := sas.Delete(e.ctx, "builder", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := sas.Create(e.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "builder"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if rec := httpGet(e.s, podsPath, plain); rec.Code != 401 {
		t.Errorf("token of a recreated account: %d, want 401", rec.Code)
	}
}

func TestServiceAccountIssuerDiscovery(t *testing.T) {
	e, _ := authEnv(t)
	rec := httpGet(e.s, "/.well-known/openid-configuration", "admin-token")
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("openid-configuration: %d %s", rec.Code, rec.Header().Get("Content-Type"))
	}
	var doc map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"issuer":                                testIssuer,
		"jwks_uri":                              "https://127.0.0.1:6443/openid/v1/jwks",
		"response_types_supported":              []any{"id_token"},
		"subject_types_supported":               []any{"public"},
		"id_token_signing_alg_values_supported": []any{"ES256"},
	}
	if diff := cmp.Diff(want, doc); diff != "" {
		t.Errorf("discovery document (-want +got):\n%s", diff)
	}
	if rec := httpGet(e.s, "/.well-known/openid-configuration", ""); rec.Code != 401 {
		t.Errorf("anonymous discovery: %d, want 401", rec.Code)
	}

	rec = httpGet(e.s, "/openid/v1/jwks", "admin-token")
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/jwk-set+json" {
		t.Fatalf("jwks: %d %s", rec.Code, rec.Header().Get("Content-Type"))
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(rec.Body.Bytes(), &set); err != nil {
		t.Fatal(err)
	}
	tr, err := e.cs.CoreV1().ServiceAccounts("default").CreateToken(e.ctx, "builder", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.ParseSigned(tr.Status.Token, []jose.SignatureAlgorithm{jose.ES256})
	if err != nil {
		t.Fatal(err)
	}
	keys := set.Key(tok.Headers[0].KeyID)
	if len(keys) != 1 || keys[0].Use != "sig" || keys[0].Algorithm != "ES256" || !keys[0].IsPublic() {
		t.Fatalf("jwks has no public signing key %q: %+v", tok.Headers[0].KeyID, set)
	}
	var claims jwt.Claims
	if err := tok.Claims(keys[0].Key, &claims); err != nil {
		t.Fatalf("the published key does not verify a token: %v", err)
	}
	if claims.Subject != "system:serviceaccount:default:builder" {
		t.Errorf("sub %q", claims.Subject)
	}
}
