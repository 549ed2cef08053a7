package apiserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/store"
)

// flowEnv is a server with three kinds of caller (a user, a node, an
// admin) and a webhook that holds every ConfigMap create for hold, so
// that requests stay in flight.
func flowEnv(t *testing.T, limits Limits, hold time.Duration) *Server {
	t.Helper()
	st, err := store.OpenBadger(store.BadgerOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	tf, err := authn.ParseTokenFile(strings.NewReader("admin-token,admin,1,system:masters\njane-token,jane,2\nnode-token,system:node:n1,3,system:nodes\n"), "tokens")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Store: st, Authenticator: authn.Union{tf}, AuthorizationMode: AuthorizationAlwaysAllow, Limits: limits,
		AdvertiseAddress: netip.MustParseAddr("127.0.0.1"), SecurePort: 6443})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); st.Close() })
	slow := newHookServer(t, func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		time.Sleep(hold)
		return &admissionv1.AdmissionResponse{Allowed: true}
	})
	cfg := admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "slow"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{urlHook("slow.example.com", slow, rule(opsCreate, "", "v1", "configmaps"))}}
	b, _ := json.Marshal(cfg)
	if rec := serveAs(s, "POST", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", "admin-token", string(b), nil); rec.Code != http.StatusCreated {
		t.Fatalf("webhook config: %d %s", rec.Code, rec.Body)
	}
	return s
}

func configMapBody(name string) string {
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q}}`, name)
}

// A user's flood of writes past --max-mutating-requests-inflight gets 429
// with Retry-After, while a node's Lease renewal and an admin's write,
// at the same moment, go through on seats of their own.
func TestFlowControlReservesNodeSeats(t *testing.T) {
	s := flowEnv(t, Limits{MaxRequestsInFlight: 4, MaxMutatingRequestsInFlight: 2}, 500*time.Millisecond)
	lease := `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"n1","namespace":"kube-node-lease"},"spec":{"holderIdentity":"n1"}}`
	if rec := serveAs(s, "POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", "node-token", lease, nil); rec.Code != http.StatusCreated {
		t.Fatalf("node lease: %d %s", rec.Code, rec.Body)
	}
	var mu sync.Mutex
	codes := map[int]int{}
	var tooMany *http.Response
	var wg sync.WaitGroup
	for i := 0; i < 12; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec := serveAs(s, "POST", "/api/v1/namespaces/default/configmaps", "jane-token", configMapBody(fmt.Sprintf("flood-%d", i)), nil)
			mu.Lock()
			defer mu.Unlock()
			codes[rec.Code]++
			if rec.Code == http.StatusTooManyRequests && tooMany == nil {
				tooMany = rec.Result()
			}
		}()
	}
	time.Sleep(150 * time.Millisecond) // the flood holds its seats
	start := time.Now()
	renewed := strings.Replace(lease, `"holderIdentity":"n1"`, `"holderIdentity":"n1","renewTime":"2026-11-28T00:00:00.000000Z"`, 1)
	rec := serveAs(s, "PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1", "node-token", renewed, nil)
	if rec.Code != http.StatusOK {
		t.Errorf("node lease renewal during the flood: %d %s", rec.Code, rec.Body)
	}
	if d := time.Since(start); d > 300*time.Millisecond {
		t.Errorf("node lease renewal took %v during the flood", d)
	}
	if rec := serveAs(s, "GET", "/api/v1/namespaces/default/configmaps", "jane-token", "", nil); rec.Code != http.StatusOK {
		t.Errorf("a read during a write flood: %d", rec.Code)
	}
	wg.Wait()
	if codes[http.StatusCreated] < 2 || codes[http.StatusTooManyRequests] == 0 || codes[http.StatusCreated]+codes[http.StatusTooManyRequests] != 12 {
		t.Fatalf("flood answers %v, want 2 or more 201 and the rest 429", codes)
	}
	if tooMany.Header.Get("Retry-After") != "1" {
		t.Errorf("429 without Retry-After: %v", tooMany.Header)
	}
	var st metav1.Status
	json.NewDecoder(tooMany.Body).Decode(&st)
	if st.Reason != metav1.StatusReasonTooManyRequests || st.Message != "Too many requests, please try again later." || st.Details == nil || st.Details.RetryAfterSeconds != 1 {
		t.Errorf("429 status %+v", st)
	}
	// system:masters is exempt, as kube-apiserver's exempt level.
	var adminWG sync.WaitGroup
	adminCodes := make([]int, 6)
	for i := range adminCodes {
		adminWG.Add(1)
		go func() {
			defer adminWG.Done()
			adminCodes[i] = serveAs(s, "POST", "/api/v1/namespaces/default/configmaps", "admin-token", configMapBody(fmt.Sprintf("admin-%d", i)), nil).Code
		}()
	}
	adminWG.Wait()
	for i, c := range adminCodes {
		if c != http.StatusCreated {
			t.Errorf("admin create %d: %d", i, c)
		}
	}
}

// A request that outlives its time gets kube-apiserver's 504 and stores
// nothing; ?timeout= shortens the server's limit, and a bad one is 400.
func TestRequestTimeout(t *testing.T) {
	s := flowEnv(t, Limits{RequestTimeout: 300 * time.Millisecond}, time.Second)
	start := time.Now()
	rec := serveAs(s, "POST", "/api/v1/namespaces/default/configmaps", "jane-token", configMapBody("slow"), nil)
	if rec.Code != http.StatusGatewayTimeout || !strings.Contains(rec.Body.String(), "request did not complete within requested timeout - context deadline exceeded") {
		t.Fatalf("slow create: %d %s", rec.Code, rec.Body)
	}
	if d := time.Since(start); d > 900*time.Millisecond {
		t.Errorf("504 after %v, want it at the 300 ms limit", d)
	}
	rec = serveAs(s, "POST", "/api/v1/namespaces/default/configmaps?timeout=100ms", "jane-token", configMapBody("slower"), nil)
	if rec.Code != http.StatusGatewayTimeout {
		t.Errorf("?timeout=100ms: %d", rec.Code)
	}
	rec = serveAs(s, "GET", "/api/v1/namespaces/default/configmaps?timeout=soon", "jane-token", "", nil)
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "invalid timeout specified in the request URL - ") {
		t.Errorf("?timeout=soon: %d %s", rec.Code, rec.Body)
	}
	time.Sleep(1200 * time.Millisecond) // the webhook answers after the 504
	for _, name := range []string{"slow", "slower"} {
		if rec := serveAs(s, "GET", "/api/v1/namespaces/default/configmaps/"+name, "admin-token", "", nil); rec.Code != http.StatusNotFound {
			t.Errorf("configmap %s after its 504: %d", name, rec.Code)
		}
	}
}

// One user holds at most --max-watches-per-user watches; a watch without
// timeoutSeconds ends between --min-request-timeout and twice it.
func TestWatchLimits(t *testing.T) {
	s := flowEnv(t, Limits{MaxWatchesPerUser: 2, MinRequestTimeout: 500 * time.Millisecond}, 0)
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			serveAs(s, "GET", "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=2", "jane-token", "", nil)
		}()
	}
	time.Sleep(300 * time.Millisecond)
	rec := serveAs(s, "GET", "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=2", "jane-token", "", nil)
	if rec.Code != http.StatusTooManyRequests || !strings.Contains(rec.Body.String(), `too many watches for user \"jane\": the limit is 2`) || rec.Header().Get("Retry-After") != "1" {
		t.Errorf("third watch: %d %s", rec.Code, rec.Body)
	}
	wg.Wait()
	start := time.Now()
	rec = serveAs(s, "GET", "/api/v1/namespaces/default/configmaps?watch=1", "jane-token", "", nil)
	if d := time.Since(start); rec.Code != http.StatusOK || d < 500*time.Millisecond || d > 1500*time.Millisecond {
		t.Errorf("watch without timeoutSeconds: %d after %v, want 200 ending in [0.5 s, 1 s)", rec.Code, d)
	}
}

