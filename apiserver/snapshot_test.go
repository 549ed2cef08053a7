package apiserver

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/apiserver/authz"
	"bonsai.dev/bonsai/store"
)

// TestSnapshotEndpoint: only system:masters may take a snapshot, even
// under AlwaysAllow (it holds every Secret); theirs is a whole snapshot
// of the store, named by its backend, with encrypted values as stored.
func TestSnapshotEndpoint(t *testing.T) {
	s, st := newAuthServerWith(t, "admin-token,admin,1,system:masters\nbob-token,bob,2\n", Config{AuthorizationMode: AuthorizationAlwaysAllow})
	rev, err := st.CurrentRevision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ token, want string }{{"bob-token", "forbidden: only members of system:masters may take a snapshot of the datastore"}, {"", ""}} {
		rr := serveAs(s, http.MethodGet, snapshotPath, tc.token, "", nil)
		var status metav1.Status
		json.Unmarshal(rr.Body.Bytes(), &status)
		if rr.Code/100 != 4 || tc.want != "" && status.Message != tc.want {
			t.Errorf("snapshot as %q: %d %q, want a 4xx %q", tc.token, rr.Code, status.Message, tc.want)
		}
	}
	rr := serveAs(s, http.MethodGet, snapshotPath, "admin-token", "", nil)
	if rr.Code != http.StatusOK || rr.Header().Get(SnapshotBackendHeader) != "badger" {
		t.Fatalf("snapshot as admin: %d %v", rr.Code, rr.Header())
	}
	info, err := store.CheckSnapshot(bytes.NewReader(rr.Body.Bytes()))
	if err != nil || info.Revision < rev || info.Keys == 0 || info.Backend != "badger" {
		t.Fatalf("snapshot: %+v %v, want one at revision >= %d", info, err, rev)
	}
}

// TestSnapshotIsLongRunning: a snapshot's time grows with the store; the
// request timeout must not cut it.
func TestSnapshotIsLongRunning(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, snapshotPath, nil)
	if !longRunning(authz.RequestAttributes(r, &authn.User{})) {
		t.Error("GET /bonsai/snapshot is not long-running")
	}
}
