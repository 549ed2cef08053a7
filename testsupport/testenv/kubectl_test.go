package testenv

import (
	"os/exec"
	"strings"
	"testing"
)

// TestKubectls runs the kubectls the e2e tests would use; with
// BONSAI_KUBECTL_BUILD=1 that is the one built from the module.
func TestKubectls(t *testing.T) {
	ks := Kubectls(t)
	if len(ks) == 0 || len(ks) > 2 {
		t.Fatalf("Kubectls = %+v, want the oldest and newest", ks)
	}
	if len(ks) == 2 && ks[0].Minor >= ks[1].Minor {
		t.Errorf("Kubectls = %+v, want oldest first", ks)
	}
	for _, k := range ks {
		// 1.27 prints a Go struct without -o; JSON reads the same everywhere.
		out, err := exec.Command(k.Path, "version", "--client", "-o", "json").CombinedOutput()
		if err != nil || !strings.Contains(string(out), `"gitVersion": "v`+k.Version+".") {
			t.Errorf("%s version --client: %v\n%s", k.Path, err, out)
		}
		t.Logf("kubectl %s at %s", k.Version, k.Path)
	}
}
