package main

import (
	"strings"
	"testing"
	"time"

	"bonsai.dev/bonsai/apiserver/authn"
)

func TestTokenSecret(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	o := &tokenOptions{ttl: time.Hour, description: "for edge-2", groups: []string{defaultBootstrapGroup}, usages: []string{"signing", "authentication"}}
	s, tok, err := o.secret(now)
	if err != nil {
		t.Fatal(err)
	}
	m := authn.BootstrapTokenPattern.FindStringSubmatch(tok)
	if m == nil {
		t.Fatalf("token %q is not <6>.<16> of [a-z0-9]", tok)
	}
	d := s.StringData
	if s.Name != "bootstrap-token-"+m[1] || s.Namespace != "kube-system" || s.Type != "bootstrap.kubernetes.io/token" ||
		d["token-id"] != m[1] || d["token-secret"] != m[2] || d["expiration"] != "2026-01-02T04:04:05Z" || d["description"] != "for edge-2" ||
		d["auth-extra-groups"] != defaultBootstrapGroup || d["usage-bootstrap-authentication"] != "true" || d["usage-bootstrap-signing"] != "true" {
		t.Errorf("secret %+v", s)
	}
	o.ttl = 0
	if s, _, _ := o.secret(now); s.StringData["expiration"] != "" {
		t.Errorf("--ttl 0 expires: %q", s.StringData["expiration"])
	}
	_, tok2, _ := o.secret(now)
	if tok2 == tok {
		t.Errorf("two tokens alike: %s", tok)
	}
	for _, tc := range []struct {
		o    tokenOptions
		want string
	}{
		{tokenOptions{ttl: -time.Second, usages: []string{"signing"}}, "--ttl"},
		{tokenOptions{groups: []string{"admins"}, usages: []string{"signing"}}, `--groups: "admins" must start with "system:bootstrappers:"`},
		{tokenOptions{usages: []string{"everything"}}, `--usages: "everything"`},
		{tokenOptions{}, "--usages: at least one"},
	} {
		if _, _, err := tc.o.secret(now); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.o, err, tc.want)
		}
	}
}
