package helm

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

func TestParseValues(t *testing.T) {
	for _, in := range []string{"", "  \n", "null", "# only a comment\n"} {
		v, err := parseValues("f", in)
		if err != nil || len(v) != 0 {
			t.Errorf("parseValues(%q) = %v, %v; want {}, nil", in, v, err)
		}
	}
	v, err := parseValues("f", "a:\n  b: 1\nc: [x, z]\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]any{"a": map[string]any{"b": float64(1)}, "c": []any{"x", "z"}}; !cmp.Equal(v, want) {
		t.Errorf("parseValues: %v, want %v", v, want)
	}
	for _, bad := range []string{"greeting: [unclosed", "- a list\n- not a map\n", "a: b\n\tc: d\n"} {
		_, err := parseValues("spec.valuesContent", bad)
		if err == nil || !strings.HasPrefix(err.Error(), "spec.valuesContent: ") {
			t.Errorf("parseValues(%q): error %v, want one naming spec.valuesContent", bad, err)
		}
	}
}

func TestMergeValues(t *testing.T) {
	chart := map[string]any{
		"image":    map[string]any{"repo": "a", "tag": "1", "pull": map[string]any{"policy": "Always"}},
		"replicas": 1,
		"list":     []any{"a", "b"},
		"keep":     "chart",
		"scalar":   "x",
	}
	config := map[string]any{
		"image":  map[string]any{"tag": "2", "pull": map[string]any{"secret": "s"}},
		"list":   []any{"c"},
		"scalar": map[string]any{"now": "a map"},
		"new":    true,
	}
	got := mergeValues(chart, config)
	want := map[string]any{
		"image":    map[string]any{"repo": "a", "tag": "2", "pull": map[string]any{"policy": "Always", "secret": "s"}},
		"replicas": 1,
		"list":     []any{"c"}, // lists are replaced, as helm's -f does
		"keep":     "chart",
		"scalar":   map[string]any{"now": "a map"},
		"new":      true,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("mergeValues (-want +got):\n%s", diff)
	}
	// The inputs are not changed.
	if chart["image"].(map[string]any)["tag"] != "1" {
		t.Error("mergeValues changed its dst")
	}
}

func TestApplySet(t *testing.T) {
	vals := map[string]any{"a": map[string]any{"keep": "me"}}
	err := applySet(vals, map[string]intstr.IntOrString{
		"a.b":      intstr.FromInt32(3),
		"a.flag":   intstr.FromString("true"),
		"a.gone":   intstr.FromString("null"),
		"zero":     intstr.FromString("007"), // a string, as --set-string
		"list":     intstr.FromString("x,y"), // one value with a comma
		"escaped":  intstr.FromString(`p\,q`),
		"ints[0]":  intstr.FromInt32(5),
		"text":     intstr.FromString("hello world"),
		"quoteish": intstr.FromString("False"),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"a":        map[string]any{"keep": "me", "b": int64(3), "flag": true, "gone": nil},
		"zero":     "007",
		"list":     "x,y",
		"escaped":  "p,q", // an escaped comma, as k3s passes it to helm
		"ints":     []any{int64(5)},
		"text":     "hello world",
		"quoteish": false,
	}
	if diff := cmp.Diff(want, vals); diff != "" {
		t.Errorf("applySet (-want +got):\n%s", diff)
	}
	if err := applySet(map[string]any{}, map[string]intstr.IntOrString{"a[": intstr.FromString("x")}); err == nil || !strings.Contains(err.Error(), "spec.set[a[]") {
		t.Errorf("a bad key: error %v, want one naming spec.set[a[]", err)
	}
}

func TestManages(t *testing.T) {
	c := &Controller{}
	for _, tc := range []struct {
		y    string
		want bool
	}{
		{"metadata: {name: a}\nspec: {chart: x}", true},
		{"metadata: {name: a}\nspec: {chartContent: eA==}", true},
		{"metadata: {name: a, annotations: {helmcharts.cattle.io/managed-by: bonsai}}\nspec: {chart: x}", true},
		// k3s's: no chart, unmanaged, or another controller's.
		{"metadata: {name: a}\nspec: {repo: r}", false},
		{"metadata: {name: a, annotations: {helmcharts.helm.cattle.io/unmanaged: ''}}\nspec: {chart: x}", false},
		{"metadata: {name: a, annotations: {helmcharts.cattle.io/managed-by: helm-controller}}\nspec: {chart: x}", false},
	} {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(tc.y), &u.Object); err != nil {
			t.Fatal(err)
		}
		if got := c.manages(u); got != tc.want {
			t.Errorf("manages(%s) = %v, want %v", tc.y, got, tc.want)
		}
	}
}
