package apiserver

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	crdclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/typed/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"

	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/apiserver/pki"
)

// wardleServer is a real aggregated API server over HTTPS on 127.0.0.1:
// its serving certificate names wardle.default.svc, and it trusts only
// client certificates of the front-proxy CA with an allowed name, as
// k8s.io/apiserver's request-header authenticator does, reading the
// identity from the headers the ConfigMap names.
type wardleServer struct {
	srv  *httptest.Server
	port int32
	ca   []byte

	mu       sync.Mutex
	seen     []http.Header // headers of every authenticated request
	rejected int
	// watchGo lets the second watch event out.
	watchGo chan struct{}
	// conns counts the connections made to it.
	conns atomic.Int32
}

const wardleGroup = "wardle.example.com"

func newWardleServer(t *testing.T, auth map[string]string) *wardleServer {
	t.Helper()
	certs, err := pki.Ensure(t.TempDir(), pki.SANs{DNSNames: []string{"wardle.default.svc"}, IPs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(auth["requestheader-client-ca-file"])) {
		t.Fatal("requestheader-client-ca-file holds no certificate")
	}
	var allowed, userHeaders, groupHeaders, extraPrefixes []string
	for key, into := range map[string]*[]string{"requestheader-allowed-names": &allowed, "requestheader-username-headers": &userHeaders,
		"requestheader-group-headers": &groupHeaders, "requestheader-extra-headers-prefix": &extraPrefixes} {
		if err := json.Unmarshal([]byte(auth[key]), into); err != nil {
			t.Fatalf("%s: %v", key, err)
		}
	}
	ws := &wardleServer{ca: certs.CA.CertPEM, watchGo: make(chan struct{})}
	resources := &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: wardleGroup + "/v1",
		APIResources: []metav1.APIResource{
			{Name: "flunders", SingularName: "flunder", Namespaced: true, Kind: "Flunder", Verbs: metav1.Verbs{"get", "list", "watch"}, ShortNames: []string{"fl"}},
			{Name: "flunders/status", Namespaced: true, Kind: "Flunder", Verbs: metav1.Verbs{"get"}},
		}}
	flunder := func(name string) map[string]any {
		return map[string]any{"apiVersion": wardleGroup + "/v1", "kind": "Flunder", "metadata": map[string]any{"name": name, "namespace": "default", "resourceVersion": "1"}}
	}
	ws.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.PeerCertificates) == 0 || !slices.Contains(allowed, r.TLS.PeerCertificates[0].Subject.CommonName) {
			ws.mu.Lock()
			ws.rejected++
			ws.mu.Unlock()
			http.Error(w, "not the front proxy", http.StatusUnauthorized)
			return
		}
		if r.Header.Get(userHeaders[0]) == "" {
			http.Error(w, "no user", http.StatusUnauthorized)
			return
		}
		ws.mu.Lock()
		ws.seen = append(ws.seen, r.Header.Clone())
		ws.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/apis/"+wardleGroup+"/v1":
			json.NewEncoder(w).Encode(resources)
		case r.URL.Path == "/openapi/v3/apis/"+wardleGroup+"/v1":
			w.Write([]byte(wardleOpenAPI))
		case r.URL.Path == "/apis/"+wardleGroup+"/v1/namespaces/default/flunders" && r.URL.Query().Get("watch") == "1":
			enc := json.NewEncoder(w)
			enc.Encode(map[string]any{"type": "ADDED", "object": flunder("first")})
			w.(http.Flusher).Flush()
			select {
			case <-ws.watchGo:
			case <-r.Context().Done():
				return
			}
			enc.Encode(map[string]any{"type": "ADDED", "object": flunder("second")})
		case r.URL.Path == "/apis/"+wardleGroup+"/v1/namespaces/default/flunders":
			json.NewEncoder(w).Encode(map[string]any{"apiVersion": wardleGroup + "/v1", "kind": "FlunderList", "metadata": map[string]any{"resourceVersion": "1"},
				"items": []any{flunder("first")}})
		default:
			http.NotFound(w, r)
		}
	}))
	ws.srv.TLS = &tls.Config{Certificates: []tls.Certificate{*certs.Serving.Current()}, ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: pool}
	ws.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			ws.conns.Add(1)
		}
	}
	ws.srv.StartTLS()
	t.Cleanup(ws.srv.Close)
	ws.port = int32(netip.MustParseAddrPort(ws.srv.Listener.Addr().String()).Port())
	return ws
}

