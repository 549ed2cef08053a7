package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"bonsai.dev/bonsai/deviceplugin"
	"bonsai.dev/bonsai/testsupport/testenv"
)

const testDevice = "bonsai.test/dev"

// devicePlugin is the test device plugin (deviceplugin/testdata/testplugin)
// running as its own process, as a vendor's plugin would.
type devicePlugin struct {
	bin, dir, devDir, unhealthy, mountDir string
	cmd                                   *exec.Cmd
	out                                   *bytes.Buffer
	done                                  chan struct{}
}

func buildTestPlugin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "testplugin")
	out, err := exec.Command("go", "build", "-o", bin, "bonsai.dev/bonsai/deviceplugin/testdata/testplugin").CombinedOutput()
	if err != nil {
		t.Fatalf("building the test device plugin: %v\n%s", err, out)
	}
	return bin
}

// mknodDevices makes character devices with /dev/null's numbers, so a
// container can write to the ones it is given.
func mknodDevices(t *testing.T, dir string, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := syscall.Mknod(filepath.Join(dir, n), syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
			t.Fatalf("mknod %s: %v", n, err)
		}
	}
}

func (p *devicePlugin) start(t *testing.T) {
	t.Helper()
	p.out = &bytes.Buffer{}
	p.cmd = exec.Command(p.bin, "-dir", p.dir, "-dev-dir", p.devDir, "-unhealthy-file", p.unhealthy, "-mount-dir", p.mountDir, "-resource", testDevice)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.done = make(chan struct{})
	go func() { p.cmd.Wait(); close(p.done) }()
}

func (p *devicePlugin) stop() {
	if p.cmd != nil {
		p.cmd.Process.Kill()
		<-p.done
	}
}

// waitDevices waits until the node reports capacity and allocatable of
// the resource, and says how long that took.
func (e *podEnv) waitDevices(t *testing.T, res string, capWant, allocWant int64, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		n, err := e.cs.CoreV1().Nodes().Get(t.Context(), e.node, metav1.GetOptions{})
		if err == nil {
			c, a := n.Status.Capacity[corev1.ResourceName(res)], n.Status.Allocatable[corev1.ResourceName(res)]
			if c.Value() == capWant && a.Value() == allocWant {
				return time.Since(start)
			}
		}
		if time.Since(start) > within {
			var st corev1.NodeStatus
			if n != nil {
				st = n.Status
			}
			t.Fatalf("node %s: %s capacity/allocatable not %d/%d within %s: %v / %v\n%s", e.node, res, capWant, allocWant, within, st.Capacity, st.Allocatable, e.s.stderrText())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// devicePod asks the scheduler (no nodeName) for n devices of res; its
// container prints what it sees of them, then sleeps.
func devicePod(name, res string, n int) *corev1.Pod {
	rl := corev1.ResourceList{corev1.ResourceName(res): *resource.NewQuantity(int64(n), resource.DecimalSI)}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr(int64(1)), Containers: []corev1.Container{{
			Name: "main", Image: podImage,
			Command:   sh(`echo DEVS=$(cd /dev && ls -d tdev* ttyT* 2>/dev/null | tr '\n' ' '); echo ENV=$TEST_DEVICES; cat /testplugin/hello 2>/dev/null; for d in /dev/tdev*; do echo x > $d && echo WROTE=$d; done; sleep 3600`),
			Resources: corev1.ResourceRequirements{Limits: rl, Requests: rl},
		}}},
	}
}

func podResources(t *testing.T, root string) podresourcesapi.PodResourcesListerClient {
	t.Helper()
	sock := filepath.Join(root, "pod-resources", "kubelet.sock")
	conn, err := deviceplugin.DialUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return podresourcesapi.NewPodResourcesListerClient(conn)
}

