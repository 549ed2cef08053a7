package apiserver

import (
	"net/http"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"bonsai.dev/bonsai/apiserver/params"
	"bonsai.dev/bonsai/apiserver/registry"
)

// --- core/v1 ---

// table renders objects as a server-side Table. includeObject=None|
// Metadata|Object says what each row carries (Metadata by default).
func (s *Server) table(r *http.Request, res *resource, objs []runtime.Object, rv, cont string) (*metav1.Table, error) {
	p := res.printer
	if res.custom != nil {
		p = res.custom.Printer()
	} else if p == nil {
		p = registry.DefaultPrinter
	}
	opts, err := params.Table(r.URL.Query())
	if err != nil {
		return nil, err
	}
	include := opts.IncludeObject
	if include == "" {
		include = metav1.IncludeMetadata
	}
	t := &metav1.Table{TypeMeta: metav1.TypeMeta{Kind: "Table", APIVersion: "meta.k8s.io/v1"}, ColumnDefinitions: p.Columns}
	t.ResourceVersion, t.Continue = rv, cont
	if p.Order != nil && len(objs) > 1 {
		objs = slices.Clone(objs)
		p.Order(objs)
	}
	t.Rows = make([]metav1.TableRow, 0, len(objs))
	for _, o := range objs {
		row := metav1.TableRow{Cells: p.Cells(o)}
		if p.Conditions != nil {
			row.Conditions = p.Conditions(o)
		}
		switch include {
		case metav1.IncludeMetadata:
			row.Object.Object = partialMetadata(o)
		case metav1.IncludeObject:
			o.GetObjectKind().SetGroupVersionKind(res.gvk())
			row.Object.Object = o
		}
		t.Rows = append(t.Rows, row)
	}
	return t, nil
}
