package containerd

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"bonsai.dev/bonsai/kubelet/cri"
)

func mknod(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	// /dev/null's numbers: writable, harmless.
	if err := syscall.Mknod(path, syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
		t.Fatalf("mknod %s: %v", path, err)
	}
}

// TestDevicesIntoContainer runs a container with what a device plugin's
// Allocate gives: device nodes (one, and a directory of them), a CDI
// device resolved from a spec, and annotations.
func TestDevicesIntoContainer(t *testing.T) {
	r, _, dir := startRuntime(t)
	host := filepath.Join(dir, "hostdev")
	mknod(t, filepath.Join(host, "one"))
	mknod(t, filepath.Join(host, "snd", "pcm0"))
	mknod(t, filepath.Join(host, "snd", "ctl"))
	mknod(t, filepath.Join(host, "cdi0"))
	cdiDir := filepath.Join(dir, "cdi")
	os.MkdirAll(cdiDir, 0o755)
	spec := `cdiVersion: "0.6.0"
kind: vendor.example/npu
containerEdits:
  env: ["NPU_RUNTIME=1"]
  additionalGIDs: [4321]
  hooks:
  - hookName: createRuntime
    path: /bin/sh
    args: ["sh", "-c", "cat > ` + filepath.Join(dir, "hook-state") + `"]
devices:
- name: npu0
  containerEdits:
    env: ["NPU_VISIBLE=0"]
    deviceNodes:
    - path: /dev/npu0
      hostPath: ` + filepath.Join(host, "cdi0") + `
      permissions: rw
`
	os.WriteFile(filepath.Join(cdiDir, "npu.yaml"), []byte(spec), 0o644)
	r.cfg.CDISpecDirs = []string{cdiDir}

	ctx := context.Background()
	sb, err := r.RunPodSandbox(ctx, cri.SandboxConfig{PodUID: "uid-dev", Namespace: "default", Name: "p", Hostname: "p"})
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "logs", "dev.log")
	id := runContainer(t, r, sb, cri.ContainerConfig{
		Name: "dev", Command: []string{"sh", "-c"}, LogPath: logPath,
		Args: []string{"ls /dev/mine /dev/snd /dev/npu0 | tr '\\n' ' '; echo; echo x > /dev/mine && echo WROTE; echo $NPU_RUNTIME $NPU_VISIBLE; id -G"},
		Devices: []cri.Device{
			{HostPath: filepath.Join(host, "one"), ContainerPath: "/dev/mine", Permissions: "rw"},
			{HostPath: filepath.Join(host, "snd"), ContainerPath: "/dev/snd", Permissions: "rw"},
		},
		CDIDevices:  []string{"vendor.example/npu=npu0"},
		Annotations: map[string]string{"vendor.example/devices": "one"},
	})
	if st := waitExited(t, r, id); st.ExitCode != 0 {
		raw, _ := os.ReadFile(logPath)
		t.Fatalf("container exited %d: %s", st.ExitCode, raw)
	}
	raw, _ := os.ReadFile(logPath)
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if f := strings.SplitN(l, " ", 4); len(f) == 4 {
			out = append(out, f[3])
		}
	}
	want := []string{"/dev/mine /dev/npu0  /dev/snd: ctl pcm0 ", "WROTE", "1 0", "0 4321"}
	if strings.Join(out, "\n") != strings.Join(want, "\n") {
		t.Errorf("container saw %q, want %q", out, want)
	}
	c, err := r.client.LoadContainer(r.nsctx(ctx), id)
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Spec(r.nsctx(ctx))
	if err != nil {
		t.Fatal(err)
	}
	// The spec's createRuntime hook ran on the host, given the
	// container's state.
	if state, err := os.ReadFile(filepath.Join(dir, "hook-state")); err != nil || !strings.Contains(string(state), id) {
		t.Errorf("CDI createRuntime hook: state %q (err %v), want the container's, id %s", state, err, id)
	}
	if s.Annotations["vendor.example/devices"] != "one" {
		t.Errorf("annotations %v", s.Annotations)
	}
	rules := 0
	for _, d := range s.Linux.Resources.Devices {
		if d.Allow && d.Major != nil && *d.Major == 1 && d.Minor != nil && *d.Minor == 3 && d.Access == "rw" {
			rules++
		}
	}
	if rules != 4 {
		t.Errorf("%d cgroup rules allow the 4 device nodes rw: %+v", rules, s.Linux.Resources.Devices)
	}

	// A CDI device no spec names fails the create, clearly.
	_, err = r.CreateContainer(ctx, sb, cri.ContainerConfig{Name: "bad", Image: testImage, Command: []string{"true"}, LogPath: filepath.Join(dir, "logs", "bad.log"), CDIDevices: []string{"vendor.example/npu=npu9"}})
	if err == nil || !strings.Contains(err.Error(), "unresolvable CDI devices vendor.example/npu=npu9") {
		t.Errorf("unknown CDI device: %v", err)
	}
}
