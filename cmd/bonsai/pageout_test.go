package main

import (
	"os"
	"strings"
	"testing"
)

// exeMappings returns the VmFlags of every read-only mapping of this
// process's executable, from /proc/self/smaps.
func exeMappings(t *testing.T) []string {
	t.Helper()
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	var flags []string
	inExe := false
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":"):
			inExe = len(f) == 6 && f[5] == exe && !strings.Contains(f[1], "w")
		case inExe && len(f) > 0 && f[0] == "VmFlags:":
			flags = append(flags, strings.Join(f[1:], " "))
		}
	}
	return flags
}

func TestPageOutBinary(t *testing.T) {
	before := exeMappings(t)
	if len(before) == 0 {
		t.Fatal("no read-only mapping of the executable in /proc/self/smaps")
	}
	pageOutBinary()
	after := exeMappings(t)
	if len(after) != len(before) {
		t.Fatalf("executable mappings: %d before, %d after", len(before), len(after))
	}
	// Random access (one page per fault, no read-around) and no huge
	// pages, on the text and the read-only data alike.
	for i, fl := range after {
		has := map[string]bool{}
		for _, f := range strings.Fields(fl) {
			has[f] = true
		}
		if !has["rr"] || !has["nh"] {
			t.Errorf("mapping %d: VmFlags %q lack rr (MADV_RANDOM) or nh (MADV_NOHUGEPAGE)", i, fl)
		}
	}
}
