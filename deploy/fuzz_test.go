package deploy

import (
	"regexp"
	"strings"
	"testing"
)

var fileLine = regexp.MustCompile(`^m\.(yaml|json):[0-9]+: `)

// FuzzDecode: any file is either objects with a name, kind and
// apiVersion, or one error line naming file:line; never a panic.
func FuzzDecode(f *testing.F) {
	f.Add("m.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\nkind: List\napiVersion: v1\nitems: []\n")
	f.Add("m.yaml", "--- {a: [}\n")
	f.Add("m.json", `{"apiVersion": "v1", "kind": "List", "items": [{"kind": "x"}]}`)
	f.Add("m.yaml", "apiVersion: v1\nkind: X\nmetadata:\n\tname: a\n")
	f.Fuzz(func(t *testing.T, name, content string) {
		if name != "m.json" {
			name = "m.yaml"
		}
		objs, err := decode(name, []byte(content))
		if err != nil {
			if !fileLine.MatchString(err.Error()) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is not one line naming file:line: %q", err)
			}
			return
		}
		for _, o := range objs {
			if check(o.obj) != nil || o.line < 1 {
				t.Fatalf("object %v at line %d", o.obj.Object, o.line)
			}
		}
	})
}
