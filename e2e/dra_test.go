package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/testsupport/testenv"
)

const draDriverName = "dra.bonsai.test"

// draDriver is the test DRA driver (testsupport/dradriver, built on
// upstream's kubeletplugin helper) running as its own process; its
// output is kept across restarts.
type draDriver struct {
	bin  string
	args []string
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
}

func (d *draDriver) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.out.Write(p)
}

func (d *draDriver) output() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.out.String()
}

func startDRADriver(t *testing.T, args ...string) *draDriver {
	t.Helper()
	d := &draDriver{bin: filepath.Join(t.TempDir(), "dradriver"), args: args}
	if out, err := exec.Command("go", "build", "-o", d.bin, "bonsai.dev/bonsai/testsupport/dradriver").CombinedOutput(); err != nil {
		t.Fatalf("building the test DRA driver: %v\n%s", err, out)
	}
	d.start(t)
	t.Cleanup(d.stop)
	return d
}

func (d *draDriver) start(t *testing.T) {
	t.Helper()
	d.done = make(chan struct{})
	d.cmd = exec.Command(d.bin, d.args...)
	d.cmd.Stdout, d.cmd.Stderr = d, d
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); close(done) }(d.cmd, d.done)
}

// stop ends the driver as a pod's would be: SIGTERM, then SIGKILL.
func (d *draDriver) stop() {
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(5 * time.Second):
		d.cmd.Process.Kill()
		<-d.done
	}
}

// claimPod asks for one device through a claim made from the template.
func claimPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr(int64(1)),
			ResourceClaims:                []corev1.PodResourceClaim{{Name: "dev", ResourceClaimTemplateName: ptr("dev")}},
			Containers: []corev1.Container{{
				Name: "main", Image: podImage,
				Command:   sh(`echo DEV=$DRA_DEVICE; stat -c %t:%T /dev/dra0; sleep 3600`),
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "dev"}}},
			}},
		},
	}
}