const wardleOpenAPI = `{"openapi":"3.0.0","info":{"title":"wardle","version":"v1"},"paths":{},"components":{"schemas":{"com.example.wardle.v1.Flunder":{"type":"object"}}}}`

func (ws *wardleServer) last() http.Header {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.seen[len(ws.seen)-1]
}

// lastCall is the headers of the last request that was not the
// aggregator's own availability check, which runs in between.
func (ws *wardleServer) lastCall() http.Header {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for i := len(ws.seen) - 1; i >= 0; i-- {
		if ws.seen[i].Get("X-Remote-User") != "system:kube-aggregator" {
			return ws.seen[i]
		}
	}
	return http.Header{}
}

func (ws *wardleServer) count() int {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return len(ws.seen)
}

func wardleAPIService(ca []byte) *apiregistrationv1.APIService {
	return &apiregistrationv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: "v1." + wardleGroup},
		Spec: apiregistrationv1.APIServiceSpec{Group: wardleGroup, Version: "v1", CABundle: ca, GroupPriorityMinimum: 1000, VersionPriority: 15,
			Service: &apiregistrationv1.ServiceReference{Namespace: "default", Name: "wardle"}},
	}
}

// waitAvailable waits for the APIService's Available condition to have
// status and reason.
func waitAvailable(t *testing.T, e *rbacEnv, name string, status apiregistrationv1.ConditionStatus, reason string) *apiregistrationv1.APIServiceCondition {
	t.Helper()
	var got *apiregistrationv1.APIServiceCondition
	eventually(t, fmt.Sprintf("APIService %s Available=%s (%s)", name, status, reason), func() error {
		as := &apiregistrationv1.APIService{}
		if err := e.admin.CoreV1().RESTClient().Get().AbsPath("/apis/apiregistration.k8s.io/v1/apiservices", name).Do(e.ctx).Into(as); err != nil {
			return err
		}
		for i, c := range as.Status.Conditions {
			if c.Type == apiregistrationv1.Available {
				got = &as.Status.Conditions[i]
			}
		}
		if got == nil || got.Status != status || got.Reason != reason {
			return fmt.Errorf("conditions %+v", as.Status.Conditions)
		}
		return nil
	})
	return got
}

// apiServiceRow is the server-side table row kubectl shows for name.
func apiServiceRow(t *testing.T, e *rbacEnv, name string) []any {
	t.Helper()
	rec := serveAs(e.s, "GET", "/apis/apiregistration.k8s.io/v1/apiservices/"+name, "admin-token", "", http.Header{"Accept": {"application/json;as=Table;v=v1;g=meta.k8s.io"}})
	var tbl metav1.Table
	if err := json.Unmarshal(rec.Body.Bytes(), &tbl); err != nil || len(tbl.Rows) != 1 {
		t.Fatalf("table: %v %s", err, rec.Body)
	}
	var names []string
	for _, c := range tbl.ColumnDefinitions {
		names = append(names, c.Name)
	}
	if !slices.Equal(names, []string{"Name", "Service", "Available", "Age"}) {
		t.Errorf("columns %q", names)
	}
	return tbl.Rows[0].Cells[:3]
}

func createAPIService(e *rbacEnv, as *apiregistrationv1.APIService) error {
	return e.admin.CoreV1().RESTClient().Post().AbsPath("/apis/apiregistration.k8s.io/v1/apiservices").Body(as).Do(e.ctx).Error()
}

