package routing

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var (
	exact    = networkingv1.PathTypeExact
	prefix   = networkingv1.PathTypePrefix
	implSpec = networkingv1.PathTypeImplementationSpecific
)

type p struct {
	path string
	typ  networkingv1.PathType
	svc  string
}

func rule(host string, paths ...p) networkingv1.IngressRule {
	r := networkingv1.IngressRule{Host: host, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{}}}
	for _, x := range paths {
		t := x.typ
		r.HTTP.Paths = append(r.HTTP.Paths, networkingv1.HTTPIngressPath{Path: x.path, PathType: &t, Backend: svc(x.svc, 80)})
	}
	return r
}

func svc(name string, port int32) networkingv1.IngressBackend {
	return networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: name, Port: networkingv1.ServiceBackendPort{Number: port}}}
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func ing(name string, age int, def *networkingv1.IngressBackend, rules ...networkingv1.IngressRule) *networkingv1.Ingress {
	return &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, CreationTimestamp: metav1.NewTime(epoch.Add(time.Duration(age) * time.Second))},
		Spec:       networkingv1.IngressSpec{DefaultBackend: def, Rules: rules},
	}
}

func name(b *Backend) string {
	switch {
	case b == nil:
		return "<none>"
	case b.Resource != nil:
		return "resource:" + b.Resource.Name
	}
	return b.Service
}

// TestPathTable is the Ingress API's table of path matching examples,
// each row as one Ingress with the row's paths (to backends named after
// the paths) and requests for the row's request paths.
func TestPathTable(t *testing.T) {
	for i, row := range []struct {
		paths    []p
		requests []string
		want     string // path whose backend answers; "" for none
	}{
		{[]p{{"/", prefix, ""}}, []string{"/", "/foo", "/foo/bar", "/a/b/c/"}, "/"},
		{[]p{{"/foo", exact, ""}}, []string{"/foo"}, "/foo"},
		{[]p{{"/foo", exact, ""}}, []string{"/bar"}, ""},
		{[]p{{"/foo", exact, ""}}, []string{"/foo/"}, ""},
		{[]p{{"/foo/", exact, ""}}, []string{"/foo"}, ""},
		{[]p{{"/foo", prefix, ""}}, []string{"/foo", "/foo/"}, "/foo"},
		{[]p{{"/foo/", prefix, ""}}, []string{"/foo", "/foo/"}, "/foo/"},
		{[]p{{"/aaa/bb", prefix, ""}}, []string{"/aaa/bbb"}, ""},
		{[]p{{"/aaa/bbb", prefix, ""}}, []string{"/aaa/bbb"}, "/aaa/bbb"},
		{[]p{{"/aaa/bbb/", prefix, ""}}, []string{"/aaa/bbb"}, "/aaa/bbb/"},
		{[]p{{"/aaa/bbb", prefix, ""}}, []string{"/aaa/bbb/"}, "/aaa/bbb"},
		{[]p{{"/aaa/bbb", prefix, ""}}, []string{"/aaa/bbb/ccc"}, "/aaa/bbb"},
		{[]p{{"/aaa/bbb", prefix, ""}}, []string{"/aaa/bbbxyz"}, ""},
		{[]p{{"/", prefix, ""}, {"/aaa", prefix, ""}}, []string{"/aaa/ccc"}, "/aaa"},
		{[]p{{"/", prefix, ""}, {"/aaa", prefix, ""}, {"/aaa/bbb", prefix, ""}}, []string{"/aaa/bbb"}, "/aaa/bbb"},
		{[]p{{"/", prefix, ""}, {"/aaa", prefix, ""}, {"/aaa/bbb", prefix, ""}}, []string{"/ccc"}, "/"},
		{[]p{{"/aaa", prefix, ""}}, []string{"/ccc"}, ""},
		{[]p{{"/foo", prefix, "prefix"}, {"/foo", exact, "exact"}}, []string{"/foo"}, "exact"},
	} {
		for _, req := range row.requests {
			t.Run(fmt.Sprintf("%d %s", i+1, req), func(t *testing.T) {
				var paths []p
				for _, x := range row.paths {
					if x.svc == "" {
						x.svc = x.path
					}
					paths = append(paths, x)
				}
				tbl := New([]*networkingv1.Ingress{ing("i", 0, nil, rule("", paths...))})
				got := tbl.Match("example.com", req)
				want := row.want
				if want == "" {
					want = "<none>"
				}
				if name(got) != want {
					t.Errorf("paths %v, request %s: backend %s, want %s", row.paths, req, name(got), want)
				}
			})
		}
	}
}

func TestImplementationSpecificIsPrefix(t *testing.T) {
	tbl := New([]*networkingv1.Ingress{ing("i", 0, nil, rule("", p{"/icons", implSpec, "icons"}, p{"/icons/big", exact, "big"}))})
	for req, want := range map[string]string{"/icons": "icons", "/icons/": "icons", "/icons/a.png": "icons", "/iconsx": "<none>", "/icons/big": "big", "/icons/big/x": "icons"} {
		if got := name(tbl.Match("h", req)); got != want {
			t.Errorf("%s: %s, want %s", req, got, want)
		}
	}
}

