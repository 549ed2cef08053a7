package containerd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"bonsai.dev/bonsai/testsupport/testenv"
)

func TestLogFileFormatAndRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c", "0.log")
	lf, err := openLogFile(path, 200, 3)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", maxLogLine+10)
	lf.copyStream("stdout", strings.NewReader("one\ntwo\n"+long+"\nlast-without-newline"))
	lf.copyStream("stderr", strings.NewReader("err\n"))
	for i := 0; i < 20; i++ {
		lf.write("stdout", "F", []byte("filler line to force rotation"))
	}
	lf.close()
	rotated, _ := filepath.Glob(path + ".*")
	if len(rotated) != 2 {
		t.Fatalf("%d rotated files, want 2 (3 files in all): %v", len(rotated), rotated)
	}
	cur, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(cur)) >= 200 {
		t.Fatalf("current file is %d bytes, over the 200 byte limit", len(cur))
	}
	// The first rotated file is gone (only 3 kept); check the record
	// format on what is left.
	for _, f := range append(rotated, path) {
		b, _ := os.ReadFile(f)
		for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
			parts := strings.SplitN(line, " ", 4)
			if len(parts) != 4 || (parts[1] != "stdout" && parts[1] != "stderr") || (parts[2] != "F" && parts[2] != "P") {
				t.Fatalf("%s: line %q is not a CRI log record", f, line)
			}
		}
	}
}

func TestLogFilePartialLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	lf, err := openLogFile(path, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("y", maxLogLine+5)
	lf.copyStream("stdout", strings.NewReader("a\n"+long+"\ntail"))
	lf.close()
	b, _ := os.ReadFile(path)
	var tags, texts []string
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		parts := strings.SplitN(line, " ", 4)
		tags = append(tags, parts[2])
		texts = append(texts, parts[3])
	}
	// "a" whole; the long line split into a full buffer (P) and its rest
	// (F); "tail" ends without a newline, so it is partial.
	want := []string{"F", "P", "F", "P"}
	if strings.Join(tags, ",") != strings.Join(want, ",") {
		t.Fatalf("tags %v, want %v", tags, want)
	}
	if texts[0] != "a" || texts[1]+texts[2] != long || texts[3] != "tail" {
		t.Fatalf("texts %q", texts)
	}
}

// TestLogFileOnFullDisk: a container logging onto a full disk loses the
// records that do not fit, whole (no torn record for kubectl logs to
// trip on), without blocking or failing its stream, and logs again as
// soon as there is room.
func TestLogFileOnFullDisk(t *testing.T) {
	mnt := testenv.Tmpfs(t, 1<<20)
	path := filepath.Join(mnt, "c", "0.log")
	lf, err := openLogFile(path, DefaultLogMaxSize, DefaultLogMaxFiles)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.close()
	lf.write("stdout", "F", []byte("before"))
	testenv.FillDisk(t, filepath.Join(mnt, "layer"), 0)
	line := []byte(strings.Repeat("y", 3000)) // more than the last pages hold
	for i := 0; i < 50; i++ {
		lf.write("stdout", "F", line)
	}
	os.Remove(filepath.Join(mnt, "layer"))
	lf.write("stderr", "F", []byte("after"))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	for _, l := range lines {
		parts := strings.SplitN(l, " ", 4)
		if len(parts) != 4 || (parts[3] != "before" && parts[3] != "after" && parts[3] != string(line)) {
			t.Fatalf("torn or foreign record %.80q in %d lines", l, len(lines))
		}
	}
	if first, last := lines[0], lines[len(lines)-1]; !strings.HasSuffix(first, " before") || !strings.HasSuffix(last, " stderr F after") {
		t.Fatalf("first record %.60q, last %.60q", first, last)
	}
	t.Logf("%d of 50 records fit on the full disk", len(lines)-2)
}