func TestAPIServiceLocalAndValidation(t *testing.T) {
	e := newRBACEnv(t, "RBAC")
	// Every built-in group version has its local APIService, available.
	for _, name := range []string{"v1.", "v1.apps", "v1.apiregistration.k8s.io", "v1.rbac.authorization.k8s.io"} {
		c := waitAvailable(t, e, name, apiregistrationv1.ConditionTrue, "Local")
		if c.Message != "Local APIServices are always available" {
			t.Errorf("%s: message %q", name, c.Message)
		}
	}
	ca := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	for _, tc := range []struct {
		name   string
		mutate func(*apiregistrationv1.APIService)
		want   string
	}{
		{"name", func(a *apiregistrationv1.APIService) { a.Name = "v2." + wardleGroup }, "metadata.name: Invalid value: \"v2.wardle.example.com\": must be `spec.version+\".\"+spec.group`: \"v1.wardle.example.com\""},
		{"local caBundle", func(a *apiregistrationv1.APIService) { a.Spec.Service = nil; a.Spec.CABundle = ca }, "spec.caBundle: Invalid value: \"" + fmt.Sprint(len(ca)) + " bytes\": local APIServices may not have a caBundle"},
		{"local insecure", func(a *apiregistrationv1.APIService) {
			a.Spec.Service, a.Spec.CABundle, a.Spec.InsecureSkipTLSVerify = nil, nil, true
		}, "spec.insecureSkipTLSVerify: Invalid value: true: local APIServices may not have insecureSkipTLSVerify"},
		{"insecure with caBundle", func(a *apiregistrationv1.APIService) { a.Spec.InsecureSkipTLSVerify = true }, "spec.insecureSkipTLSVerify: Invalid value: true: may not be true if caBundle is present"},
		{"group priority", func(a *apiregistrationv1.APIService) { a.Spec.GroupPriorityMinimum = 0 }, "spec.groupPriorityMinimum: Invalid value: 0: must be positive and less than 20000"},
		{"version priority", func(a *apiregistrationv1.APIService) { a.Spec.VersionPriority = 1001 }, "spec.versionPriority: Invalid value: 1001: must be positive and less than 1000"},
		{"version", func(a *apiregistrationv1.APIService) { a.Name, a.Spec.Version = "V1."+wardleGroup, "V1" }, "spec.version: Invalid value: \"V1\""},
		{"service name", func(a *apiregistrationv1.APIService) { a.Spec.Service.Name = "" }, "spec.service.name: Required value"},
		{"service port", func(a *apiregistrationv1.APIService) { a.Spec.Service.Port = ptrTo[int32](70000) }, "spec.service.port: Invalid value: 70000: port is not valid"},
		{"built-in group", func(a *apiregistrationv1.APIService) { a.Name, a.Spec.Group = "v1.apps", "apps" }, `spec.service: Forbidden: "apps" is served by the API server itself`},
	} {
		as := wardleAPIService(ca)
		tc.mutate(as)
		err := createAPIService(e, as)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want 422 with %q", tc.name, err, tc.want)
		}
	}
	// Nothing was stored by the refusals: the wardle group is unknown.
	if err := e.admin.CoreV1().RESTClient().Get().AbsPath("/apis/apiregistration.k8s.io/v1/apiservices/v1." + wardleGroup).Do(e.ctx).Error(); !apierrors.IsNotFound(err) {
		t.Errorf("refused APIService stored: %v", err)
	}
	// Port defaults to 443, as upstream's defaulting.
	as := wardleAPIService(nil)
	as.Spec.InsecureSkipTLSVerify = true
	got := &apiregistrationv1.APIService{}
	if err := e.admin.CoreV1().RESTClient().Post().AbsPath("/apis/apiregistration.k8s.io/v1/apiservices").Body(as).Do(e.ctx).Into(got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Service.Port == nil || *got.Spec.Service.Port != 443 {
		t.Errorf("port %v, want 443", got.Spec.Service.Port)
	}
}

