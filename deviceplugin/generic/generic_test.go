package generic

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"bonsai.dev/bonsai/deviceplugin"
	"bonsai.dev/bonsai/testsupport/testenv"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct{ yaml, err string }{
		{"resources:\n- name: bonsai.dev/serial\n  devices: [/dev/ttyUSB*]\n", ""},
		{"resources:\n- name: bonsai.dev/snd\n  group: [/dev/snd]\n  shared: 3\n", ""},
		{"", "no resources"},
		{"resources:\n- name: serial\n  devices: [/dev/ttyUSB*]\n", "want vendor-domain/resourcetype"},
		{"resources:\n- name: kubernetes.io/serial\n  devices: [/dev/x]\n", "reserved"},
		{"resources:\n- name: a.b/c\n  devices: [/dev/x]\n- name: a.b/c\n  devices: [/dev/y]\n", "listed twice"},
		{"resources:\n- name: a.b/c\n", "exactly one of devices and group"},
		{"resources:\n- name: a.b/c\n  devices: [/dev/x]\n  group: [/dev/y]\n", "exactly one of devices and group"},
		{"resources:\n- name: a.b/c\n  devices: [dev/x]\n", "not absolute"},
		{"resources:\n- name: a.b/c\n  devices: [\"/dev/[x\"]\n", "not a valid glob"},
		{"resources:\n- name: a.b/c\n  devices: [/dev/x]\n  shared: -1\n", "shared -1 must be between 1 and 1000"},
		{"resources:\n- name: a.b/c\n  devices: [/dev/x]\n  dra: true\n", ""},
		{"resources:\n- name: a.b/c\n  devices: [/dev/x]\n  dra: true\n  shared: 2\n", "shared is not supported with dra"},
		{"resources:\n- name: a.b/c\n  devices: [/dev/x]\n  count: 2\n", "unknown field"},
		{"resources: [", "devices.yaml"},
	} {
		c, err := Parse([]byte(tc.yaml), "devices.yaml")
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.yaml, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want one containing %q", tc.yaml, err, tc.err)
		case tc.err == "" && c.Resources[0].Shared < 1:
			t.Errorf("%q: shared %d, want the default 1 or more", tc.yaml, c.Resources[0].Shared)
		}
	}
}

func mknod(t *testing.T, path string) {
	t.Helper()
	os.MkdirAll(filepath.Dir(path), 0o755)
	if err := syscall.Mknod(path, syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
		t.Fatalf("mknod: %v", err)
	}
}

func wait(t *testing.T, m *deviceplugin.Manager, res string, capWant, allocWant int64) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		c, a := m.Resources()
		cq, aq := c[corev1.ResourceName(res)], a[corev1.ResourceName(res)]
		if cq.Value() == capWant && aq.Value() == allocWant {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: capacity %v allocatable %v, want %d/%d", res, c, a, capWant, allocWant)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func pod(name, res string) *corev1.Pod {
	rl := corev1.ResourceList{corev1.ResourceName(res): resource.MustParse("1")}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Limits: rl, Requests: rl}}}}}
}

// TestGenericPlugin runs the built-in plugin against a real device manager
// over its sockets, on device nodes the test makes and removes.
func TestGenericPlugin(t *testing.T) {
	testenv.Require(t, os.Geteuid() == 0, "the generic device plugin test needs root (mknod)")
	// Long enough that only inotify can make the waits below.
	RescanInterval = time.Minute
	dev := t.TempDir()
	mknod(t, filepath.Join(dev, "ttyT0"))
	mknod(t, filepath.Join(dev, "video0"))
	mknod(t, filepath.Join(dev, "snd", "pcm0"))
	mknod(t, filepath.Join(dev, "snd", "ctl"))
	os.WriteFile(filepath.Join(dev, "ttyNotADevice"), nil, 0o644)
	cfg, err := Parse([]byte(fmt.Sprintf(`resources:
- name: bonsai.test/serial
  devices: [%q]
- name: bonsai.test/camera
  devices: [%q]
  shared: 2
- name: bonsai.test/sound
  group: [%q]
`, filepath.Join(dev, "tty*"), filepath.Join(dev, "video*"), filepath.Join(dev, "snd"))), "devices.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m := deviceplugin.New(deviceplugin.Config{RootDir: t.TempDir(), Logger: log})
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	Run(ctx, cfg, m.Dir(), log)
	wait(t, m, "bonsai.test/serial", 1, 1)
	wait(t, m, "bonsai.test/camera", 2, 2)
	wait(t, m, "bonsai.test/sound", 1, 1)

	// Exactly the matched device nodes go into the container.
	for _, tc := range []struct {
		pod, res string
		want     []string
	}{
		{"s", "bonsai.test/serial", []string{filepath.Join(dev, "ttyT0")}},
		{"c1", "bonsai.test/camera", []string{filepath.Join(dev, "video0")}},
		{"c2", "bonsai.test/camera", []string{filepath.Join(dev, "video0")}},
		{"a", "bonsai.test/sound", []string{filepath.Join(dev, "snd")}},
	} {
		p := pod(tc.pod, tc.res)
		if err := m.Allocate(ctx, p); err != nil {
			t.Fatalf("%s: %v", tc.pod, err)
		}
		opts, err := m.ContainerOptions(ctx, p.UID, "c")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range opts.Devices {
			if d.ContainerPath != d.HostPath || d.Permissions != "rw" {
				t.Errorf("%s: device %+v", tc.pod, d)
			}
			got = append(got, d.HostPath)
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%s got devices %v, want %v", tc.pod, got, tc.want)
		}
	}
	// Two containers share the camera; a third does not fit.
	if err := m.Allocate(ctx, pod("c3", "bonsai.test/camera")); err == nil {
		t.Error("a camera shared by 2 was given to a third container")
	}

	// Hot-plug: a new node appears, a removed one goes unhealthy, and
	// comes back healthy.
	mknod(t, filepath.Join(dev, "ttyT1"))
	wait(t, m, "bonsai.test/serial", 2, 2)
	os.Remove(filepath.Join(dev, "ttyT0"))
	wait(t, m, "bonsai.test/serial", 2, 1)
	mknod(t, filepath.Join(dev, "ttyT0"))
	wait(t, m, "bonsai.test/serial", 2, 2)
	os.RemoveAll(filepath.Join(dev, "snd"))
	wait(t, m, "bonsai.test/sound", 1, 0)
}
