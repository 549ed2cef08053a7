package authn_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/apiserver/authn"
)

const issuer = "https://kubernetes.default.svc.cluster.local"

// objects answers the authenticator's lookups from maps keyed
// "namespace/name"; a missing key is "not found".
type objects struct {
	sas     map[string]*corev1.ServiceAccount
	pods    map[string]*corev1.Pod
	secrets map[string]*corev1.Secret
	nodes   map[string]*corev1.Node // keyed "/name"
}

func lookup[T any](m map[string]*T, kind, ns, name string) (*T, error) {
	if o, ok := m[ns+"/"+name]; ok {
		return o, nil
	}
	return nil, fmt.Errorf("%s %q not found", kind, name)
}

func (o objects) GetServiceAccount(ns, name string) (*corev1.ServiceAccount, error) {
	return lookup(o.sas, "serviceaccounts", ns, name)
}
func (o objects) GetPod(ns, name string) (*corev1.Pod, error) {
	return lookup(o.pods, "pods", ns, name)
}
func (o objects) GetSecret(ns, name string) (*corev1.Secret, error) {
	return lookup(o.secrets, "secrets", ns, name)
}
func (o objects) GetNode(name string) (*corev1.Node, error) {
	return lookup(o.nodes, "nodes", "", name)
}

func newSigner(t *testing.T, iss string) *authn.TokenSigner {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := authn.NewTokenSigner(key, iss)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func authenticate(a authn.Authenticator, tok string) (*authn.User, bool, error) {
	r := httptest.NewRequest("GET", "/api", nil)
	if tok != "" {
		r.Header.Set("Authorization", "Bearer "+tok)
	}
	return a.AuthenticateRequest(r)
}

func TestServiceAccountTokens(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "builder", UID: "sa-uid"}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "pod-uid"}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "node-uid"}}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", UID: "secret-uid"}}
	signer := newSigner(t, issuer)
	podBound := authn.TokenBinding{Pod: pod, Node: node}
	issue := func(s *authn.TokenSigner, b authn.TokenBinding, auds []string, exp time.Duration) string {
		tok, err := s.Issue(sa, b, auds, t0, exp, 0)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	valid := issue(signer, podBound, []string{issuer}, time.Hour)
	wantPodUser := &authn.User{
		Name: "system:serviceaccount:ns:builder", UID: "sa-uid",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:ns", "system:authenticated"},
		Extra: map[string][]string{
			"authentication.kubernetes.io/pod-name":  {"web"},
			"authentication.kubernetes.io/pod-uid":   {"pod-uid"},
			"authentication.kubernetes.io/node-name": {"n1"},
			"authentication.kubernetes.io/node-uid":  {"node-uid"},
		},
	}
	// tamper changes the payload's namespace claim, keeping the signature.
	tamper := func(tok string) string {
		parts := strings.Split(tok, ".")
		payload, err := base64.RawURLEncoding.DecodeString(parts[1])
		if err != nil {
			t.Fatal(err)
		}
		parts[1] = base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(payload), `"pod-uid"`, `"pod-uiX"`, 1)))
		return strings.Join(parts, ".")
	}
	recreatedPod := pod.DeepCopy()
	recreatedPod.UID = "pod-uid-2"
	deletingLongAgo, deletingNow := pod.DeepCopy(), pod.DeepCopy()
	deletingLongAgo.DeletionTimestamp = &metav1.Time{Time: t0.Add(-2 * time.Minute)}
	deletingNow.DeletionTimestamp = &metav1.Time{Time: t0.Add(-30 * time.Second)}
	recreatedSA := sa.DeepCopy()
	recreatedSA.UID = "sa-uid-2"
	recreatedNode := node.DeepCopy()
	recreatedNode.UID = "node-uid-2"
	nodeBound := issue(signer, authn.TokenBinding{Node: node}, []string{issuer}, time.Hour)
	saGroups := []string{"system:serviceaccounts", "system:serviceaccounts:ns", "system:authenticated"}
	withNode := func(o objects, n *corev1.Node) objects {
		o.nodes = map[string]*corev1.Node{"/n1": n}
		return o
	}
	objs := func(sa *corev1.ServiceAccount, pod *corev1.Pod) objects {
		o := objects{sas: map[string]*corev1.ServiceAccount{}, pods: map[string]*corev1.Pod{}, secrets: map[string]*corev1.Secret{"ns/s": secret}}
		if sa != nil {
			o.sas["ns/builder"] = sa
		}
		if pod != nil {
			o.pods["ns/web"] = pod
		}
		return o
	}
	for _, tc := range []struct {
		name    string
		token   string
		now     time.Time
		objects objects
		want    *authn.User
		ok      bool
		err     string
	}{
		{name: "pod-bound", token: valid, now: t0.Add(time.Minute), objects: objs(sa, pod), want: wantPodUser, ok: true},
		{name: "expired within leeway", token: valid, now: t0.Add(time.Hour + 30*time.Second), objects: objs(sa, pod), want: wantPodUser, ok: true},
		{name: "expired", token: valid, now: t0.Add(time.Hour + 2*time.Minute), objects: objs(sa, pod), err: "service account token has expired"},
		{name: "not valid yet", token: valid, now: t0.Add(-2 * time.Minute), objects: objs(sa, pod), err: "not valid yet"},
		{name: "other audience", token: issue(signer, podBound, []string{"vault"}, time.Hour), now: t0, objects: objs(sa, pod), err: `token audiences ["vault"] is invalid for the target audiences`},
		{name: "other key", token: issue(newSigner(t, issuer), podBound, []string{issuer}, time.Hour), now: t0, objects: objs(sa, pod), err: "signature is invalid"},
		{name: "tampered", token: tamper(valid), now: t0, objects: objs(sa, pod), err: "signature is invalid"},
		{name: "pod deleted", token: valid, now: t0, objects: objs(sa, nil), err: `pods "web" not found`},
		{name: "pod recreated", token: valid, now: t0, objects: objs(sa, recreatedPod), err: "pod UID (pod-uid-2) does not match claim (pod-uid)"},
		{name: "pod terminating past leeway", token: valid, now: t0, objects: objs(sa, deletingLongAgo), err: "pod ns/web has been deleted"},
		{name: "pod terminating within leeway", token: valid, now: t0, objects: objs(sa, deletingNow), want: wantPodUser, ok: true},
		{name: "account deleted", token: valid, now: t0, objects: objs(nil, pod), err: `serviceaccounts "builder" not found`},
		{name: "account recreated", token: valid, now: t0, objects: objs(recreatedSA, pod), err: "service account UID (sa-uid-2) does not match claim (sa-uid)"},
		{name: "secret-bound", token: issue(signer, authn.TokenBinding{Secret: secret}, []string{issuer}, time.Hour), now: t0, objects: objs(sa, nil), ok: true,
			want: &authn.User{Name: "system:serviceaccount:ns:builder", UID: "sa-uid", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:ns", "system:authenticated"}}},
		{name: "node-bound", token: nodeBound, now: t0, objects: withNode(objs(sa, nil), node), ok: true,
			want: &authn.User{Name: "system:serviceaccount:ns:builder", UID: "sa-uid", Groups: saGroups,
				Extra: map[string][]string{"authentication.kubernetes.io/node-name": {"n1"}, "authentication.kubernetes.io/node-uid": {"node-uid"}}}},
		{name: "node recreated", token: nodeBound, now: t0, objects: withNode(objs(sa, nil), recreatedNode), err: "node UID (node-uid-2) does not match claim (node-uid)"},
		{name: "node gone", token: nodeBound, now: t0, objects: objs(sa, nil), err: `nodes "n1" not found`},
		{name: "pod-bound token of a node that is gone", token: valid, now: t0, objects: objs(sa, pod), want: wantPodUser, ok: true},
		{name: "other issuer", token: issue(newSigner(t, "https://elsewhere"), podBound, []string{issuer}, time.Hour), now: t0, objects: objs(sa, pod)},
		{name: "not a JWT", token: "abc123", now: t0, objects: objs(sa, pod)},
		{name: "no token", now: t0, objects: objs(sa, pod)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := authn.NewServiceAccountTokens(signer, []string{issuer}, tc.objects)
			a.Now = func() time.Time { return tc.now }
			u, ok, err := authenticate(a, tc.token)
			if ok != tc.ok || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("ok=%v err=%v, want ok=%v err containing %q", ok, err, tc.ok, tc.err)
			}
			if u != nil {
				// The credential id is the token's random jti.
				if id := u.Extra["authentication.kubernetes.io/credential-id"]; len(id) != 1 || !strings.HasPrefix(id[0], "JTI=") || len(id[0]) < 10 {
					t.Errorf("credential-id %q, want JTI=<jti>", id)
				}
				delete(u.Extra, "authentication.kubernetes.io/credential-id")
				if len(u.Extra) == 0 {
					u.Extra = nil
				}
			}
			if diff := cmp.Diff(tc.want, u); diff != "" {
				t.Errorf("user (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWithServiceAccounts: the static token file, which rejects tokens
// it does not know, must not see service-account tokens; both kinds of
// token work side by side, and a bad one of either kind is refused.
func TestWithServiceAccounts(t *testing.T) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "builder", UID: "sa-uid"}}
	signer := newSigner(t, issuer)
	tok, err := signer.Issue(sa, authn.TokenBinding{}, []string{issuer}, time.Now(), time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	wrongAud, err := signer.Issue(sa, authn.TokenBinding{}, []string{"vault"}, time.Now(), time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	tf, err := authn.ParseTokenFile(strings.NewReader("static,alice,1\n"), "t")
	if err != nil {
		t.Fatal(err)
	}
	sat := authn.NewServiceAccountTokens(signer, []string{issuer}, objects{sas: map[string]*corev1.ServiceAccount{"ns/builder": sa}})
	a := authn.WithServiceAccounts(sat, authn.Union{tf})
	for _, tc := range []struct {
		token, user string
		err         bool
	}{
		{token: tok, user: "system:serviceaccount:ns:builder"},
		{token: "static", user: "alice"},
		{token: wrongAud, err: true},
		{token: "unknown", err: true},
		{token: ""},
	} {
		u, ok, err := authenticate(a, tc.token)
		if (err != nil) != tc.err || ok != (tc.user != "") || (ok && u.Name != tc.user) {
			t.Errorf("token %.10q: user %v ok=%v err=%v, want user %q err=%v", tc.token, u, ok, err, tc.user, tc.err)
		}
	}
}
