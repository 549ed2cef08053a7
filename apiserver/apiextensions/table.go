package apiextensions

import (
	"bytes"
	"fmt"
	"reflect"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/jsonpath"

	"bonsai.dev/bonsai/apiserver/registry"
)

// customPrinter makes a custom resource's server-side table from its
// additionalPrinterColumns, as upstream's table convertor does: Name
// first, then each column's JSONPath value typed by the column's type;
// a version without columns gets Age.
func customPrinter(columns []apiextensionsv1.CustomResourceColumnDefinition) registry.Printer {
	if len(columns) == 0 {
		columns = []apiextensionsv1.CustomResourceColumnDefinition{{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp", Description: registry.ObjectMetaDoc["creationTimestamp"]}}
	}
	p := registry.Printer{Columns: registry.Cols(registry.NameCol)}
	paths := make([]*jsonpath.JSONPath, len(columns))
	for i, c := range columns {
		p.Columns = append(p.Columns, metav1.TableColumnDefinition{Name: c.Name, Type: c.Type, Format: c.Format, Description: c.Description, Priority: c.Priority})
		jp := jsonpath.New(c.Name)
		if err := jp.Parse(fmt.Sprintf("{%s}", c.JSONPath)); err == nil {
			paths[i] = jp
		}
		// The CRD's validation refuses a path that does not parse; a
		// column without one shows nothing.
	}
	p.Cells = func(o runtime.Object) []any {
		u := o.(*unstructured.Unstructured)
		cells := []any{u.GetName()}
		var buf bytes.Buffer
		for i, jp := range paths {
			if jp == nil {
				cells = append(cells, nil)
				continue
			}
			results, err := jp.FindResults(u.Object)
			if err != nil || len(results) == 0 || len(results[0]) == 0 {
				cells = append(cells, nil)
				continue
			}
			value := results[0][0].Interface()
			if columns[i].Type == "string" {
				if err := jp.PrintResults(&buf, []reflect.Value{reflect.ValueOf(value)}); err == nil {
					cells = append(cells, buf.String())
					buf.Reset()
				} else {
					cells = append(cells, nil)
				}
				continue
			}
			cells = append(cells, cellForJSONValue(columns[i].Type, value))
		}
		return cells
	}
	return p
}

// cellForJSONValue types a cell per its column, as upstream does: a value
// of the wrong type shows as nothing.
func cellForJSONValue(typ string, value any) any {
	if value == nil {
		return nil
	}
	switch typ {
	case "integer":
		switch v := value.(type) {
		case int64:
			return v
		case float64:
			return int64(v)
		}
	case "number":
		switch v := value.(type) {
		case int64:
			return v
		case float64:
			return v
		}
	case "boolean":
		if b, ok := value.(bool); ok {
			return b
		}
	case "date":
		if s, ok := value.(string); ok {
			var ts metav1.Time
			if err := ts.UnmarshalQueryParameter(s); err != nil {
				return "<invalid>"
			}
			return registry.Since(ts.Time)
		}
	}
	return nil
}
