// Package deploy applies the manifests of a directory to the cluster, as
// k3s's deploy controller does with <data-dir>/server/manifests: every
// *.yaml, *.yml and *.json file is applied with server-side apply at start
// and whenever it changes, and what a removed file created is deleted. It
// owns the objects it labels with LabelManifest and the k3s.cattle.io/v1
// Addon per file in kube-system; it must not touch anything else.
package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// object is one object of a manifest file and the line its document
// starts on, for error messages.
type object struct {
	obj  *unstructured.Unstructured
	line int
}

// manifestFile says whether a file name is one the directory deploys.
func manifestFile(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return !strings.HasPrefix(name, ".")
	}
	return false
}

// yamlLine is the line number in a sigs.k8s.io/yaml (go-yaml) error.
var yamlLine = regexp.MustCompile(`line (\d+)`)

// decode reads a manifest file's objects: YAML documents separated by
// "---" lines, or JSON, each an object or a List whose items are objects.
// Its error names the file and the line of the fault: "name:line: why".
func decode(name string, data []byte) ([]object, error) {
	var out []object
	docs := splitDocuments(data)
	if strings.EqualFold(filepath.Ext(name), ".json") {
		// JSON's own parser names the exact line of a syntax error.
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			line := 1
			var se *json.SyntaxError
			if errors.As(err, &se) {
				line += bytes.Count(data[:se.Offset], []byte("\n"))
			}
			return nil, fmt.Errorf("%s:%d: %v", name, line, err)
		}
		docs = []document{{data: data, line: 1}}
	}
	for _, d := range docs {
		j, err := yaml.YAMLToJSON(d.data)
		if err != nil {
			line, msg := d.line, err.Error()
			if m := yamlLine.FindStringSubmatchIndex(msg); m != nil {
				n, _ := strconv.Atoi(msg[m[2]:m[3]])
				line += n - 1
				msg = strings.TrimSpace(msg[:m[0]] + msg[m[1]:])
				msg = strings.Replace(msg, "yaml: :", "yaml:", 1)
			}
			return nil, fmt.Errorf("%s:%d: %s", name, line, msg)
		}
		j = bytes.TrimSpace(j)
		if len(j) == 0 || string(j) == "null" {
			continue // an empty document, or comments only
		}
		var m map[string]any
		if err := json.Unmarshal(j, &m); err != nil {
			return nil, fmt.Errorf("%s:%d: not an object: %s", name, d.line, firstLine(string(j)))
		}
		u := &unstructured.Unstructured{Object: m}
		objs := []*unstructured.Unstructured{u}
		if u.IsList() && u.GetAPIVersion() != "" && u.GetKind() != "" {
			l, err := u.ToList()
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %v", name, d.line, err)
			}
			objs = objs[:0]
			for i := range l.Items {
				objs = append(objs, &l.Items[i])
			}
		}
		for _, o := range objs {
			if err := check(o); err != nil {
				return nil, fmt.Errorf("%s:%d: %v", name, d.line, err)
			}
			out = append(out, object{obj: o, line: d.line})
		}
	}
	return out, nil
}

// check refuses an object server-side apply cannot take.
func check(o *unstructured.Unstructured) error {
	switch {
	case o.GetAPIVersion() == "":
		return fmt.Errorf("%s %q has no apiVersion", kindOr(o), o.GetName())
	case o.GetKind() == "":
		return fmt.Errorf("object %q has no kind", o.GetName())
	case o.GetName() == "":
		if o.GetGenerateName() != "" {
			return fmt.Errorf("%s with generateName %q: server-side apply needs metadata.name", o.GetKind(), o.GetGenerateName())
		}
		return fmt.Errorf("%s has no metadata.name", o.GetKind())
	}
	return nil
}

func kindOr(o *unstructured.Unstructured) string {
	if k := o.GetKind(); k != "" {
		return k
	}
	return "object"
}

type document struct {
	data []byte
	line int // 1-based line of the document's first line
}

// splitDocuments cuts YAML at "---" lines (a document marker, maybe with
// a comment or content after it). A JSON file is one document.
func splitDocuments(data []byte) []document {
	var docs []document
	start, startLine, line := 0, 1, 1
	for off := 0; off < len(data); line++ {
		end := bytes.IndexByte(data[off:], '\n')
		next := len(data)
		if end >= 0 {
			next = off + end + 1
		}
		l := data[off:next]
		if bytes.HasPrefix(l, []byte("---")) && (len(l) == 3 || l[3] == ' ' || l[3] == '\t' || l[3] == '\n' || l[3] == '\r') {
			docs = append(docs, document{data: data[start:off], line: startLine})
			// What follows the marker on its line belongs to the
			// next document ("--- # comment", "--- {a: b}").
			start, startLine = off+3, line
		}
		off = next
	}
	return append(docs, document{data: data[start:], line: startLine})
}

// firstLine is s cut to one short line, for an error message.
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 60 {
		s = s[:60] + "..."
	}
	return s
}