// A real DRA driver registers through the plugin registry and publishes
// one device; a pod's claim from a template is prepared and its container
// gets the CDI device's env and device node; a second pod for the same
// device stays Pending with the scheduler's message; bonsai's restart
// prepares nothing again; deleting the first pod unprepares its claim and
// lets the second run, after a failed prepare (an event) is retried; a
// pod's deletion waits for its driver to unprepare.
func TestDRADriver(t *testing.T) {
	testenv.Require(t, os.Geteuid() == 0, "DRA tests need root (containerd)")
	cdiDir := t.TempDir()
	failFile := filepath.Join(t.TempDir(), "fail")
	e := startPodEnv(t, "--cdi-spec-dir="+cdiDir)
	root := filepath.Join(e.s.dataDir, "kubelet")
	d := startDRADriver(t, "-kubeconfig", filepath.Join(e.s.dataDir, "kubeconfig.yaml"), "-node", e.node,
		"-registry-dir", filepath.Join(root, "plugins_registry"), "-plugin-dir", filepath.Join(root, "plugins", draDriverName),
		"-cdi-dir", cdiDir, "-fail-file", failFile, "-host-dev", "/dev/zero")
	start := time.Now()
	waitFor(t, 20*time.Second, "the driver's ResourceSlice and registration", func() bool {
		sl, err := e.cs.ResourceV1().ResourceSlices().List(t.Context(), metav1.ListOptions{})
		return err == nil && len(sl.Items) == 1 && sl.Items[0].Spec.Driver == draDriverName &&
			strings.Contains(e.s.stderrText(), "DRA driver registered")
	})
	t.Logf("driver start to registered with its ResourceSlice: %s", time.Since(start).Round(time.Millisecond))

	if _, err := e.cs.ResourceV1().DeviceClasses().Create(t.Context(), &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: draDriverName},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
			Expression: `device.driver == "` + draDriverName + `"`}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cs.ResourceV1().ResourceClaimTemplates("default").Create(t.Context(), &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "dev"},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{
			{Name: "dev", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: draDriverName}}}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	for _, name := range []string{"a", "b"} {
		if _, err := e.cs.CoreV1().Pods("default").Create(t.Context(), claimPod(name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if name == "a" {
			a := e.waitPod(t, "a", 30*time.Second, "Running", running)
			// /dev/zero is character device 1:5.
			waitLog(t, e, a, "DEV=dev0\n1:5\n")
		}
	}
	e.waitPod(t, "b", 20*time.Second, "Pending as Unschedulable", func(p *corev1.Pod) bool {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable {
				return p.Status.Phase == corev1.PodPending && strings.Contains(c.Message, "cannot allocate all claims")
			}
		}
		return false
	})
	if n := strings.Count(d.output(), "prepare default/a-dev-"); n != 1 {
		t.Fatalf("the driver prepared a's claim %d times:\n%s", n, d.output())
	}

	// bonsai restarts (on another port, so the driver is restarted too,
	// to read the new kubeconfig): a keeps running, its claim is not
	// prepared again.
	d.stop()
	e.restart(t)
	d.start(t)
	if got := e.waitPod(t, "a", 30*time.Second, "Running", running); got.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("a restarted over bonsai's restart: %s", statusSummary(got))
	}
	waitFor(t, 10*time.Second, "the driver registered again", func() bool {
		return strings.Contains(e.s.stderrText(), "DRA driver registered")
	})
	if n := strings.Count(d.output(), "prepare default/a-dev-"); n != 1 {
		t.Fatalf("after bonsai's restart the driver prepared a's claim %d times:\n%s", n, d.output())
	}

	// Prepare fails for now: deleting a unprepares its claim, b is
	// scheduled, its prepare fails with an event and is retried once the
	// driver can.
	if err := os.WriteFile(failFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e.deletePods(t, "a")
	if !strings.Contains(d.output(), "unprepare default/a-dev-") {
		t.Fatalf("a's claim not unprepared before a left the API:\n%s", d.output())
	}
	e.waitEvent(t, "b", "FailedPrepareDynamicResources", "the test asks prepare to fail", 1)
	os.Remove(failFile)
	b := e.waitPod(t, "b", 30*time.Second, "Running", running)
	waitLog(t, e, b, "DEV=dev0\n1:5\n")
	if specs, _ := filepath.Glob(filepath.Join(cdiDir, "*.json")); len(specs) != 1 {
		t.Errorf("CDI specs %v: want only b's", specs)
	}

	// With the driver gone, b's deletion waits for the unprepare (its
	// claim must not be deallocated while prepared); the driver back,
	// b goes.
	d.stop()
	one := int64(1)
	if err := e.cs.CoreV1().Pods("default").Delete(t.Context(), "b", metav1.DeleteOptions{GracePeriodSeconds: &one}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if _, err := e.cs.CoreV1().Pods("default").Get(t.Context(), "b", metav1.GetOptions{}); err != nil {
		t.Fatalf("b left the API without its claim unprepared: %v", err)
	}
	d.start(t)
	waitFor(t, 20*time.Second, "b gone once the driver is back", func() bool {
		_, err := e.cs.CoreV1().Pods("default").Get(t.Context(), "b", metav1.GetOptions{})
		return err != nil && strings.Contains(d.output(), "unprepare default/b-dev-")
	})
	if specs, _ := filepath.Glob(filepath.Join(cdiDir, "*.json")); len(specs) != 0 {
		t.Errorf("CDI specs left: %v", specs)
	}
}

// The generic device plugin publishes a `dra: true` resource's device
// nodes as the DRA driver generic.bonsai.dev (a ResourceSlice of the
// node); a pod claims one through a DeviceClass and, side by side, asks
// for a device plugin resource in its limits: it gets both device nodes.
func TestGenericDRA(t *testing.T) {
	testenv.Require(t, os.Geteuid() == 0, "DRA tests need root (mknod, containerd)")
	serialDir, plainDir, cdiDir := t.TempDir(), t.TempDir(), t.TempDir()
	mknodDevices(t, serialDir, "ttyT0")
	mknodDevices(t, plainDir, "tp0")
	devicesYAML := filepath.Join(t.TempDir(), "devices.yaml")
	os.WriteFile(devicesYAML, []byte("resources:\n"+
		"- name: bonsai.test/serial\n  devices: [\""+filepath.Join(serialDir, "ttyT*")+"\"]\n  dra: true\n"+
		"- name: bonsai.test/plain\n  devices: [\""+filepath.Join(plainDir, "tp*")+"\"]\n"), 0o644)
	e := startPodEnv(t, "--device-config="+devicesYAML, "--cdi-spec-dir="+cdiDir)
	e.waitDevices(t, "bonsai.test/plain", 1, 1, 10*time.Second)
	var slice *resourcev1.ResourceSlice
	waitFor(t, 10*time.Second, "the generic driver's ResourceSlice", func() bool {
		s, err := e.cs.ResourceV1().ResourceSlices().Get(t.Context(), e.node+"-generic.bonsai.dev", metav1.GetOptions{})
		slice = s
		return err == nil && len(s.Spec.Devices) == 1
	})
	if d := slice.Spec.Devices[0]; !strings.HasPrefix(d.Name, "serial-") || !strings.HasSuffix(d.Name, "-ttyt0") ||
		*d.Attributes["path"].StringValue != filepath.Join(serialDir, "ttyT0") || *d.Attributes["resource"].StringValue != "bonsai.test/serial" {
		t.Errorf("published device %+v", d)
	}
	if n, _ := e.cs.CoreV1().Nodes().Get(t.Context(), e.node, metav1.GetOptions{}); n != nil {
		if _, ok := n.Status.Capacity["bonsai.test/serial"]; ok {
			t.Errorf("a dra resource is also an extended resource: %v", n.Status.Capacity)
		}
	}

	if _, err := e.cs.ResourceV1().DeviceClasses().Create(t.Context(), &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: "serial"},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
			Expression: `device.driver == "generic.bonsai.dev" && device.attributes["generic.bonsai.dev"].resource == "bonsai.test/serial"`}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cs.ResourceV1().ResourceClaimTemplates("default").Create(t.Context(), &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "dev"},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{
			{Name: "dev", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "serial"}}}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := claimPod("both")
	p.Spec.Containers[0].Command = sh("for d in " + serialDir + "/* " + plainDir + "/*; do echo x > $d && echo WROTE=$d; done; sleep 3600")
	rl := corev1.ResourceList{"bonsai.test/plain": *resource.NewQuantity(1, resource.DecimalSI)}
	p.Spec.Containers[0].Resources.Limits, p.Spec.Containers[0].Resources.Requests = rl, rl
	if _, err := e.cs.CoreV1().Pods("default").Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	both := e.waitPod(t, "both", 30*time.Second, "Running", running)
	waitLog(t, e, both, "WROTE="+serialDir+"/ttyT0\nWROTE="+plainDir+"/tp0\n")
	specs, _ := filepath.Glob(filepath.Join(cdiDir, "generic.bonsai.dev-*.json"))
	if len(specs) != 1 {
		t.Fatalf("CDI specs of the generic driver: %v", specs)
	}
	e.deletePods(t, "both")
	if specs, _ := filepath.Glob(filepath.Join(cdiDir, "generic.bonsai.dev-*.json")); len(specs) != 0 {
		t.Errorf("CDI specs left after the pod went: %v", specs)
	}
}