// The node level queues: a burst of node requests past its seats waits
// for them rather than answer 429 (which would cost each node a second's
// back-off); past the queue, 429.
func TestNodeLevelQueues(t *testing.T) {
	p := newPriorityLevel("node", 1, 1)
	p.queued = make(chan struct{}, 1)
	req := httptest.NewRequest("PUT", "/", nil)
	if rec := httptest.NewRecorder(); !p.acquire(rec, req, p.mutating) {
		t.Fatalf("first request: %d, want a seat", rec.Code)
	}
	got := make(chan bool)
	go func() { got <- p.acquire(httptest.NewRecorder(), req, p.mutating) }()
	// Wait until the second is queued, then a third finds the queue full.
	for deadline := time.Now().Add(5 * time.Second); len(p.queued) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second request never queued")
		}
	}
	rec := httptest.NewRecorder()
	if p.acquire(rec, req, p.mutating) || rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("past the queue: %d %q, want 429 with Retry-After", rec.Code, rec.Header().Get("Retry-After"))
	}
	select {
	case <-got:
		t.Fatal("the queued request got a seat while none was free")
	case <-time.After(50 * time.Millisecond):
	}
	<-p.mutating // the first request ends
	if !<-got {
		t.Fatal("the queued request did not get the freed seat")
	}
	if len(p.queued) != 0 {
		t.Fatalf("%d still queued", len(p.queued))
	}
}
