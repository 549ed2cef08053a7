package containerd

import (
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestAddCDIHook(t *testing.T) {
	s := &specs.Spec{}
	for _, name := range []string{"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"} {
		if err := addHook(s, name, specs.Hook{Path: "/bin/" + name}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	h := s.Hooks
	got := []string{h.Prestart[0].Path, h.CreateRuntime[0].Path, h.CreateContainer[0].Path, h.StartContainer[0].Path, h.Poststart[0].Path, h.Poststop[0].Path} //nolint:staticcheck
	if strings.Join(got, " ") != "/bin/prestart /bin/createRuntime /bin/createContainer /bin/startContainer /bin/poststart /bin/poststop" {
		t.Errorf("hooks landed in %v", got)
	}
	if err := addHook(s, "preStart", specs.Hook{Path: "/bin/x"}); err == nil || !strings.Contains(err.Error(), `unknown hook name`) {
		t.Errorf("misspelt hook name: %v", err)
	}
	if err := addHook(s, "poststop", specs.Hook{}); err == nil || !strings.Contains(err.Error(), "no path") {
		t.Errorf("hook without a path: %v", err)
	}
}
