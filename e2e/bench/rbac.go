package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"bonsai.dev/bonsai/apiserver"
	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/store"
)

// rbacSuite measures what authorization adds to a request: the same GET
// of a ConfigMap, by a token-file user bound by one of 1,000
// RoleBindings in the namespace, through the whole handler chain of two
// API servers over one store, one under RBAC and one under AlwaysAllow.
// Requests alternate between the two in batches so that both see the
// same machine; the row is the difference of their medians.
func rbacSuite(ctx context.Context, b *bench) ([]Row, error) {
	const bindings = 1000
	requests := 20000
	if b.quick {
		requests = 6000
	}
	var overhead, p50 *float64
	rows := func() []Row {
		return []Row{
			{Name: fmt.Sprintf("rbac: authorization overhead per request (%s RoleBindings, p50 RBAC - p50 AlwaysAllow)", fmtNum(bindings)), Unit: "µs", Bonsai: overhead, Target: atMost(50, "µs")},
			{Name: "rbac: GET of a ConfigMap under RBAC, in-process, p50", Unit: "µs", Bonsai: p50},
		}
	}
	dir := filepath.Join(b.dir, "rbac")
	defer os.RemoveAll(dir)
	st, err := store.OpenBadger(store.BadgerOptions{Dir: dir})
	if err != nil {
		return rows(), err
	}
	defer st.Close()
	tokens, err := authn.ParseTokenFile(strings.NewReader("bench-token,user-500,500\n"), "bench")
	if err != nil {
		return rows(), err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	servers := map[string]*apiserver.Server{}
	for _, mode := range []string{apiserver.AuthorizationRBAC, apiserver.AuthorizationAlwaysAllow} {
		s, err := apiserver.New(apiserver.Config{Store: st, Authenticator: authn.Union{tokens}, AuthorizationMode: mode, Logger: quiet})
		if err != nil {
			return rows(), err
		}
		defer s.Shutdown()
		servers[mode] = s
	}
	admin := kubernetes.NewForConfigOrDie(servers[apiserver.AuthorizationRBAC].ClientConfig(&authn.User{Name: "bench-admin", Groups: []string{authn.GroupMasters}}))
	b.logf("rbac: %d RoleBindings", bindings)
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}, metav1.CreateOptions{}); err != nil {
		return rows(), err
	}
	if _, err := admin.CoreV1().ConfigMaps("bench").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
		return rows(), err
	}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-configmap-reader"},
		Rules:      []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}}},
	}, metav1.CreateOptions{}); err != nil {
		return rows(), err
	}
	for i := 0; i < bindings; i++ {
		if _, err := admin.RbacV1().RoleBindings("bench").Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("b-%d", i)},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "bench-configmap-reader"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: fmt.Sprintf("user-%d", i)}},
		}, metav1.CreateOptions{}); err != nil {
			return rows(), err
		}
	}
	get := func(s *apiserver.Server) (time.Duration, int) {
		req := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/bench/configmaps/c", nil)
		req.Header.Set("Authorization", "Bearer bench-token")
		req.Header.Set("Accept", "application/json")
		rec := httptest.NewRecorder()
		t0 := time.Now()
		s.Handler().ServeHTTP(rec, req)
		return time.Since(t0), rec.Code
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, code := get(servers[apiserver.AuthorizationRBAC]); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			return rows(), fmt.Errorf("rbac: user-500 still not allowed after 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.logf("rbac: %d GETs under each mode", requests)
	lat := map[string][]time.Duration{}
	const batch = 500
	for done := 0; done < requests; done += batch {
		for _, mode := range []string{apiserver.AuthorizationRBAC, apiserver.AuthorizationAlwaysAllow} {
			for i := 0; i < batch; i++ {
				d, code := get(servers[mode])
				if code != http.StatusOK {
					return rows(), fmt.Errorf("rbac: GET under %s: %d", mode, code)
				}
				lat[mode] = append(lat[mode], d)
			}
		}
		if ctx.Err() != nil {
			return rows(), ctx.Err()
		}
	}
	med := func(d []time.Duration) float64 {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return float64(d[len(d)/2]) / float64(time.Microsecond)
	}
	r, a := med(lat[apiserver.AuthorizationRBAC]), med(lat[apiserver.AuthorizationAlwaysAllow])
	overhead, p50 = num(r-a), num(r)
	b.note("rbac: GET p50 %.1f µs under RBAC, %.1f µs under AlwaysAllow (in-process handler chain, same store)", r, a)
	return rows(), nil
}
