package helm

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"strings"
	"testing"
	"time"
)

// chartTgz is a chart archive: a ConfigMap RELEASE-cm with the values
// greeting and color, and extra templates.
func chartTgz(t *testing.T, name, version string, extra ...string) []byte {
	t.Helper()
	files := [][2]string{
		{"Chart.yaml", fmt.Sprintf("apiVersion: v2\nname: %s\nversion: %s\n", name, version)},
		{"values.yaml", "greeting: hello\ncolor: none\n"},
		{"templates/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-cm\ndata:\n  greeting: {{ .Values.greeting | quote }}\n  color: {{ .Values.color | quote }}\n"},
	}
	for i, e := range extra {
		// "crds/NAME.yaml=content", or a template's content.
		if path, content, ok := strings.Cut(e, "="); ok && strings.HasPrefix(path, "crds/") {
			files = append(files, [2]string{path, content})
			continue
		}
		files = append(files, [2]string{fmt.Sprintf("templates/extra%d.yaml", i), e})
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name + "/" + f[0], Mode: 0o644, Size: int64(len(f[1])), ModTime: time.Now(), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(f[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
