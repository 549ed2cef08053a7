package kubelet

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var logBase = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

// rec renders one CRI log record at logBase plus sec seconds.
func rec(sec int, stream, tag, text string) string {
	return fmt.Sprintf("%s %s %s %s\n", logBase.Add(time.Duration(sec)*time.Second).Format(time.RFC3339Nano), stream, tag, text)
}

func ts(sec int) string {
	return logBase.Add(time.Duration(sec) * time.Second).Format(time.RFC3339Nano)
}

func TestReadCRILog(t *testing.T) {
	basic := rec(0, "stdout", "F", "one") + rec(1, "stderr", "F", "two") + rec(2, "stdout", "F", "three") + rec(3, "stdout", "F", "four")
	// stdout's long line comes in pieces, with stderr in between.
	partial := rec(0, "stdout", "P", "he") + rec(1, "stderr", "F", "err") + rec(2, "stdout", "P", "ll") + rec(3, "stdout", "F", "o") + rec(4, "stdout", "F", "next")
	for _, tc := range []struct {
		name string
		file string
		opts logOptions
		want string
	}{
		{name: "all", file: basic, opts: logOptions{tail: -1}, want: "one\ntwo\nthree\nfour\n"},
		{name: "tail 2", file: basic, opts: logOptions{tail: 2}, want: "three\nfour\n"},
		{name: "tail 0", file: basic, opts: logOptions{tail: 0}, want: ""},
		{name: "tail beyond", file: basic, opts: logOptions{tail: 10}, want: "one\ntwo\nthree\nfour\n"},
		{name: "since", file: basic, opts: logOptions{tail: -1, since: logBase.Add(2 * time.Second)}, want: "three\nfour\n"},
		{name: "since and tail", file: basic, opts: logOptions{tail: 3, since: logBase.Add(2 * time.Second)}, want: "three\nfour\n"},
		{name: "timestamps", file: basic, opts: logOptions{tail: 1, timestamps: true}, want: ts(3) + " four\n"},
		{name: "limit bytes cuts a line", file: basic, opts: logOptions{tail: -1, limitBytes: 6}, want: "one\ntw"},
		{name: "limit bytes at a line end", file: basic, opts: logOptions{tail: -1, limitBytes: 4}, want: "one\n"},
		{name: "limit bytes counts timestamps", file: basic, opts: logOptions{tail: -1, limitBytes: int64(len(ts(0))) + 2, timestamps: true}, want: ts(0) + " o"},
		{name: "stdout only", file: basic, opts: logOptions{tail: -1, stream: "stdout"}, want: "one\nthree\nfour\n"},
		{name: "stderr only", file: basic, opts: logOptions{tail: -1, stream: "stderr"}, want: "two\n"},
		{name: "partial lines joined", file: partial, opts: logOptions{tail: -1}, want: "err\nhello\nnext\n"},
		{name: "partial line is one line for tail", file: partial, opts: logOptions{tail: 2}, want: "hello\nnext\n"},
		{name: "partial line keeps its first timestamp", file: partial, opts: logOptions{tail: 2, timestamps: true}, want: ts(0) + " hello\n" + ts(4) + " next\n"},
		{name: "unfinished partial line at the end", file: rec(0, "stdout", "F", "a") + rec(1, "stdout", "P", "b"), opts: logOptions{tail: -1}, want: "a\nb"},
		{name: "empty line", file: rec(0, "stdout", "F", "") + rec(1, "stdout", "F", "x"), opts: logOptions{tail: -1}, want: "\nx\n"},
		{name: "empty line without trailing space", file: ts(0) + " stdout F\n" + rec(1, "stdout", "F", "x"), opts: logOptions{tail: -1}, want: "\nx\n"},
		{name: "tag with extra fields", file: ts(0) + " stdout F:x a\n", opts: logOptions{tail: -1}, want: "a\n"},
		{name: "garbage lines skipped", file: "junk\n" + rec(0, "stdout", "F", "ok") + "2026-99 stdout F x\n", opts: logOptions{tail: -1}, want: "ok\n"},
		{name: "record torn at the end", file: rec(0, "stdout", "F", "ok") + ts(1) + " stdout F cut", opts: logOptions{tail: -1}, want: "ok\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "0.log")
			if err := os.WriteFile(path, []byte(tc.file), 0o644); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := readCRILog(context.Background(), path, tc.opts, &out, nil); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, out.String()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadCRILogMissingFile(t *testing.T) {
	err := readCRILog(context.Background(), filepath.Join(t.TempDir(), "none.log"), logOptions{tail: -1}, &bytes.Buffer{}, nil)
	if !os.IsNotExist(err) {
		t.Fatalf("err = %v, want not-exist", err)
	}
}

// syncBuffer is written by the reader and read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func waitOutput(t *testing.T, b *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for b.String() != want {
		if time.Now().After(deadline) {
			t.Fatalf("output %q, want %q", b.String(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func appendFile(t *testing.T, path, data string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
}

func TestFollowCRILog(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts logOptions
		// steps alternate: write to the file (or rotate it), then the
		// output expected so far.
		steps []func(path string) string
		want  []string
	}{
		{
			name: "new records, torn writes and rotation",
			opts: logOptions{follow: true, tail: 1},
			steps: []func(string) string{
				func(string) string { return "" },
				func(p string) string { return rec(2, "stdout", "F", "two") },
				// A record written in two pieces is read once complete.
				func(p string) string { return ts(3) + " stdout F thr" },
				func(p string) string { return "ee\n" },
				// The writer renames the file aside and starts a new one;
				// what it wrote just before the rename is not lost.
				func(p string) string {
					appendFile(t, p, rec(4, "stdout", "F", "last-in-old"))
					if err := os.Rename(p, p+".20260301-100004"); err != nil {
						t.Fatal(err)
					}
					return rec(5, "stderr", "F", "first-in-new")
				},
				func(p string) string { return rec(6, "stdout", "P", "pa") + rec(7, "stdout", "F", "rt") },
			},
			want: []string{"one\n", "one\ntwo\n", "one\ntwo\n", "one\ntwo\nthree\n", "one\ntwo\nthree\nlast-in-old\nfirst-in-new\n", "one\ntwo\nthree\nlast-in-old\nfirst-in-new\npart\n"},
		},
		{
			name: "tail 0 shows only new lines",
			opts: logOptions{follow: true, tail: 0},
			steps: []func(string) string{
				func(string) string { return "" },
				func(string) string { return rec(2, "stdout", "F", "new") },
			},
			want: []string{"", "new\n"},
		},
		{
			name: "limit bytes ends the follow",
			opts: logOptions{follow: true, tail: -1, limitBytes: 8},
			steps: []func(string) string{
				func(string) string { return "" },
				func(string) string { return rec(2, "stdout", "F", "abcdefgh") },
			},
			want: []string{"one\n", "one\nabcd"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "0.log")
			appendFile(t, path, rec(1, "stdout", "F", "one"))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var out syncBuffer
			done := make(chan error, 1)
			go func() { done <- readCRILog(ctx, path, tc.opts, &out, nil) }()
			// What is in the file now is what the first pass reads (and
			// tail 0 skips); give it that pass before writing more.
			time.Sleep(300 * time.Millisecond)
			for i, step := range tc.steps {
				if data := step(path); data != "" {
					appendFile(t, path, data)
				}
				waitOutput(t, &out, tc.want[i])
			}
			if tc.opts.limitBytes > 0 {
				select {
				case err := <-done:
					if err != nil {
						t.Fatal(err)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("follow did not end at limitBytes")
				}
				return
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestFollowEndsWhenContainerStops(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	appendFile(t, path, rec(0, "stdout", "F", "a"))
	var alive atomic.Bool
	alive.Store(true)
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- readCRILog(context.Background(), path, logOptions{follow: true, tail: -1}, &out, alive.Load)
	}()
	waitOutput(t, &out, "a\n")
	alive.Store(false)
	// The runtime writes the container's last words after recording its
	// exit; the follower still gets them.
	appendFile(t, path, rec(1, "stdout", "F", "b"))
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("follow did not end after the container stopped")
	}
	if got := out.String(); got != "a\nb\n" {
		t.Fatalf("output %q", got)
	}
	if strings.Count(out.String(), "b") != 1 {
		t.Fatal("duplicated output")
	}
}
