package registry

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
)

// Printer renders one kind's rows: columns (priority 1 is -o wide only)
// and the cells of an object. kube-apiserver always prints the wide
// columns and lets kubectl hide them, so cells cover every column.
type Printer struct {
	Columns []metav1.TableColumnDefinition
	Cells   func(obj runtime.Object) []any
	// Conditions, if set, are the row's conditions (pods mark finished
	// rows Completed so clients can tell them apart).
	Conditions func(obj runtime.Object) []metav1.TableRowCondition
	// Order, if set, sorts a list's objects before they become rows, as
	// upstream's printers of a few kinds do (FlowSchemas by precedence).
	Order func(objs []runtime.Object)
}

// Column types as Table defines them; a cell's Go type follows its
// column's: string, int64 for integer, bool for boolean, an RFC 3339
// string for date.
const (
	TString  = "string"
	TInteger = "integer"
	TBoolean = "boolean"
	TDate    = "date"
)

// Col is a column of type typ.
func Col(name, typ, desc string) metav1.TableColumnDefinition {
	c := metav1.TableColumnDefinition{Name: name, Type: typ, Description: desc}
	if name == "Name" {
		c.Format = "name"
	}
	return c
}

// Wide marks a column as -o wide only.
func Wide(c metav1.TableColumnDefinition) metav1.TableColumnDefinition {
	c.Priority = 1
	return c
}

// Descriptions come from the API types' own documentation, as upstream's do.
var (
	ObjectMetaDoc = metav1.ObjectMeta{}.SwaggerDoc()
	NameCol       = Col("Name", TString, ObjectMetaDoc["name"])
	AgeCol        = Col("Age", TString, ObjectMetaDoc["creationTimestamp"])
	ContainersCol = Wide(Col("Containers", TString, "Names of each container in the template."))
	ImagesCol     = Wide(Col("Images", TString, "Images referenced by each container in the template."))
)

// Cols lists columns.
func Cols(cs ...metav1.TableColumnDefinition) []metav1.TableColumnDefinition { return cs }

// Since is the human duration since t, as the Age column shows it.
func Since(t time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(time.Since(t))
}

// Age is the object's Age cell.
func Age(m metav1.Object) string { return Since(m.GetCreationTimestamp().Time) }

// OrNone is s, or <none> if empty.
func OrNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// OrDefault is s, or d if empty.
func OrDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// BoolWord prints an optional bool.
func BoolWord(b *bool) string {
	switch {
	case b == nil:
		return "<unset>"
	case *b:
		return "True"
	}
	return "False"
}

// ReplicasOr1 is a replicas field, 1 when unset.
func ReplicasOr1(r *int32) int64 {
	if r == nil {
		return 1
	}
	return int64(*r)
}

// StrOr is *s, or d if s is nil.
func StrOr(s *string, d string) string {
	if s == nil {
		return d
	}
	return *s
}

// ContainerColumns are the Containers and Images cells of containers.
func ContainerColumns(cs []corev1.Container) (string, string) {
	names, images := make([]string, len(cs)), make([]string, len(cs))
	for i, c := range cs {
		names[i], images[i] = c.Name, c.Image
	}
	return strings.Join(names, ","), strings.Join(images, ",")
}

// WithContainers appends the wide Containers and Images cells.
func WithContainers(cells []any, cs []corev1.Container) []any {
	names, images := ContainerColumns(cs)
	return append(cells, names, images)
}

// MoreList joins up to three items and counts the rest, as kubectl shows
// long lists of addresses and ports.
func MoreList(items []string, total int, empty string) string {
	const max = 3
	if len(items) == 0 {
		return empty
	}
	s := strings.Join(items, ",")
	if total > max {
		s += fmt.Sprintf(" + %d more...", total-max)
	}
	return s
}

// UniqueSorted is the non-empty strings of xs, sorted, once each.
func UniqueSorted(xs []string) []string {
	set := map[string]bool{}
	var out []string
	for _, x := range xs {
		if x != "" && !set[x] {
			set[x] = true
			out = append(out, x)
		}
	}
	sort.Strings(out)
	return out
}

// DefaultPrinter is what kube-apiserver prints for kinds without columns
// of their own.
var DefaultPrinter = &Printer{
	Columns: Cols(NameCol, Col("Created At", TDate, ObjectMetaDoc["creationTimestamp"])),
	Cells: func(o runtime.Object) []any {
		m := o.(metav1.Object)
		return []any{m.GetName(), m.GetCreationTimestamp().UTC().Format(time.RFC3339)}
	},
}

// SelectorString formats a map selector with sorted keys, as the Selector
// columns and the scale subresource show it.
func SelectorString(sel map[string]string) string {
	keys := make([]string, 0, len(sel))
	for k := range sel {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + sel[k]
	}
	return strings.Join(parts, ",")
}
