// Package node holds the kinds of node.k8s.io: their table columns.
package node

import (
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"bonsai.dev/bonsai/apiserver/registry"
)

// Kinds are the group's rows of the table of served kinds.
func Kinds() []registry.Kind {
	return []registry.Kind{
		{GVR: registry.GVR("node.k8s.io", "v1", "runtimeclasses"), Kind: "RuntimeClass", Printer: &runtimeClassPrinter},
	}
}

var runtimeClassPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol, registry.Col("Handler", registry.TString, nodev1.RuntimeClass{}.SwaggerDoc()["handler"]), registry.AgeCol),
	Cells: func(o runtime.Object) []any {
		r := o.(*nodev1.RuntimeClass)
		return []any{r.Name, r.Handler, registry.Age(r)}
	},
}