// TestHosts has the API's wildcard examples, and how exact, wildcard and
// hostless rules and default backends take turns.
func TestHosts(t *testing.T) {
	def := svc("default", 80)
	tbl := New([]*networkingv1.Ingress{
		ing("wild", 0, nil, rule("*.foo.com", p{"/", prefix, "wild"})),
		ing("exact", 1, nil, rule("bar.foo.com", p{"/bar", prefix, "bar"}), rule("foo.bar.com", p{"/bar", prefix, "service1"})),
		ing("catch", 2, nil, rule("", p{"/any", prefix, "any"})),
		ing("own-default", 3, ptr(svc("own-default", 80)), rule("own.example", p{"/x", exact, "x"})),
		ing("default", 4, &def),
		ing("later-default", 5, ptr(svc("later", 80))),
	})
	for _, c := range []struct{ host, path, want string }{
		// The API's wildcard table.
		{"bar.foo.com", "/", "wild"},
		{"baz.bar.foo.com", "/", "default"},
		{"foo.com", "/", "default"},
		// Exact before wildcard, then the wildcard's paths.
		{"bar.foo.com", "/bar/1", "bar"},
		{"BAR.foo.com:8080", "/bar", "bar"},
		{"bar.foo.com.", "/bar", "bar"},
		{"qux.foo.com", "/bar", "wild"},
		// A host's rules, then hostless rules, then the default.
		{"foo.bar.com", "/bar", "service1"},
		{"foo.bar.com", "/any", "any"},
		{"foo.bar.com", "/other", "default"},
		{"10.0.0.1:80", "/any/x", "any"},
		{"", "/any", "any"},
		{"[::1]:80", "/nothing", "default"},
		// An Ingress's own defaultBackend serves its hosts first.
		{"own.example", "/x", "x"},
		{"own.example", "/y", "own-default"},
		{"own.example", "/any", "own-default"},
	} {
		if got := name(tbl.Match(c.host, c.path)); got != c.want {
			t.Errorf("%s%s: %s, want %s", c.host, c.path, got, c.want)
		}
	}
}

func TestNoMatch(t *testing.T) {
	var zero *Table
	if b := zero.Match("h", "/"); b != nil {
		t.Errorf("nil table: %v", b)
	}
	if b := New(nil).Match("h", "/"); b != nil {
		t.Errorf("empty table: %v", b)
	}
	tbl := New([]*networkingv1.Ingress{ing("i", 0, nil, rule("foo.bar.com", p{"/foo", prefix, "s"}))})
	if b := tbl.Match("foo.bar.com", "/bar"); b != nil {
		t.Errorf("unmatched path: %v", name(b))
	}
	if b := tbl.Match("other", "/foo"); b != nil {
		t.Errorf("unmatched host: %v", name(b))
	}
}

// TestOldestWins: Ingresses that give the same host, path and type
// resolve to the older one whatever their order in the list.
func TestOldestWins(t *testing.T) {
	old := ing("b-old", 0, ptr(svc("old-default", 80)), rule("h", p{"/", prefix, "old"}))
	young := ing("a-young", 9, ptr(svc("young-default", 80)), rule("h", p{"/", prefix, "young"}))
	emptyOld := ing("z", 0, ptr(svc("old-catch", 80)))
	emptyYoung := ing("y", 9, ptr(svc("young-catch", 80)))
	for _, order := range [][]*networkingv1.Ingress{{old, young, emptyOld, emptyYoung}, {emptyYoung, young, emptyOld, old}} {
		tbl := New(order)
		if got := name(tbl.Match("h", "/x")); got != "old" {
			t.Errorf("h/x: %s, want old", got)
		}
		if got := name(tbl.Match("other", "/x")); got != "old-catch" {
			t.Errorf("other/x: %s, want old-catch", got)
		}
	}
}

func TestResourceBackend(t *testing.T) {
	group := "k8s.example.com"
	i := ing("ingress-resource-backend", 0, &networkingv1.IngressBackend{Resource: &corev1.TypedLocalObjectReference{APIGroup: &group, Kind: "StorageBucket", Name: "static-assets"}})
	r := rule("", p{"/icons", implSpec, ""})
	r.HTTP.Paths[0].Backend = networkingv1.IngressBackend{Resource: &corev1.TypedLocalObjectReference{APIGroup: &group, Kind: "StorageBucket", Name: "icon-assets"}}
	i.Spec.Rules = []networkingv1.IngressRule{r}
	tbl := New([]*networkingv1.Ingress{i})
	if got := name(tbl.Match("h", "/icons/a")); got != "resource:icon-assets" {
		t.Errorf("/icons/a: %s", got)
	}
	b := tbl.Match("h", "/")
	if name(b) != "resource:static-assets" || b.Namespace != "default" || b.Ingress != "ingress-resource-backend" {
		t.Errorf("/: %+v", b)
	}
}

func TestMatchPrefix(t *testing.T) {
	for _, c := range []struct {
		prefix, path string
		want         bool
	}{{"", "/", true}, {"/a", "/a", true}, {"/a", "/a/", true}, {"/a", "/ab", false}, {"/a/b", "/a", false}, {"/a", "", false}} {
		if got := MatchPrefix(c.prefix, c.path); got != c.want {
			t.Errorf("MatchPrefix(%q, %q) = %v", c.prefix, c.path, got)
		}
	}
}

func TestHost(t *testing.T) {
	for in, want := range map[string]string{"Foo.COM": "foo.com", "foo.com:80": "foo.com", "foo.com.": "foo.com", "[::1]:443": "::1", "[::1]": "::1", "10.0.0.1": "10.0.0.1", "": ""} {
		if got := Host(in); got != want {
			t.Errorf("Host(%q) = %q, want %q", in, got, want)
		}
	}
}

func ptr[T any](v T) *T { return &v }
