package containerd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/containerd/containerd/containers"
	"github.com/containerd/containerd/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"sigs.k8s.io/yaml"

	"bonsai.dev/bonsai/kubelet/cri"
)

// DefaultCDISpecDirs are where the Container Device Interface keeps specs,
// lowest priority first (a spec in /var/run/cdi overrides /etc/cdi's).
var DefaultCDISpecDirs = []string{"/etc/cdi", "/var/run/cdi"}

// cdiSpec is the part of a CDI spec (cdiVersion 0.3 to 0.8) bonsai
// applies: environment, device nodes, mounts, OCI hooks and additional
// group IDs.
type cdiSpec struct {
	Kind    string `json:"kind"`
	Devices []struct {
		Name           string   `json:"name"`
		ContainerEdits cdiEdits `json:"containerEdits"`
	} `json:"devices"`
	ContainerEdits cdiEdits `json:"containerEdits"`
}

type cdiEdits struct {
	Env         []string `json:"env"`
	DeviceNodes []struct {
		Path, HostPath, Permissions string
	} `json:"deviceNodes"`
	Mounts []struct {
		HostPath      string   `json:"hostPath"`
		ContainerPath string   `json:"containerPath"`
		Type          string   `json:"type"`
		Options       []string `json:"options"`
	} `json:"mounts"`
	Hooks []struct {
		HookName string   `json:"hookName"`
		Path     string   `json:"path"`
		Args     []string `json:"args"`
		Env      []string `json:"env"`
		Timeout  *int     `json:"timeout"`
	} `json:"hooks"`
	AdditionalGIDs []uint32 `json:"additionalGIDs"`
}

// resolveCDI finds each qualified name (vendor.com/class=name) in the
// specs of dirs and returns the edits to apply: the spec's own edits once,
// then the device's.
func resolveCDI(dirs, names []string) ([]cdiEdits, error) {
	if dirs == nil {
		dirs = DefaultCDISpecDirs
	}
	devices := map[string]cdiEdits{}
	specEdits := map[string]cdiEdits{}
	for _, dir := range dirs {
		files, _ := filepath.Glob(filepath.Join(dir, "*"))
		sort.Strings(files)
		for _, f := range files {
			if ext := filepath.Ext(f); ext != ".json" && ext != ".yaml" && ext != ".yml" {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			var s cdiSpec
			if err := yaml.Unmarshal(b, &s); err != nil {
				return nil, fmt.Errorf("CDI spec %s: %v", f, err)
			}
			for _, d := range s.Devices {
				q := s.Kind + "=" + d.Name
				devices[q] = d.ContainerEdits
				specEdits[q] = s.ContainerEdits
			}
		}
	}
	var out []cdiEdits
	var missing []string
	seenSpec := map[string]bool{}
	for _, n := range names {
		e, ok := devices[n]
		if !ok {
			missing = append(missing, n)
			continue
		}
		kind, _, _ := strings.Cut(n, "=")
		if !seenSpec[kind] {
			seenSpec[kind] = true
			out = append(out, specEdits[n])
		}
		out = append(out, e)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("unresolvable CDI devices %s (no spec in %s names them)", strings.Join(missing, ", "), strings.Join(dirs, ", "))
	}
	return out, nil
}

// withCDIDevices applies CDI devices' edits to the spec.
func withCDIDevices(dirs, names []string) oci.SpecOpts {
	return func(ctx context.Context, c oci.Client, ctr *containers.Container, s *specs.Spec) error {
		edits, err := resolveCDI(dirs, names)
		if err != nil {
			return err
		}
		for _, e := range edits {
			if len(e.Env) > 0 {
				if err := oci.WithEnv(e.Env)(ctx, c, ctr, s); err != nil {
					return err
				}
			}
			var devs []cri.Device
			for _, d := range e.DeviceNodes {
				host := d.HostPath
				if host == "" {
					host = d.Path
				}
				devs = append(devs, cri.Device{HostPath: host, ContainerPath: d.Path, Permissions: d.Permissions})
			}
			if err := withDevices(devs)(ctx, c, ctr, s); err != nil {
				return err
			}
			for _, m := range e.Mounts {
				typ := m.Type
				if typ == "" {
					typ = "bind"
				}
				s.Mounts = append(s.Mounts, specs.Mount{Source: m.HostPath, Destination: m.ContainerPath, Type: typ, Options: m.Options})
			}
			for _, h := range e.Hooks {
				if err := addHook(s, h.HookName, specs.Hook{Path: h.Path, Args: h.Args, Env: h.Env, Timeout: h.Timeout}); err != nil {
					return err
				}
			}
			if len(e.AdditionalGIDs) > 0 {
				s.Process.User.AdditionalGids = append(s.Process.User.AdditionalGids, e.AdditionalGIDs...)
			}
		}
		return nil
	}
}

// addHook appends h to the OCI hooks named as CDI names them.
func addHook(s *specs.Spec, name string, h specs.Hook) error {
	if h.Path == "" {
		return fmt.Errorf("CDI hook %q has no path", name)
	}
	if s.Hooks == nil {
		s.Hooks = &specs.Hooks{}
	}
	switch name {
	case "prestart":
		s.Hooks.Prestart = append(s.Hooks.Prestart, h) //nolint:staticcheck // CDI still names it
	case "createRuntime":
		s.Hooks.CreateRuntime = append(s.Hooks.CreateRuntime, h)
	case "createContainer":
		s.Hooks.CreateContainer = append(s.Hooks.CreateContainer, h)
	case "startContainer":
		s.Hooks.StartContainer = append(s.Hooks.StartContainer, h)
	case "poststart":
		s.Hooks.Poststart = append(s.Hooks.Poststart, h)
	case "poststop":
		s.Hooks.Poststop = append(s.Hooks.Poststop, h)
	default:
		return fmt.Errorf("CDI hook %q: unknown hook name (want prestart, createRuntime, createContainer, startContainer, poststart or poststop)", name)
	}
	return nil
}