// An aggregated server's account reads the authentication ConfigMap and
// delegates reviews with the default roles its manifests bind, as
// metrics-server's do.
func TestDelegationRoles(t *testing.T) {
	e := newRBACEnv(t, "RBAC")
	jane := e2eClient(t, e.s, userNamed("jane"))
	if _, err := jane.CoreV1().ConfigMaps("kube-system").Get(e.ctx, "extension-apiserver-authentication", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("before the bindings: %v", err)
	}
	e.bind(t, "kube-system", "wardle-auth-reader", "Role", "extension-apiserver-authentication-reader", rbacv1.Subject{Kind: "User", APIGroup: rbacv1.GroupName, Name: "jane"})
	if _, err := e.admin.RbacV1().ClusterRoleBindings().Create(e.ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "wardle:system:auth-delegator"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:auth-delegator"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: rbacv1.GroupName, Name: "jane"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "jane reads the ConfigMap and delegates reviews", func() error {
		if _, err := jane.CoreV1().ConfigMaps("kube-system").Get(e.ctx, "extension-apiserver-authentication", metav1.GetOptions{}); err != nil {
			return err
		}
		if _, err := jane.CoreV1().ConfigMaps("kube-system").Get(e.ctx, "other", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
			return fmt.Errorf("another ConfigMap: %v", err)
		}
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: "bob",
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Group: wardleGroup, Resource: "flunders", Namespace: "default"}}}
		if _, err := jane.AuthorizationV1().SubjectAccessReviews().Create(e.ctx, sar, metav1.CreateOptions{}); err != nil {
			return err
		}
		_, err := jane.AuthenticationV1().TokenReviews().Create(e.ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: "bob-token"}}, metav1.CreateOptions{})
		return err
	})
}

