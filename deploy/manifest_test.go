package deploy

import (
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name    string
		file    string
		data    string
		want    []string // kind/namespace/name@line
		wantErr string
	}{
		{name: "multi-document YAML", file: "a.yaml", data: `# leading comment
apiVersion: v1
kind: ConfigMap
metadata: {name: one}
---
---   # empty, then a comment-only document
# nothing here
---
apiVersion: v1
kind: Namespace
metadata:
  name: two
`, want: []string{"ConfigMap//one@1", "Namespace//two@8"}},
		{name: "JSON", file: "a.json", data: `{"apiVersion": "v1", "kind": "ConfigMap",
 "metadata": {"name": "j", "namespace": "ns"}}`, want: []string{"ConfigMap/ns/j@1"}},
		{name: "List kind", file: "l.yaml", data: `apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: ConfigMap, metadata: {name: a}}
- {apiVersion: v1, kind: Secret, metadata: {name: b}}
`, want: []string{"ConfigMap//a@1", "Secret//b@1"}},
		{name: "typed list kind", file: "l.yaml", data: `apiVersion: v1
kind: ConfigMapList
items:
- {apiVersion: v1, kind: ConfigMap, metadata: {name: a}}
`, want: []string{"ConfigMap//a@1"}},
		{name: "marker with content", file: "m.yaml", data: `--- {apiVersion: v1, kind: ConfigMap, metadata: {name: a}}
`, want: []string{"ConfigMap//a@1"}},
		{name: "empty file", file: "e.yaml", data: "", want: nil},
		{name: "syntax error names the file's line", file: "bad.yaml", data: `apiVersion: v1
kind: ConfigMap
metadata: {name: ok}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: x
 labels: oops
`, wantErr: "bad.yaml:8: "},
		{name: "tab indentation", file: "tab.yml", data: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n\tname: x\n", wantErr: "tab.yml:4: "},
		{name: "JSON syntax error", file: "bad.json", data: "{\"apiVersion\": \"v1\",\n \"kind\": \"ConfigMap\",\n \"metadata\": {\"name\": \"a\"]}\n", wantErr: "bad.json:3: "},
		{name: "no kind", file: "k.yaml", data: "---\napiVersion: v1\nmetadata: {name: a}\n", wantErr: `k.yaml:1: object "a" has no kind`},
		{name: "no apiVersion", file: "k.yaml", data: "kind: ConfigMap\nmetadata: {name: a}\n", wantErr: `k.yaml:1: ConfigMap "a" has no apiVersion`},
		{name: "no name", file: "n.yaml", data: "a: b\n---\napiVersion: v1\nkind: ConfigMap\n", wantErr: "n.yaml:1: "},
		{name: "generateName", file: "g.yaml", data: "apiVersion: v1\nkind: ConfigMap\nmetadata: {generateName: x-}\n", wantErr: `g.yaml:1: ConfigMap with generateName "x-": server-side apply needs metadata.name`},
		{name: "not an object", file: "s.yaml", data: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n- just\n- a list\n", wantErr: "s.yaml:4: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := decode(tc.file, []byte(tc.data))
			if tc.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one starting %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "\n") {
					t.Errorf("error is not one line: %q", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range objs {
				got = append(got, o.obj.GetKind()+"/"+o.obj.GetNamespace()+"/"+o.obj.GetName()+"@"+strconv.Itoa(o.line))
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("objects (-want +got):\n%s", d)
			}
		})
	}
}

func TestManifestFile(t *testing.T) {
	for name, want := range map[string]bool{
		"a.yaml": true, "a.YML": true, "a.json": true, "a.yaml.skip": false,
		"a.txt": false, ".a.yaml": false, "a.yaml~": false, "a.yaml.tmp": false,
	} {
		if got := manifestFile(name); got != want {
			t.Errorf("manifestFile(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestNames(t *testing.T) {
	for base, want := range map[string]string{
		"traefik.yaml": "traefik", "My_App.v2.yml": "my-app.v2", "___.json": "manifest",
	} {
		if got := AddonName(base); got != want {
			t.Errorf("AddonName(%q) = %q, want %q", base, got, want)
		}
	}
	long := strings.Repeat("a", 70)
	for _, addon := range []string{"traefik", "my-app.v2", long} {
		v := labelValue(addon)
		if len(v) > 63 || strings.Contains(v, ".") {
			t.Errorf("labelValue(%q) = %q: not a valid label value", addon, v)
		}
	}
	if labelValue("traefik") != "traefik" {
		t.Errorf("labelValue(traefik) = %q", labelValue("traefik"))
	}
}
