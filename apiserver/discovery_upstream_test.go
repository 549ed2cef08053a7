package apiserver

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/testsupport/testenv"
)

// upstreamDiscovery is kube-apiserver's discovery of the Kubernetes
// version bonsai reports, as the k8s.io/kubernetes module of that version
// records it (api/discovery, one APIResourceList per group version),
// fetched through the Go module proxy.
func upstreamDiscovery(t *testing.T) (string, map[string]*metav1.APIResourceList) {
	t.Helper()
	// The k8s.io/api bonsai is built with names the version (v0.37.2:
	// Kubernetes v1.37.2).
	apiVersion, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "k8s.io/api").Output()
	testenv.Require(t, err == nil, "go list -m k8s.io/api: %v", err)
	version := "v1." + strings.TrimPrefix(strings.TrimSpace(string(apiVersion)), "v0.")
	cmd := exec.Command("go", "mod", "download", "-json", "k8s.io/kubernetes@"+version)
	cmd.Dir = t.TempDir() // outside bonsai's module: go.mod stays as it is
	out, err := cmd.Output()
	var mod struct{ Dir, Error string }
	if err == nil {
		err = json.Unmarshal(out, &mod)
	}
	testenv.Require(t, err == nil && mod.Error == "" && mod.Dir != "", "k8s.io/kubernetes@%s through the Go module proxy: %v %s", version, err, mod.Error)
	files, err := filepath.Glob(filepath.Join(mod.Dir, "api", "discovery", "ap*__v*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no discovery documents in %s: %v", mod.Dir, err)
	}
	// Only GA versions: kube-apiserver serves no alpha or beta version
	// unless told to.
	ga := regexp.MustCompile(`__v[0-9]+\.json$`)
	lists := map[string]*metav1.APIResourceList{}
	for _, f := range files {
		if !ga.MatchString(f) {
			continue
		}
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var l metav1.APIResourceList
		if err := json.Unmarshal(raw, &l); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		lists[l.GroupVersion] = &l
	}
	return version, lists
}

// notServedYet are kube-apiserver's resources bonsai does not serve yet
// (issue 42); docs/clients.md lists them. The test fails when one of them
// is served, so that the list only shrinks.
var notServedYet = []string{
	"admissionregistration.k8s.io/v1 mutatingadmissionpolicies",
	"admissionregistration.k8s.io/v1 mutatingadmissionpolicybindings",
	"certificates.k8s.io/v1 podcertificaterequests",
	"certificates.k8s.io/v1 podcertificaterequests/status",
	"v1 pods/resize",
}

// Every resource kube-apiserver serves by default is served with the same
// kind, singular name, scope, verbs, short names, categories and, for a
// subresource, group and version, but for notServedYet.
func TestDiscoveryMatchesKubeAPIServer(t *testing.T) {
	version, want := upstreamDiscovery(t)
	e := newTestEnv(t)
	var diffs []string
	missing := map[string]bool{}
	for gv, wl := range want {
		got, err := e.cs.Discovery().ServerResourcesForGroupVersion(gv)
		served := map[string]metav1.APIResource{}
		if err == nil {
			for _, r := range got.APIResources {
				served[r.Name] = r
			}
		}
		for _, w := range wl.APIResources {
			g, ok := served[w.Name]
			if !ok {
				missing[gv+" "+w.Name] = true
				continue
			}
			for _, d := range []struct {
				what      string
				got, want any
			}{
				{"kind", g.Kind, w.Kind},
				{"singularName", g.SingularName, w.SingularName},
				{"group", g.Group, w.Group},
				{"version", g.Version, w.Version},
				{"namespaced", g.Namespaced, w.Namespaced},
				{"verbs", sorted(g.Verbs), sorted(w.Verbs)},
				{"shortNames", sorted(g.ShortNames), sorted(w.ShortNames)},
				{"categories", sorted(g.Categories), sorted(w.Categories)},
			} {
				if fmt.Sprint(d.got) != fmt.Sprint(d.want) {
					diffs = append(diffs, fmt.Sprintf("%s %s: %s %v, kube-apiserver %v", gv, w.Name, d.what, d.got, d.want))
				}
			}
		}
	}
	for _, r := range notServedYet {
		if !missing[r] {
			diffs = append(diffs, r+": served now (or no longer upstream's); take it off notServedYet and docs/clients.md")
		}
		delete(missing, r)
	}
	for r := range missing {
		diffs = append(diffs, r+": not served")
	}
	slices.Sort(diffs)
	if len(diffs) > 0 {
		t.Errorf("discovery differs from kube-apiserver %s's:\n%s", version, strings.Join(diffs, "\n"))
	}
}

func sorted(xs []string) []string {
	out := slices.Clone(xs)
	slices.Sort(out)
	return out
}

// Services have deletecollection, as upstream's; the kubernetes Service
// and its endpoints it takes come back, as kube-apiserver's bootstrap
// controller puts them back.
func TestKubernetesServiceComesBack(t *testing.T) {
	defer func(d time.Duration) { kubernetesServiceInterval = d }(kubernetesServiceInterval)
	kubernetesServiceInterval = 100 * time.Millisecond
	e := newTestEnv(t)
	if _, err := e.cs.CoreV1().Services("default").Create(e.ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// client-go's typed Services have no DeleteCollection; kubectl's
	// --all and the REST API do.
	if err := e.cs.CoreV1().RESTClient().Delete().Namespace("default").Resource("services").Do(e.ctx).Error(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cs.CoreV1().Services("default").Get(e.ctx, "web", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("web after deletecollection: %v", err)
	}
	if err := e.cs.CoreV1().Endpoints("default").Delete(e.ctx, "kubernetes", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		svc, err1 := e.cs.CoreV1().Services("default").Get(e.ctx, "kubernetes", metav1.GetOptions{})
		_, err2 := e.cs.CoreV1().Endpoints("default").Get(e.ctx, "kubernetes", metav1.GetOptions{})
		if err1 == nil && err2 == nil {
			if svc.Spec.ClusterIP != "10.43.0.1" {
				t.Fatalf("kubernetes Service back with cluster IP %s", svc.Spec.ClusterIP)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubernetes Service not back: %v; endpoints: %v", err1, err2)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
