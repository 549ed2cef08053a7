package apiserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"bonsai.dev/bonsai/apiserver/audit"
	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/store"
)

// syncBuffer is a log the test reads while the server writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) events(t *testing.T) []audit.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return parseAuditEvents(t, s.b.Bytes())
}

// parseAuditEvents reads an audit log's events, one JSON object a line.
func parseAuditEvents(t *testing.T, data []byte) []audit.Event {
	t.Helper()
	var out []audit.Event
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev audit.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("audit line is not JSON: %v: %s", err, sc.Text())
		}
		out = append(out, ev)
	}
	return out
}

func TestAuditLog(t *testing.T) {
	policy, err := audit.ParsePolicy([]byte(`
apiVersion: audit.k8s.io/v1
kind: Policy
rules:
- level: None
  nonResourceURLs: ["/healthz*", "/readyz*"]
- level: RequestResponse
  resources: [{group: "", resources: ["configmaps"]}]
- level: Metadata
  omitStages: ["RequestReceived"]
`))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.OpenBadger(store.BadgerOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	tf, err := authn.ParseTokenFile(strings.NewReader("admin-token,admin,1,system:masters\njane-token,jane,2\n"), "tokens")
	if err != nil {
		t.Fatal(err)
	}
	buf := &syncBuffer{}
	s, err := New(Config{Store: st, Authenticator: authn.Union{tf}, AuditPolicy: policy, AuditLog: audit.NewLog(buf), AdvertiseAddress: netip.MustParseAddr("127.0.0.1"), SecurePort: 6443})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); st.Close() })

	body := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm"},"data":{"k":"v"}}`
	rec := serveAs(s, "POST", "/api/v1/namespaces/default/configmaps", "admin-token", body, nil)
	if rec.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	auditID := rec.Header().Get("Audit-Id")
	serveAs(s, "GET", "/api/v1/namespaces/default/secrets", "jane-token", "", http.Header{"X-Forwarded-For": {"203.0.113.9"}})
	serveAs(s, "GET", "/healthz", "jane-token", "", nil)
	serveAs(s, "GET", "/api/v1/namespaces/default/pods", "admin-token", "", http.Header{"Impersonate-User": {"bob"}})

	evs := buf.events(t)
	if len(evs) != 4 {
		for _, ev := range evs {
			t.Logf("%s %s %s", ev.Stage, ev.Verb, ev.RequestURI)
		}
		t.Fatalf("%d events, want 4 (create: 2 stages; secrets list and impersonated list: RequestReceived omitted; healthz: none)", len(evs))
	}
	recv, done := evs[0], evs[1]
	if recv.Stage != audit.StageRequestReceived || done.Stage != audit.StageResponseComplete || string(recv.AuditID) != auditID || done.AuditID != recv.AuditID {
		t.Errorf("create stages: %s %s, ids %s %s, header %s", recv.Stage, done.Stage, recv.AuditID, done.AuditID, auditID)
	}
	if done.APIVersion != "audit.k8s.io/v1" || done.Kind != "Event" || done.Level != audit.LevelRequestResponse || done.Verb != "create" ||
		done.User.Username != "admin" || done.ObjectRef == nil || done.ObjectRef.Resource != "configmaps" || done.ObjectRef.Namespace != "default" ||
		done.ResponseStatus == nil || done.ResponseStatus.Code != 201 || done.Annotations["authorization.k8s.io/decision"] != "allow" {
		t.Errorf("create event: %+v", done)
	}
	if !strings.Contains(string(done.RequestObject), `"k":"v"`) || !strings.Contains(string(done.ResponseObject), `"resourceVersion"`) {
		t.Errorf("create event bodies: request %s response %s", done.RequestObject, done.ResponseObject)
	}
	denied := evs[2]
	if denied.Stage != audit.StageResponseComplete || denied.Level != audit.LevelMetadata || denied.ResponseStatus.Code != 403 ||
		!strings.Contains(denied.ResponseStatus.Message, `User "jane" cannot list resource "secrets"`) ||
		denied.Annotations["authorization.k8s.io/decision"] != "forbid" || len(denied.RequestObject) != 0 ||
		len(denied.SourceIPs) == 0 || denied.SourceIPs[0] != "203.0.113.9" {
		t.Errorf("denied event: %+v", denied)
	}
	imp := evs[3]
	if imp.User.Username != "admin" || imp.ImpersonatedUser == nil || imp.ImpersonatedUser.Username != "bob" || imp.ResponseStatus.Code != 403 {
		t.Errorf("impersonated event: user %+v impersonated %+v status %+v", imp.User, imp.ImpersonatedUser, imp.ResponseStatus)
	}

	// A watch is long-running: ResponseStarted when it starts streaming,
	// ResponseComplete when it ends.
	serveAs(s, "GET", "/api/v1/namespaces/default/pods?watch=1&timeoutSeconds=1", "admin-token", "", nil)
	evs = buf.events(t)[4:]
	if len(evs) != 2 || evs[0].Stage != audit.StageResponseStarted || evs[1].Stage != audit.StageResponseComplete || evs[0].Verb != "watch" || evs[0].ResponseStatus.Code != 200 {
		t.Errorf("watch events: %+v", evs)
	}
}