func TestAggregatedAPI(t *testing.T) {
	e := newRBACEnv(t, "RBAC")
	auth, err := e.admin.CoreV1().ConfigMaps("kube-system").Get(e.ctx, "extension-apiserver-authentication", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"requestheader-allowed-names": `["front-proxy-client"]`, "requestheader-username-headers": `["X-Remote-User"]`, "requestheader-uid-headers": `["X-Remote-Uid"]`,
		"requestheader-group-headers": `["X-Remote-Group"]`, "requestheader-extra-headers-prefix": `["X-Remote-Extra-"]`} {
		if auth.Data[k] != want {
			t.Errorf("%s = %q, want %q", k, auth.Data[k], want)
		}
	}
	ws := newWardleServer(t, auth.Data)
	// Failures of the backend itself are seen by the periodic check.
	e.s.aggregator.SetResync(100 * time.Millisecond)

	// Reasons follow what is missing, in upstream's order.
	if err := createAPIService(e, wardleAPIService(ws.ca)); err != nil {
		t.Fatal(err)
	}
	c := waitAvailable(t, e, "v1."+wardleGroup, apiregistrationv1.ConditionFalse, "ServiceNotFound")
	if c.Message != `service/wardle in "default" is not present` {
		t.Errorf("message %q", c.Message)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "wardle"}, Spec: corev1.ServiceSpec{
		Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(ws.port)}}}}
	if _, err := e.admin.CoreV1().Services("default").Create(e.ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c = waitAvailable(t, e, "v1."+wardleGroup, apiregistrationv1.ConditionFalse, "MissingEndpoints")
	if c.Message != `endpoints for service/wardle in "default" have no addresses with port name "https"` {
		t.Errorf("message %q", c.Message)
	}
	rec := serveAs(e.s, "GET", "/apis/"+wardleGroup+"/v1/namespaces/default/flunders", "admin-token", "", nil)
	if rec.Code != http.StatusServiceUnavailable || statusOf(t, rec).Message != "service unavailable" {
		t.Errorf("request while unavailable: %d %s", rec.Code, rec.Body)
	}
	// A selectorless Service whose endpoint is the test's server.
	es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "wardle-1", Labels: map[string]string{discoveryv1.LabelServiceName: "wardle"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"127.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptrTo("https"), Port: ptrTo(ws.port)}}}
	if _, err := e.admin.DiscoveryV1().EndpointSlices("default").Create(e.ctx, es, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAvailable(t, e, "v1."+wardleGroup, apiregistrationv1.ConditionTrue, "Passed")
	if row := apiServiceRow(t, e, "v1."+wardleGroup); fmt.Sprint(row) != "[v1.wardle.example.com default/wardle True]" {
		t.Errorf("row %v", row)
	}
	if h := ws.last(); h.Get("X-Remote-User") != "system:kube-aggregator" || !slices.Equal(h.Values("X-Remote-Group"), []string{"system:masters"}) {
		t.Errorf("discovery check as %q %q", h.Get("X-Remote-User"), h.Values("X-Remote-Group"))
	}

	// Discovery: legacy and aggregated, as client-go reads them.
	groups, lists, err := e.admin.Discovery().ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, g := range groups {
		found = found || g.Name == wardleGroup && g.PreferredVersion.Version == "v1"
	}
	if !found {
		t.Errorf("%s not in the groups", wardleGroup)
	}
	found = false
	for _, l := range lists {
		if l.GroupVersion != wardleGroup+"/v1" {
			continue
		}
		for _, r := range l.APIResources {
			found = found || r.Name == "flunders" && r.Kind == "Flunder" && r.Namespaced && slices.Equal(r.ShortNames, []string{"fl"})
		}
	}
	if !found {
		t.Errorf("flunders not in the discovered resources %v", lists)
	}
	rec = serveAs(e.s, "GET", "/apis", "admin-token", "", http.Header{"Accept": {"application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"}})
	var agg apidiscoveryv2.APIGroupDiscoveryList
	if err := json.Unmarshal(rec.Body.Bytes(), &agg); err != nil {
		t.Fatalf("aggregated discovery: %v: %s", err, rec.Body)
	}
	found = false
	for _, g := range agg.Items {
		if g.Name == wardleGroup && len(g.Versions) == 1 && len(g.Versions[0].Resources) == 1 {
			r := g.Versions[0].Resources[0]
			found = r.Resource == "flunders" && r.Scope == apidiscoveryv2.ScopeNamespace && len(r.Subresources) == 1 && r.Subresources[0].Subresource == "status" &&
				g.Versions[0].Freshness == apidiscoveryv2.DiscoveryFreshnessCurrent
		}
	}
	if !found {
		t.Errorf("wardle not in aggregated discovery: %s", rec.Body)
	}
	rec = serveAs(e.s, "GET", "/apis/"+wardleGroup, "admin-token", "", nil)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"preferredVersion":{"groupVersion":"wardle.example.com/v1","version":"v1"}`) {
		t.Errorf("/apis/%s: %d %s", wardleGroup, rec.Code, rec.Body)
	}

	// OpenAPI v3: the root lists the group version, its document is the
	// backend's.
	rec = serveAs(e.s, "GET", "/openapi/v3", "admin-token", "", nil)
	if !strings.Contains(rec.Body.String(), `"apis/wardle.example.com/v1":{"serverRelativeURL":"/openapi/v3/apis/wardle.example.com/v1"}`) ||
		!strings.Contains(rec.Body.String(), `"apis/apps/v1":{"serverRelativeURL":"/openapi/v3/apis/apps/v1?hash=`) {
		t.Errorf("OpenAPI v3 root: %s", rec.Body)
	}
	rec = serveAs(e.s, "GET", "/openapi/v3/apis/"+wardleGroup+"/v1", "admin-token", "", nil)
	if rec.Code != http.StatusOK || rec.Body.String() != wardleOpenAPI {
		t.Errorf("wardle's OpenAPI v3: %d %s", rec.Code, rec.Body)
	}

	// RBAC decides before the request leaves: jane may not list flunders.
	path := "/apis/" + wardleGroup + "/v1/namespaces/default/flunders"
	before := ws.count()
	rec = serveAs(e.s, "GET", path, "jane-token", "", nil)
	if rec.Code != http.StatusForbidden || statusOf(t, rec).Message != `flunders.wardle.example.com is forbidden: User "jane" cannot list resource "flunders" in API group "wardle.example.com" in the namespace "default"` {
		t.Errorf("unauthorized list: %d %s", rec.Code, rec.Body)
	}
	if ws.count() != before {
		t.Error("a refused request reached the aggregated server")
	}
	if _, err := e.admin.RbacV1().Roles("default").Create(e.ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "flunder-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{wardleGroup}, Resources: []string{"flunders"}, Verbs: []string{"list"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.bind(t, "default", "jane-flunders", "Role", "flunder-reader", rbacv1.Subject{Kind: "User", APIGroup: rbacv1.GroupName, Name: "jane"})
	// Identity headers the caller sends are its own claims, never passed on.
	forged := http.Header{"X-Remote-User": {"system:admin"}, "X-Remote-Group": {"system:masters"}, "X-Remote-Extra-Scopes": {"all"}}
	eventually(t, "jane lists flunders", func() error {
		rec = serveAs(e.s, "GET", path+"?limit=5", "jane-token", "", forged)
		if rec.Code != http.StatusOK {
			return fmt.Errorf("%d %s", rec.Code, rec.Body)
		}
		return nil
	})
	if !strings.Contains(rec.Body.String(), `"kind":"FlunderList"`) {
		t.Errorf("list body %s", rec.Body)
	}
	h := ws.lastCall()
	if h.Get("X-Remote-User") != "jane" || !slices.Equal(h.Values("X-Remote-Group"), []string{"system:authenticated"}) || h.Get("X-Remote-Extra-Scopes") != "" {
		t.Errorf("identity sent: user %q groups %q extra %q", h.Get("X-Remote-User"), h.Values("X-Remote-Group"), h.Get("X-Remote-Extra-Scopes"))
	}
	if h.Get("Authorization") != "" {
		t.Error("the caller's bearer token reached the aggregated server")
	}
	if h.Get("X-Remote-Uid") != "2" {
		t.Errorf("uid sent %q, want jane's 2", h.Get("X-Remote-Uid"))
	}

	// Extra and several groups, and a watch that streams.
	cfg := e.s.ClientConfig(&authn.User{Name: "carol", Groups: []string{authn.GroupMasters, "team-a"}, Extra: map[string][]string{"scopes.example.com/x": {"a", "b"}}})
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Get(cfg.Host + path + "?watch=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	if !lines.Scan() || !strings.Contains(lines.Text(), `"name":"first"`) {
		t.Fatalf("first watch event: %q %v", lines.Text(), lines.Err())
	}
	// The first event came before the server sent the second.
	close(ws.watchGo)
	if !lines.Scan() || !strings.Contains(lines.Text(), `"name":"second"`) {
		t.Fatalf("second watch event: %q %v", lines.Text(), lines.Err())
	}
	h = ws.lastCall()
	if h.Get("X-Remote-User") != "carol" || !slices.Equal(h.Values("X-Remote-Group"), []string{authn.GroupMasters, "team-a"}) ||
		!slices.Equal(h.Values("X-Remote-Extra-Scopes.example.com%2fx"), []string{"a", "b"}) {
		t.Errorf("identity sent: %v", h)
	}
	ws.mu.Lock()
	rejected := ws.rejected
	ws.mu.Unlock()
	if rejected != 0 {
		t.Errorf("the aggregated server refused %d requests for want of the front-proxy certificate", rejected)
	}

	// A backend that stops answering is unavailable, its discovery stale,
	// and requests get 503.
	ws.srv.Close()
	c = waitAvailable(t, e, "v1."+wardleGroup, apiregistrationv1.ConditionFalse, "FailedDiscoveryCheck")
	if !strings.HasPrefix(c.Message, "failing or missing response from https://127.0.0.1:") {
		t.Errorf("message %q", c.Message)
	}
	if row := apiServiceRow(t, e, "v1."+wardleGroup); fmt.Sprint(row) != "[v1.wardle.example.com default/wardle False (FailedDiscoveryCheck)]" {
		t.Errorf("row %v", row)
	}
	if row := apiServiceRow(t, e, "v1.apps"); fmt.Sprint(row) != "[v1.apps Local True]" {
		t.Errorf("row %v", row)
	}
	rec = serveAs(e.s, "GET", path, "admin-token", "", nil)
	if rec.Code != http.StatusServiceUnavailable || statusOf(t, rec).Reason != metav1.StatusReasonServiceUnavailable {
		t.Errorf("request to a dead backend: %d %s", rec.Code, rec.Body)
	}
	rec = serveAs(e.s, "GET", "/apis", "admin-token", "", http.Header{"Accept": {"application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"}})
	if !strings.Contains(rec.Body.String(), `{"version":"v1","resources":[{"resource":"flunders"`) || !strings.Contains(rec.Body.String(), `"freshness":"Stale"`) {
		t.Errorf("stale discovery: %s", rec.Body)
	}
	// Deleting the APIService stops the proxy: the path is unknown again.
	if err := e.admin.CoreV1().RESTClient().Delete().AbsPath("/apis/apiregistration.k8s.io/v1/apiservices/v1." + wardleGroup).Do(e.ctx).Error(); err != nil {
		t.Fatal(err)
	}
	rec = serveAs(e.s, "GET", path, "admin-token", "", nil)
	if rec.Code != http.StatusNotFound {
		t.Errorf("after delete: %d %s", rec.Code, rec.Body)
	}
}

func TestAPIServicesOfCustomResources(t *testing.T) {
	e := newTestEnv(t)
	get := func(name string) (*apiregistrationv1.APIService, error) {
		as := &apiregistrationv1.APIService{}
		return as, e.cs.CoreV1().RESTClient().Get().AbsPath("/apis/apiregistration.k8s.io/v1/apiservices", name).Do(e.ctx).Into(as)
	}
	// An admin's own APIService for a CRD's group version stays as it is.
	mine := &apiregistrationv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: "v1beta1.stable.example.com"},
		Spec: apiregistrationv1.APIServiceSpec{Group: "stable.example.com", Version: "v1beta1", GroupPriorityMinimum: 2000, VersionPriority: 5}}
	if err := e.cs.CoreV1().RESTClient().Post().AbsPath("/apis/apiregistration.k8s.io/v1/apiservices").Body(mine).Do(e.ctx).Error(); err != nil {
		t.Fatal(err)
	}
	crd := createCRD(t, e, crontabCRD)
	deadline := time.Now().Add(10 * time.Second)
	for {
		as, err := get("v1.stable.example.com")
		if err == nil && as.Labels["kube-aggregator.kubernetes.io/automanaged"] == "true" && as.Spec.Service == nil && as.Spec.GroupPriorityMinimum == 1000 && as.Spec.VersionPriority == 100 &&
			len(as.Status.Conditions) == 1 && as.Status.Conditions[0].Reason == "Local" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no local APIService for the CRD's v1: %v %+v", err, as)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := crdclient.NewForConfigOrDie(e.cfg).CustomResourceDefinitions().Delete(e.ctx, crd.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, err := get("v1.stable.example.com")
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the CRD's APIService outlived it: %v", err)
		}
	}
	if as, err := get("v1beta1.stable.example.com"); err != nil || as.Spec.GroupPriorityMinimum != 2000 {
		t.Errorf("the admin's APIService: %v %+v", err, as)
	}
}

