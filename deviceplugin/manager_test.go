package deviceplugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"bonsai.dev/bonsai/testsupport/testenv"
)

var pluginBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "devplug-test")
	if err != nil {
		panic(err)
	}
	pluginBin = filepath.Join(dir, "testplugin")
	out, err := exec.Command("go", "build", "-o", pluginBin, "./testdata/testplugin").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building the test device plugin: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// devices makes n character devices (copies of /dev/null's numbers) in a
// temp dir with mknod, as a vendor's device nodes would be.
func devices(t *testing.T, n int) string {
	t.Helper()
	testenv.Require(t, os.Geteuid() == 0, "device plugin tests need root (mknod)")
	dir := t.TempDir()
	for i := range n {
		if err := syscall.Mknod(filepath.Join(dir, fmt.Sprintf("tdev%d", i)), syscall.S_IFCHR|0o666, int(unixMkdev(1, 3))); err != nil {
			t.Fatalf("mknod: %v", err)
		}
	}
	return dir
}

func unixMkdev(major, minor uint32) uint64 {
	return uint64(major)<<8 | uint64(minor)
}

type testPlugin struct {
	cmd  *exec.Cmd
	out  *bytes.Buffer
	log  string
	done chan error
}

// startPlugin runs the test plugin as its own process against root.
func startPlugin(t *testing.T, root, devDir string, args ...string) *testPlugin {
	t.Helper()
	p := &testPlugin{out: &bytes.Buffer{}, log: filepath.Join(t.TempDir(), "calls.log"), done: make(chan error, 1)}
	all := append([]string{"-dir", filepath.Join(root, PluginsDir), "-dev-dir", devDir, "-log", p.log}, args...)
	p.cmd = exec.Command(pluginBin, all...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(p.kill)
	return p
}

func (p *testPlugin) kill() {
	if p.cmd.ProcessState == nil {
		p.cmd.Process.Kill()
		<-p.done
		p.done <- nil
	}
}

func (p *testPlugin) calls(t *testing.T) []string {
	b, _ := os.ReadFile(p.log)
	return strings.Fields(strings.ReplaceAll(string(b), "\n", " "))
}

func startManager(t *testing.T, root string, grace time.Duration) (*Manager, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	m := New(Config{RootDir: root, StopGracePeriod: grace, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err := m.Start(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	// Stopped, not only told to stop, before the test's dirs go: its
	// last checkpoint write would race their removal.
	t.Cleanup(func() {
		cancel()
		select {
		case <-m.Stopped():
		case <-time.After(10 * time.Second):
			t.Error("device manager still running 10 s after its context ended")
		}
	})
	return m, cancel
}

// waitResources waits until the manager reports cap and alloc for res.
func waitResources(t *testing.T, m *Manager, res string, capWant, allocWant int64, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		c, a := m.Resources()
		cq, cok := c[corev1.ResourceName(res)]
		aq, _ := a[corev1.ResourceName(res)]
		if capWant < 0 && !cok {
			return time.Since(start)
		}
		if cok && cq.Value() == capWant && aq.Value() == allocWant {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("%s: capacity %v allocatable %v after %s, want %d/%d", res, c, a, within, capWant, allocWant)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func devPod(name string, counts ...int) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)}}
	for i, n := range counts {
		rl := corev1.ResourceList{"bonsai.test/dev": *resource.NewQuantity(int64(n), resource.DecimalSI)}
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: fmt.Sprintf("c%d", i), Resources: corev1.ResourceRequirements{Limits: rl, Requests: rl}})
	}
	return p
}