// A request whose token does not authenticate is audited (no user, 401,
// the methods it tried) and logged at info level, at most a burst of
// five a second with a count of those left out.
func TestFailedAuthenticationAuditedAndLogged(t *testing.T) {
	policy, err := audit.ParsePolicy([]byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.OpenBadger(store.BadgerOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	tf, err := authn.ParseTokenFile(strings.NewReader("admin-token,admin,1,system:masters\n"), "tokens")
	if err != nil {
		t.Fatal(err)
	}
	buf, logs := &syncBuffer{}, &syncBuffer{}
	s, err := New(Config{Store: st, Authenticator: authn.Union{tf}, AuditPolicy: policy, AuditLog: audit.NewLog(buf),
		AdvertiseAddress: netip.MustParseAddr("127.0.0.1"), SecurePort: 6443, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); st.Close() })

	for i := 0; i < 20; i++ {
		if rec := serveAs(s, "GET", "/api/v1/namespaces/default/secrets", "guessed-token", "", nil); rec.Code != http.StatusUnauthorized {
			t.Fatalf("bad token: %d", rec.Code)
		}
	}
	evs := buf.events(t)
	if len(evs) != 20 {
		t.Fatalf("%d audit events for 20 failed requests", len(evs))
	}
	ev := evs[0]
	if ev.Stage != audit.StageResponseStarted || ev.User.Username != "" || ev.Verb != "list" || ev.ObjectRef == nil || ev.ObjectRef.Resource != "secrets" ||
		ev.ResponseStatus == nil || ev.ResponseStatus.Code != 401 || ev.ResponseStatus.Message != "Authentication failed, attempted: token" {
		t.Errorf("failed authentication event: %+v status %+v", ev, ev.ResponseStatus)
	}
	lines := strings.Count(logs.String(), `msg="authentication failed"`)
	if lines < 5 || lines > 8 {
		t.Errorf("%d log lines for 20 failures in well under a second, want the burst of 5 (and at most a few more):\n%s", lines, logs.String())
	}
	time.Sleep(1100 * time.Millisecond)
	serveAs(s, "GET", "/api/v1/namespaces/default/secrets", "guessed-token", "", nil)
	all := strings.Split(strings.TrimSpace(logs.String()), "\n")
	var left int
	if _, err := fmt.Sscanf(all[len(all)-1][strings.Index(all[len(all)-1], "suppressedSinceLast="):], "suppressedSinceLast=%d", &left); err != nil || left != 20-lines {
		t.Errorf("the line after the burst counts %d left out (%v), want %d:\n%s", left, err, 20-lines, logs.String())
	}
}