// After the front-proxy certificate is renewed the server closes its idle
// connections to aggregated servers: the next call handshakes again,
// with the new certificate, rather than riding a kept-alive connection
// made with the old one.
func TestAggregatedConnectionsClosedOnRenewal(t *testing.T) {
	e := newRBACEnv(t, "RBAC")
	auth, err := e.admin.CoreV1().ConfigMaps("kube-system").Get(e.ctx, "extension-apiserver-authentication", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ws := newWardleServer(t, auth.Data)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "wardle"}, Spec: corev1.ServiceSpec{
		Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(ws.port)}}}}
	if _, err := e.admin.CoreV1().Services("default").Create(e.ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "wardle-1", Labels: map[string]string{discoveryv1.LabelServiceName: "wardle"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"127.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptrTo("https"), Port: ptrTo(ws.port)}}}
	if _, err := e.admin.DiscoveryV1().EndpointSlices("default").Create(e.ctx, es, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := createAPIService(e, wardleAPIService(ws.ca)); err != nil {
		t.Fatal(err)
	}
	waitAvailable(t, e, "v1."+wardleGroup, apiregistrationv1.ConditionTrue, "Passed")
	get := func() {
		t.Helper()
		if rec := serveAs(e.s, "GET", "/apis/"+wardleGroup+"/v1/namespaces/default/flunders", "admin-token", "", nil); rec.Code != http.StatusOK {
			t.Fatalf("list flunders: %d %s", rec.Code, rec.Body)
		}
	}
	get()
	before := ws.conns.Load()
	get()
	if n := ws.conns.Load(); n != before {
		t.Fatalf("a second call made a new connection (%d, then %d): nothing is kept alive to test", before, n)
	}
	e.s.CloseAggregatedConnections()
	get()
	if n := ws.conns.Load(); n != before+1 {
		t.Errorf("connections %d after closing the idle ones, want %d: the call rode the old connection", n, before+1)
	}
}