func TestRegistrationRefused(t *testing.T) {
	root := t.TempDir()
	m, _ := startManager(t, root, time.Minute)
	devs := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-version", "v1alpha1"}, `version "v1alpha1" is not supported`},
		{[]string{"-resource", "gpu"}, `want vendor-domain/resourcetype`},
		{[]string{"-resource", "kubernetes.io/gpu"}, `reserved for native resources`},
		{[]string{"-resource", "vendor.example/bad name"}, `is invalid`},
	} {
		p := startPlugin(t, root, devs, append(tc.args, "-socket", "bad.sock")...)
		select {
		case err := <-p.done:
			p.done <- err
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(p.out.String(), tc.want) {
				t.Errorf("plugin %v: exit %v, output %q; want exit 2 and %q", tc.args, err, p.out.String(), tc.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("plugin %v still running: its registration was not refused", tc.args)
		}
	}
	if c, _ := m.Resources(); len(c) != 0 {
		t.Errorf("refused registrations left resources: %v", c)
	}
}

// TestDevicePluginLifecycle walks one plugin through the story:
// capacity, allocation and its limits, health, the plugin restarting,
// the manager restarting, and the pod-resources API.
func TestDevicePluginLifecycle(t *testing.T) {
	root := t.TempDir()
	devDir := devices(t, 4)
	unhealthy := filepath.Join(t.TempDir(), "unhealthy")
	mountDir := t.TempDir()
	m, stop := startManager(t, root, 3*time.Second)
	p := startPlugin(t, root, devDir, "-unhealthy-file", unhealthy, "-mount-dir", mountDir, "-prestart")
	took := waitResources(t, m, "bonsai.test/dev", 4, 4, 5*time.Second)
	t.Logf("registration to capacity: %s", took)

	ctx := context.Background()
	a, b, c := devPod("a", 1), devPod("b", 2), devPod("c", 3)
	for _, pod := range []*corev1.Pod{a, b} {
		if err := m.Allocate(ctx, pod); err != nil {
			t.Fatalf("allocate %s: %v", pod.Name, err)
		}
	}
	err := m.Allocate(ctx, c)
	var ae *AdmissionError
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), "requested number of devices unavailable for bonsai.test/dev. Requested: 3, Available: 1") {
		t.Fatalf("allocate c: %v, want an AdmissionError for 3 of 1 free", err)
	}
	if m.Holds(c.UID) {
		t.Fatal("a refused pod holds devices")
	}
	held := map[string]string{}
	for _, pod := range []*corev1.Pod{a, b} {
		opts, err := m.ContainerOptions(ctx, pod.UID, "c0")
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, d := range opts.Devices {
			if d.HostPath != filepath.Join(devDir, filepath.Base(d.ContainerPath)) || d.Permissions != "rw" {
				t.Errorf("%s: device %+v", pod.Name, d)
			}
			if other, ok := held[d.ContainerPath]; ok {
				t.Errorf("%s given to %s and %s", d.ContainerPath, other, pod.Name)
			}
			held[d.ContainerPath] = pod.Name
			ids = append(ids, filepath.Base(d.ContainerPath))
		}
		if want := "TEST_DEVICES=" + strings.Join(ids, ","); !slices.Equal(opts.Env, []string{want}) {
			t.Errorf("%s env %v, want [%s]", pod.Name, opts.Env, want)
		}
		if len(opts.Mounts) != 1 || opts.Mounts[0] != (Mount{HostPath: mountDir, ContainerPath: "/testplugin", ReadOnly: true}) {
			t.Errorf("%s mounts %+v", pod.Name, opts.Mounts)
		}
		if opts.Annotations["bonsai.test/devices"] != strings.Join(ids, ",") {
			t.Errorf("%s annotations %v", pod.Name, opts.Annotations)
		}
	}
	if len(held) != 3 {
		t.Fatalf("devices held: %v, want 3", held)
	}
	if calls := p.calls(t); !slices.Contains(calls, "prestart") {
		t.Errorf("PreStartContainer was asked for but not called: %v", calls)
	}

	// The free device goes unhealthy: allocatable 3, capacity 4.
	free := ""
	for i := range 4 {
		if _, ok := held["/dev/tdev"+fmt.Sprint(i)]; !ok {
			free = fmt.Sprintf("tdev%d", i)
		}
	}
	os.WriteFile(unhealthy, []byte(free+"\n"), 0o644)
	if d := waitResources(t, m, "bonsai.test/dev", 4, 3, 2*time.Second); d > time.Second {
		t.Errorf("unhealthy device took %s to lower allocatable, want <= 1s", d)
	}
	if err := m.Allocate(ctx, devPod("d", 1)); err == nil {
		t.Fatal("a pod got the unhealthy device")
	}

	// The pod-resources API reports the allocations.
	pr := podResourcesClient(t, root)
	list, err := pr.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, p := range list.PodResources {
		for _, c := range p.Containers {
			for _, d := range c.Devices {
				if d.ResourceName != "bonsai.test/dev" {
					t.Errorf("resource %q", d.ResourceName)
				}
				got[p.Namespace+"/"+p.Name+"/"+c.Name] = append(got[p.Namespace+"/"+p.Name+"/"+c.Name], d.DeviceIds...)
			}
		}
	}
	if len(got["default/a/c0"]) != 1 || len(got["default/b/c0"]) != 2 || len(got) != 2 {
		t.Errorf("List: %v", got)
	}
	one, err := pr.Get(ctx, &podresourcesapi.GetPodResourcesRequest{PodName: "b", PodNamespace: "default"})
	if err != nil || len(one.PodResources.Containers) != 1 || len(one.PodResources.Containers[0].Devices) != 2 {
		t.Errorf("Get b: %v %v", one, err)
	}
	if _, err := pr.Get(ctx, &podresourcesapi.GetPodResourcesRequest{PodName: "nope", PodNamespace: "default"}); err == nil {
		t.Error("Get of an unknown pod succeeded")
	}
	// With the kubelet's pod list, every pod is listed, devices or not.
	m.SetActivePods(func() []ActivePod {
		return []ActivePod{
			{UID: a.UID, Namespace: "default", Name: "a", Containers: []string{"c0"}},
			{UID: "uid-plain", Namespace: "default", Name: "plain", Containers: []string{"init", "main"}},
		}
	})
	list, err = pr.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil || len(list.PodResources) != 2 || list.PodResources[1].Name != "plain" || len(list.PodResources[1].Containers) != 2 ||
		len(list.PodResources[1].Containers[1].Devices) != 0 || len(list.PodResources[0].Containers[0].Devices) != 1 {
		t.Errorf("List with the kubelet's pods: %v %v", list, err)
	}
	if got, err := pr.Get(ctx, &podresourcesapi.GetPodResourcesRequest{PodName: "plain", PodNamespace: "default"}); err != nil || got.PodResources.Containers[0].Name != "init" {
		t.Errorf("Get plain: %v %v", got, err)
	}
	m.SetActivePods(nil)
	alloc, err := pr.GetAllocatableResources(ctx, &podresourcesapi.AllocatableResourcesRequest{})
	if err != nil || len(alloc.Devices) != 3 {
		t.Errorf("GetAllocatableResources: %v %v, want the 3 healthy devices", alloc, err)
	}

	// Metrics.
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collectors()...)
	if v := gauge(t, reg, "bonsai_device_plugin_allocatable_devices"); v != 3 {
		t.Errorf("allocatable devices metric %v, want 3", v)
	}
	if v := gauge(t, reg, "bonsai_device_plugin_allocated_devices"); v != 3 {
		t.Errorf("allocated devices metric %v, want 3", v)
	}
	if v := gauge(t, reg, "kubelet_device_plugin_registration_total"); v != 1 {
		t.Errorf("registrations metric %v, want 1", v)
	}

	// The plugin dies: its devices go unhealthy at once; it comes back
	// and registers again.
	os.WriteFile(unhealthy, nil, 0o644)
	waitResources(t, m, "bonsai.test/dev", 4, 4, 2*time.Second)
	p.kill()
	waitResources(t, m, "bonsai.test/dev", 4, 0, time.Second)
	p = startPlugin(t, root, devDir, "-unhealthy-file", unhealthy, "-mount-dir", mountDir)
	waitResources(t, m, "bonsai.test/dev", 4, 4, 5*time.Second)
	if m.Allocate(ctx, devPod("c", 3)) == nil {
		t.Fatal("the plugin's restart freed devices pods hold")
	}

	// The manager restarts: the stale sockets go, the plugin registers
	// again within 5 s, pods keep their devices and nothing is given
	// twice.
	before := len(p.calls(t))
	stop()
	<-m.Stopped()
	time.Sleep(100 * time.Millisecond)
	m, _ = startManager(t, root, 3*time.Second)
	if _, err := os.Stat(filepath.Join(root, PluginsDir, "testplugin.sock")); err == nil {
		// The plugin may already have re-created it; it must have
		// registered again in any case.
		t.Log("plugin socket re-created already")
	}
	if !m.Holds(a.UID) || !m.Holds(b.UID) {
		t.Fatal("allocations lost over a restart")
	}
	if d := waitResources(t, m, "bonsai.test/dev", 4, 4, 5*time.Second); d > 5*time.Second {
		t.Errorf("plugin re-registered after %s, want <= 5s", d)
	}
	if err := m.Allocate(ctx, a); err != nil {
		t.Fatal(err)
	}
	if n := len(p.calls(t)); n != before {
		t.Errorf("re-admitting a pod that holds devices called the plugin: %v", p.calls(t)[before:])
	}
	e := devPod("e", 1)
	if err := m.Allocate(ctx, e); err != nil {
		t.Fatal(err)
	}
	opts, _ := m.ContainerOptions(ctx, e.UID, "c0")
	if owner, ok := held[opts.Devices[0].ContainerPath]; ok || len(opts.Devices) != 1 {
		t.Errorf("after a restart e got %v, already held by %s", opts.Devices, owner)
	}
	if m.Allocate(ctx, devPod("f", 1)) == nil {
		t.Error("a fifth device was handed out")
	}
	m.Release(a.UID)
	if err := m.Allocate(ctx, devPod("f", 1)); err != nil {
		t.Errorf("a released device was not handed out again: %v", err)
	}
	m.Retain(func(uid types.UID) bool { return uid != b.UID })
	if m.Holds(b.UID) {
		t.Error("Retain kept a pod it was not told to keep")
	}

	// Without its plugin the resource goes after the grace period.
	p.kill()
	waitResources(t, m, "bonsai.test/dev", 4, 0, time.Second)
	waitResources(t, m, "bonsai.test/dev", -1, 0, 5*time.Second)
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		sum := 0.0
		for _, m := range mf.Metric {
			if m.Gauge != nil {
				sum += m.Gauge.GetValue()
			}
			if m.Counter != nil {
				sum += m.Counter.GetValue()
			}
		}
		return sum
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func podResourcesClient(t *testing.T, root string) podresourcesapi.PodResourcesListerClient {
	sock := filepath.Join(root, PodResourcesDir, KubeletSocket)
	conn, err := DialUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return podresourcesapi.NewPodResourcesListerClient(conn)
}

