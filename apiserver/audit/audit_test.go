package audit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const samplePolicy = `
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  users: ["system:kube-proxy"]
- level: RequestResponse
  resources:
  - group: ""
    resources: ["configmaps"]
    resourceNames: ["audited"]
- level: Metadata
  resources:
  - group: ""
    resources: ["secrets", "pods/log", "*/status"]
- level: Request
  verbs: ["create"]
  namespaces: ["prod"]
- level: Metadata
  userGroups: ["ops"]
  nonResourceURLs: ["/healthz*"]
- level: Request
  resources:
  - group: "apps"
    resources: ["deployments/*"]
`

func TestPolicyLevels(t *testing.T) {
	p, err := ParsePolicy([]byte(samplePolicy))
	if err != nil {
		t.Fatal(err)
	}
	res := func(verb, group, resource, sub, ns, name string) Attributes {
		return Attributes{User: "jane", Verb: verb, ResourceRequest: true, APIGroup: group, Resource: resource, Subresource: sub, Namespace: ns, Name: name}
	}
	for _, tc := range []struct {
		a    Attributes
		want Level
	}{
		{Attributes{User: "system:kube-proxy", Verb: "get", ResourceRequest: true, Resource: "secrets"}, LevelNone},
		{res("get", "", "configmaps", "", "default", "audited"), LevelRequestResponse},
		{res("get", "", "configmaps", "", "default", "other"), LevelNone},
		{res("get", "", "secrets", "", "default", "s"), LevelMetadata},
		{res("get", "", "pods", "log", "default", "p"), LevelMetadata},
		{res("get", "", "pods", "", "default", "p"), LevelNone},
		{res("update", "", "pods", "status", "default", "p"), LevelMetadata},
		{res("update", "apps", "deployments", "status", "default", "d"), LevelRequest},
		{res("create", "", "pods", "", "prod", "p"), LevelRequest},
		{res("create", "", "nodes", "", "", "n"), LevelNone},
		{res("patch", "apps", "deployments", "", "default", "d"), LevelRequest},
		{res("patch", "apps", "deployments", "scale", "default", "d"), LevelRequest},
		{Attributes{User: "bob", Groups: []string{"ops"}, Verb: "get", Path: "/healthz/etcd"}, LevelMetadata},
		{Attributes{User: "bob", Groups: []string{"dev"}, Verb: "get", Path: "/healthz"}, LevelNone},
		{Attributes{User: "bob", Groups: []string{"ops"}, Verb: "get", Path: "/metrics"}, LevelNone},
	} {
		got, omit := p.LevelFor(tc.a)
		if got != tc.want {
			t.Errorf("%+v: level %s, want %s", tc.a, got, tc.want)
		}
		if got != LevelNone && !omit[StageRequestReceived] {
			t.Errorf("%+v: the policy's omitStages not applied", tc.a)
		}
	}
}

func TestPolicyErrors(t *testing.T) {
	for _, tc := range []struct{ policy, want string }{
		{"apiVersion: audit.k8s.io/v1beta1\nkind: Policy\nrules: [{level: None}]", "want audit.k8s.io/v1 Policy"},
		{"apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: []", "no rules"},
		{"apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Everything}]", `rules[0].level: Unsupported value: "Everything"`},
		{"apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, nonResourceURLs: [/x], namespaces: [a]}]", "rules cannot apply to both regular resources and non-resource URLs"},
		{"apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, nonResourceURLs: [x]}]", "non-resource URLs must begin with /"},
		{"apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, omitStages: [Later]}]", `rules[0].omitStages: Unsupported value: "Later"`},
		{"apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, resources: [{group: '', resourceNames: [a]}]}]", "using resourceNames requires at least one resource"},
		{"apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: None, user: [a]}]", "decoding audit policy"},
		{"{", "decoding audit policy"},
	} {
		_, err := ParsePolicy([]byte(tc.policy))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.policy, err, tc.want)
		}
	}
}

func FuzzParsePolicy(f *testing.F) {
	f.Add(samplePolicy)
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePolicy([]byte(s))
		if err != nil {
			return
		}
		p.LevelFor(Attributes{User: "u", Verb: "get", ResourceRequest: true, Resource: "pods"})
		p.LevelFor(Attributes{User: "u", Verb: "get", Path: "/x"})
	})
}

// The log file rotates past its size, and only the newest backups stay.
func TestLogRotates(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	l, err := OpenLog(path, Rotation{MaxSizeMB: 1, MaxBackups: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	big := strings.Repeat("x", 4096)
	for i := 0; i < 1200; i++ { // about 5 MB of events
		if err := l.Write(&Event{Level: LevelMetadata, RequestURI: "/api/v1/" + big, Verb: "get"}); err != nil {
			t.Fatal(err)
		}
	}
	// Old backups are removed in the background.
	var names []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		names = names[:0]
		for _, e := range entries {
			names = append(names, e.Name())
		}
		if len(names) == 3 || time.Now().After(deadline) {
			break
		}
	}
	if len(names) != 3 {
		t.Fatalf("files %v, want the log and 2 backups", names)
	}
	for _, n := range names {
		st, err := os.Stat(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > 1<<20 {
			t.Errorf("%s is %d bytes, over 1 MB", n, st.Size())
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %04o, want 0600", n, st.Mode().Perm())
		}
	}
}
