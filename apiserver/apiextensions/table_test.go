package apiextensions

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestCellForJSONValue(t *testing.T) {
	old := metav1.NewTime(time.Now().Add(-90 * time.Second)).UTC().Format(time.RFC3339)
	for _, tc := range []struct {
		typ   string
		value any
		want  any
	}{
		{"integer", int64(3), int64(3)},
		{"integer", float64(3.7), int64(3)},
		{"integer", "3", nil},
		{"number", float64(1.5), float64(1.5)},
		{"number", int64(2), int64(2)},
		{"boolean", true, true},
		{"boolean", "true", nil},
		{"date", old, "90s"},
		{"date", "yesterday", "<invalid>"},
		{"date", int64(1), nil},
		{"integer", nil, nil},
	} {
		if got := cellForJSONValue(tc.typ, tc.value); got != tc.want {
			t.Errorf("cellForJSONValue(%s, %#v) = %#v, want %#v", tc.typ, tc.value, got, tc.want)
		}
	}
}

func TestCustomPrinter(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": "x", "creationTimestamp": metav1.Now().UTC().Format(time.RFC3339)},
		"spec":     map[string]any{"replicas": int64(2), "tags": []any{"a", "b"}},
		"status":   map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "True"}}},
	}}
	p := customPrinter([]apiextensionsv1.CustomResourceColumnDefinition{
		{Name: "Replicas", Type: "integer", JSONPath: ".spec.replicas"},
		{Name: "Tags", Type: "string", JSONPath: ".spec.tags"},
		{Name: "Ready", Type: "string", JSONPath: `.status.conditions[?(@.type=="Ready")].status`},
		{Name: "Missing", Type: "string", JSONPath: ".spec.nothing", Priority: 1},
	})
	var names []string
	for _, c := range p.Columns {
		names = append(names, c.Name)
	}
	if d := cmp.Diff([]string{"Name", "Replicas", "Tags", "Ready", "Missing"}, names); d != "" {
		t.Errorf("columns (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]any{"x", int64(2), `["a","b"]`, "True", nil}, p.Cells(u)); d != "" {
		t.Errorf("cells (-want +got):\n%s", d)
	}
	// No columns: Name and Age.
	p = customPrinter(nil)
	if len(p.Columns) != 2 || p.Columns[1].Name != "Age" || p.Cells(u)[1] != "0s" {
		t.Errorf("default printer: %v %v", p.Columns, p.Cells(u))
	}
}

func TestSelectableValue(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"s": "red", "i": int64(7), "b": false, "f": 1.5,
	}}}
	for path, want := range map[string]string{"s": "red", "i": "7", "b": "false", "f": "1.5", "none": ""} {
		if got := selectableValue(u, []string{"spec", path}); got != want {
			t.Errorf("spec.%s = %q, want %q", path, got, want)
		}
	}
}