// heldDevices is the pod-resources API's List: device IDs by pod.
func heldDevices(t *testing.T, pr podresourcesapi.PodResourcesListerClient) map[string][]string {
	t.Helper()
	list, err := pr.List(t.Context(), &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, p := range list.PodResources {
		for _, c := range p.Containers {
			for _, d := range c.Devices {
				out[p.Name] = append(out[p.Name], d.DeviceIds...)
			}
		}
		sort.Strings(out[p.Name])
	}
	return out
}

func TestDevicePlugins(t *testing.T) {
	bin := buildTestPlugin(t)
	testenv.Require(t, os.Geteuid() == 0, "device plugin tests need root (mknod, containerd)")
	devDir, serialDir := t.TempDir(), t.TempDir()
	mknodDevices(t, devDir, "tdev0", "tdev1", "tdev2", "tdev3")
	mknodDevices(t, serialDir, "ttyT0")
	mountDir := t.TempDir()
	os.WriteFile(filepath.Join(mountDir, "hello"), []byte("HELLO=from-plugin\n"), 0o644)
	devicesYAML := filepath.Join(t.TempDir(), "devices.yaml")
	os.WriteFile(devicesYAML, []byte(fmt.Sprintf("resources:\n- name: bonsai.test/serial\n  devices: [%q]\n", filepath.Join(serialDir, "ttyT*"))), 0o644)

	e := startPodEnv(t, "--device-config="+devicesYAML)
	root := filepath.Join(e.s.dataDir, "kubelet")
	p := &devicePlugin{bin: bin, dir: filepath.Join(root, "device-plugins"), devDir: devDir, unhealthy: filepath.Join(t.TempDir(), "unhealthy"), mountDir: mountDir}
	p.start(t)
	t.Cleanup(p.stop)
	took := e.waitDevices(t, testDevice, 4, 4, 10*time.Second)
	t.Logf("plugin start to capacity on the Node: %s", took)

	// 1, 2 and 3 devices of 4: the first two run, the third waits.
	for _, pod := range []*corev1.Pod{devicePod("one", testDevice, 1), devicePod("two", testDevice, 2), devicePod("three", testDevice, 3)} {
		if _, err := e.cs.CoreV1().Pods("default").Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	one := e.waitPod(t, "one", 60*time.Second, "Running", running)
	two := e.waitPod(t, "two", 60*time.Second, "Running", running)
	e.waitPod(t, "three", 20*time.Second, "Pending as Unschedulable", func(p *corev1.Pod) bool {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable {
				return p.Status.Phase == corev1.PodPending && strings.Contains(c.Message, "Insufficient "+testDevice)
			}
		}
		return false
	})

	pr := podResources(t, root)
	held := heldDevices(t, pr)
	if len(held["one"]) != 1 || len(held["two"]) != 2 || len(held) != 2 {
		t.Fatalf("pod-resources List: %v, want one with 1 device and two with 2", held)
	}
	all := append(append([]string(nil), held["one"]...), held["two"]...)
	sort.Strings(all)
	if len(slices.Compact(slices.Clone(all))) != 3 {
		t.Fatalf("a device given twice: %v", held)
	}
	// Each container sees exactly its device nodes, can write to them,
	// and has the plugin's env and mount.
	for _, pod := range []*corev1.Pod{one, two} {
		ids := held[pod.Name]
		want := fmt.Sprintf("DEVS=%s\nENV=%s\nHELLO=from-plugin\n", strings.Join(ids, " "), strings.Join(ids, ","))
		for _, id := range ids {
			want += "WROTE=/dev/" + id + "\n"
		}
		waitLog(t, e, pod, want)
	}

	// A free device goes unhealthy: allocatable 3, capacity stays 4.
	free := ""
	for _, id := range []string{"tdev0", "tdev1", "tdev2", "tdev3"} {
		if !slices.Contains(all, id) {
			free = id
		}
	}
	os.WriteFile(p.unhealthy, []byte(free+"\n"), 0o644)
	if d := e.waitDevices(t, testDevice, 4, 3, 5*time.Second); d > 1500*time.Millisecond {
		t.Errorf("an unhealthy device took %s to lower allocatable (the plugin polls every 100 ms)", d)
	}
	// A device a running pod holds goes unhealthy: allocatable drops for
	// new pods, the pod keeps running with it.
	os.WriteFile(p.unhealthy, []byte(held["one"][0]+"\n"), 0o644)
	e.waitDevices(t, testDevice, 4, 3, 5*time.Second)
	if got := e.waitPod(t, "one", 5*time.Second, "Running", running); got.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("one restarted when its device went unhealthy: %s", statusSummary(got))
	}
	if now := heldDevices(t, pr); !slices.Equal(now["one"], held["one"]) {
		t.Errorf("one's devices changed to %v when one went unhealthy", now["one"])
	}
	os.WriteFile(p.unhealthy, nil, 0o644)
	e.waitDevices(t, testDevice, 4, 4, 5*time.Second)

	// The plugin restarts: its devices are unhealthy until it registers
	// again.
	p.stop()
	e.waitDevices(t, testDevice, 4, 0, 5*time.Second)
	p.start(t)
	e.waitDevices(t, testDevice, 4, 4, 10*time.Second)

	// A pod bound straight to the node (no scheduler) that asks for more
	// than is free fails at admission instead of running without devices.
	bound := devicePod("bound", testDevice, 2)
	bound.Spec.NodeName = e.node
	if _, err := e.cs.CoreV1().Pods("default").Create(t.Context(), bound, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitPod(t, "bound", 30*time.Second, "Failed with UnexpectedAdmissionError", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodFailed && p.Status.Reason == "UnexpectedAdmissionError" &&
			strings.Contains(p.Status.Message, "Requested: 2, Available: 1")
	})

	// The generic plugin: the serial port is a resource; a device node
	// appearing and disappearing while bonsai runs is seen.
	e.waitDevices(t, "bonsai.test/serial", 1, 1, 10*time.Second)
	serial := devicePod("serial", "bonsai.test/serial", 1)
	serial.Spec.Containers[0].Command = sh("ls " + serialDir + "; sleep 3600")
	if _, err := e.cs.CoreV1().Pods("default").Create(t.Context(), serial, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sp := e.waitPod(t, "serial", 60*time.Second, "Running", running)
	waitLog(t, e, sp, "ttyT0\n")
	mknodDevices(t, serialDir, "ttyT1")
	e.waitDevices(t, "bonsai.test/serial", 2, 2, 5*time.Second)
	os.Remove(filepath.Join(serialDir, "ttyT0"))
	e.waitDevices(t, "bonsai.test/serial", 2, 1, 5*time.Second)

	// pod-resources lists the node's other pods too, as the kubelet's does.
	plain := devicePod("plain", testDevice, 0)
	plain.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
	if _, err := e.cs.CoreV1().Pods("default").Create(t.Context(), plain, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitPod(t, "plain", 60*time.Second, "Running", running)
	got, err := pr.Get(t.Context(), &podresourcesapi.GetPodResourcesRequest{PodName: "plain", PodNamespace: "default"})
	if err != nil || len(got.PodResources.Containers) != 1 || got.PodResources.Containers[0].Name != "main" || len(got.PodResources.Containers[0].Devices) != 0 {
		t.Errorf("pod-resources Get of a pod without devices: %v %v", got, err)
	}

	// /metrics carries the device manager's figures.
	raw, err := e.cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`bonsai_device_plugin_allocatable_devices{resource_name="bonsai.test/dev"} 4`,
		`bonsai_device_plugin_allocated_devices{resource_name="bonsai.test/dev"} 3`,
		`kubelet_device_plugin_registration_total{resource_name="bonsai.test/dev"} 2`,
	} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// bonsai restarts: the stale sockets go, the plugin registers again
	// within 5 s, running pods keep their devices, nothing is given twice.
	e.restart(t)
	start := time.Now()
	registeredAgain := func() bool {
		_, after, ok := strings.Cut(p.out.String(), "socket gone; registering again\n")
		return ok && strings.Contains(after, "\nregistered\n")
	}
	for !registeredAgain() {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("the plugin did not register again within 5 s of bonsai's restart:\n%s", p.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("plugin registered again %s after bonsai was up", time.Since(start))
	e.waitDevices(t, testDevice, 4, 4, 10*time.Second)
	for _, name := range []string{"one", "two"} {
		got := e.waitPod(t, name, 30*time.Second, "Running", running)
		if got.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("%s restarted over bonsai's restart: %s", name, statusSummary(got))
		}
	}
	if after := heldDevices(t, podResources(t, root)); !slices.Equal(after["one"], held["one"]) || !slices.Equal(after["two"], held["two"]) {
		t.Fatalf("devices after restart %v, before %v", after, held)
	}
	four := devicePod("four", testDevice, 1)
	if _, err := e.cs.CoreV1().Pods("default").Create(t.Context(), four, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitPod(t, "four", 60*time.Second, "Running", running)
	now := heldDevices(t, podResources(t, root))
	if len(now["four"]) != 1 || slices.Contains(all, now["four"][0]) {
		t.Fatalf("four got %v; one and two hold %v", now["four"], all)
	}
	// "three" still cannot fit: 4 devices, 4 held.
	if p3, _ := e.cs.CoreV1().Pods("default").Get(t.Context(), "three", metav1.GetOptions{}); p3.Spec.NodeName != "" {
		t.Fatalf("three was scheduled with no devices free")
	}
	// Deleting two frees its devices: three does not fit yet (2 free of
	// 3), deleting four too lets it run.
	for _, name := range []string{"two", "four"} {
		if err := e.cs.CoreV1().Pods("default").Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.waitPod(t, "three", 60*time.Second, "Running", running)
}

func waitLog(t *testing.T, e *podEnv, p *corev1.Pod, want string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := e.logText(t, p, "main", 0)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s log %q, want %q", p.Name, got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
