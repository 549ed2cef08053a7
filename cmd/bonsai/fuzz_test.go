package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzConfigFile: any config file is either applied or refused with an
// error naming the file, a key or a flag; never a panic.
func FuzzConfigFile(f *testing.F) {
	f.Add("data-dir: /x\nhttps-listen-port: 7443\ntls-san: [a, b]\n")
	f.Add("tls-san: a\ndisable-agent: yes\n")
	f.Add("https-listen-port: 6.5e3\n")
	f.Add("? [a]\n: b\n")
	f.Add("node-monitor-grace-period: 4s\nnode-eviction-rate: 0.5\nterminated-pod-gc-threshold: 0\n")
	f.Fuzz(func(t *testing.T, content string) {
		noDefaultConfig(t)
		path := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := parseServer(t, "--config", path)
		if err != nil && !strings.Contains(err.Error(), "config file") && !strings.Contains(err.Error(), "--") {
			t.Fatalf("error names neither the file nor a flag: %v", err)
		}
	})
}