func TestPreferredAllocationAndNUMA(t *testing.T) {
	root := t.TempDir()
	devDir := devices(t, 4)
	m, _ := startManager(t, root, time.Minute)
	p := startPlugin(t, root, devDir, "-preferred", "-socket", "pref.sock")
	waitResources(t, m, "bonsai.test/dev", 4, 4, 5*time.Second)
	ctx := context.Background()
	pod := devPod("p", 2)
	if err := m.Allocate(ctx, pod); err != nil {
		t.Fatal(err)
	}
	// The plugin prefers the last IDs; without it tdev0 and tdev1 would
	// be taken.
	if calls := p.calls(t); !slices.Contains(calls, "tdev2,tdev3") {
		t.Errorf("GetPreferredAllocation not honoured: Allocate calls %v", calls)
	}
	p.kill()

	// Without a preference, devices of one NUMA node are chosen.
	root2 := t.TempDir()
	m2, _ := startManager(t, root2, time.Minute)
	p2 := startPlugin(t, root2, devDir, "-numa", "2", "-socket", "numa.sock")
	waitResources(t, m2, "bonsai.test/dev", 4, 4, 5*time.Second)
	if err := m2.Allocate(ctx, devPod("n", 2)); err != nil {
		t.Fatal(err)
	}
	// tdev0 and tdev2 are on NUMA node 0, tdev1 and tdev3 on node 1.
	if calls := p2.calls(t); !slices.Contains(calls, "tdev0,tdev2") {
		t.Errorf("devices not taken from one NUMA node: %v", calls)
	}
}

