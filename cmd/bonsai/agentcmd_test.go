package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `bonsai agent` refuses what it cannot join with, before it touches
// the data dir or the network.
func TestAgentFlagErrors(t *testing.T) {
	pin := strings.Repeat("ab", 32)
	dir := filepath.Join(t.TempDir(), "data")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--token", "K10" + pin + "::abcdef.0123456789abcdef"}, "--server is required"},
		{[]string{"--server", "http://10.0.0.1:6443"}, `--server "http://10.0.0.1:6443": want https://HOST:PORT`},
		{[]string{"--server", "https://10.0.0.1:6443", "--token", "abcdef.0123456789abcdef"}, "--token: the token has no CA hash"},
		{[]string{"--server", "https://10.0.0.1:6443", "--token", "K10" + pin[:10] + "::abcdef.0123456789abcdef"}, "--token: the join token's CA hash is not 64 hex digits"},
		{[]string{"--server", "https://10.0.0.1:6443", "--token", "K10" + pin + "::admin:secret"}, "--token: the join token's bootstrap token is not"},
	} {
		_, err := runBonsai(t, append([]string{"agent", "--data-dir", dir, "--config", "/dev/null"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("agent %v: %v, want %q", c.args, err, c.want)
		}
	}
	if _, err := os.Stat(dir); err == nil {
		t.Error("a refused agent made its data dir")
	}
}