func TestInitContainerDevicesReused(t *testing.T) {
	root := t.TempDir()
	devDir := devices(t, 2)
	m, _ := startManager(t, root, time.Minute)
	startPlugin(t, root, devDir)
	waitResources(t, m, "bonsai.test/dev", 2, 2, 5*time.Second)
	pod := devPod("p", 2)
	pod.Spec.InitContainers = []corev1.Container{{Name: "init", Resources: pod.Spec.Containers[0].Resources}}
	ctx := context.Background()
	if err := m.Allocate(ctx, pod); err != nil {
		t.Fatalf("an init container's devices were not reused: %v", err)
	}
	i, _ := m.ContainerOptions(ctx, pod.UID, "init")
	c, _ := m.ContainerOptions(ctx, pod.UID, "c0")
	if !slices.Equal(i.Env, c.Env) || len(c.Devices) != 2 {
		t.Errorf("init got %v, app got %v; want the same two devices", i.Env, c.Env)
	}
}

func TestValidResourceName(t *testing.T) {
	for name, ok := range map[string]bool{
		"nvidia.com/gpu": true, "vendor.example/foo": true, "bonsai.dev/serial-port": true,
		"gpu": false, "/gpu": false, "kubernetes.io/gpu": false, "node.kubernetes.io/x": false,
		"vendor.example/": false, "vendor.example/a b": false, "UPPER_/x": false,
	} {
		if err := ValidResourceName(name); (err == nil) != ok {
			t.Errorf("ValidResourceName(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}

func TestPickByNUMA(t *testing.T) {
	topo := map[string]int64{"a": 0, "b": 1, "c": 1, "d": 1, "e": 0}
	avail := []string{"a", "b", "c", "d", "e"}
	for _, tc := range []struct {
		need int
		must []string
		want []string
	}{
		{2, nil, []string{"a", "e"}},           // the smallest node that fits
		{3, nil, []string{"b", "c", "d"}},      // only node 1 fits
		{4, nil, []string{"b", "c", "d", "a"}}, // none fits: largest first
		{2, []string{"b"}, []string{"b", "a"}}, // must-include first
	} {
		if got := pickByNUMA(avail, tc.must, topo, tc.need); !slices.Equal(got, tc.want) {
			t.Errorf("pickByNUMA(need %d, must %v) = %v, want %v", tc.need, tc.must, got, tc.want)
		}
	}
}

// TestReRegistrationReplaces registers a second plugin for the same
// resource while the first still runs: the new one's devices count, and
// the old one going away changes nothing.
func TestReRegistrationReplaces(t *testing.T) {
	root := t.TempDir()
	m, _ := startManager(t, root, time.Minute)
	old := startPlugin(t, root, devices(t, 4), "-socket", "old.sock")
	waitResources(t, m, "bonsai.test/dev", 4, 4, 5*time.Second)
	startPlugin(t, root, devices(t, 2), "-socket", "new.sock")
	waitResources(t, m, "bonsai.test/dev", 2, 2, 5*time.Second)
	old.kill()
	time.Sleep(300 * time.Millisecond)
	waitResources(t, m, "bonsai.test/dev", 2, 2, time.Second)
}

func TestCorruptCheckpoint(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, PluginsDir), 0o755)
	os.WriteFile(filepath.Join(root, PluginsDir, checkpointFile), []byte(`{"Data":{"PodDeviceEntries":[{"PodUID":"x"}]},"Checksum":1}`), 0o600)
	m, _ := startManager(t, root, time.Minute)
	if m.Holds("x") {
		t.Fatal("a checkpoint with a bad checksum was believed")
	}
	if _, err := os.Stat(filepath.Join(root, PluginsDir, KubeletSocket)); err != nil {
		t.Fatalf("no registration socket after a corrupt checkpoint: %v", err)
	}
}

// TestRegistrationOfAnAbsentPlugin: a plugin that registers a socket
// nobody serves adds no resource.
func TestRegistrationOfAnAbsentPlugin(t *testing.T) {
	root := t.TempDir()
	m, _ := startManager(t, root, time.Minute)
	conn, err := DialUnix(filepath.Join(root, PluginsDir, KubeletSocket))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = pluginapi.NewRegistrationClient(conn).Register(context.Background(), &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "nobody.sock", ResourceName: "vendor.example/ghost"})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if c, _ := m.Resources(); len(c) != 0 {
		t.Errorf("a plugin nobody serves has resources: %v", c)
	}
	_, err = pluginapi.NewRegistrationClient(conn).Register(context.Background(), &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "../x.sock", ResourceName: "vendor.example/ghost"})
	if err == nil || !strings.Contains(err.Error(), "endpoint") {
		t.Errorf("an endpoint outside the directory: %v", err)
	}
}
