package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"bonsai.dev/bonsai/deviceplugin"
)

const benchDevice = "bench.bonsai.dev/dev"

type deviceResults struct {
	regP50, regP99             *float64
	allocP50, allocP99         *float64
	withDevP50, withDevP99     *float64
	withoutDevP50              *float64
	burstRunning, burstTwice   *float64
	burstFailed, burstAllReady *float64
}

func deviceRows(r *deviceResults, samples, seq, burst, devices int) []Row {
	row := func(name, unit string, v *float64, t *Target) Row {
		return Row{Name: "deviceplugin: " + name, Unit: unit, Bonsai: v, Target: t}
	}
	b := fmt.Sprintf("%d pods for %d devices at once", burst, devices)
	return []Row{
		row(fmt.Sprintf("Register call to capacity on the Node p50 (%d registrations)", samples), "ms", r.regP50, nil),
		row(fmt.Sprintf("Register call to capacity on the Node p99 (%d registrations)", samples), "ms", r.regP99, atMost(1000, "ms")),
		row(fmt.Sprintf("Allocate overhead at admission p50 (%d pods, 1 device each)", seq), "ms", r.allocP50, nil),
		row(fmt.Sprintf("Allocate overhead at admission p99 (%d pods, 1 device each)", seq), "ms", r.allocP99, atMost(20, "ms")),
		row("pod with a device: create to Running p50", "ms", r.withDevP50, nil),
		row("pod with a device: create to Running p99", "ms", r.withDevP99, nil),
		row("pod without a device: create to Running p50 (same node)", "ms", r.withoutDevP50, nil),
		row(b+": Running", "pods", r.burstRunning, exactly(float64(devices), "pods")),
		row(b+": devices given twice", "devices", r.burstTwice, exactly(0, "devices")),
		row(b+": failed at admission", "pods", r.burstFailed, exactly(0, "pods")),
		row(b+": create to all Running", "ms", r.burstAllReady, nil),
	}
}

// devicePluginSuite runs a real node with the test device plugin
// (deviceplugin/testdata/testplugin) as its own process, its devices
// character nodes made with mknod.
func devicePluginSuite(ctx context.Context, b *bench) ([]Row, error) {
	samples, seq, burst, devices := 20, 30, 200, 40
	if b.quick {
		samples = 5
	}
	res := &deviceResults{}
	rows := func() []Row { return deviceRows(res, samples, seq, burst, devices) }
	b.logf("deviceplugin: starting bonsai with its own containerd")
	if os.Geteuid() != 0 {
		return rows(), errors.New("the deviceplugin suite needs root (mknod, network namespaces, containerd)")
	}
	n, err := startRealNode(ctx, b, "deviceplugin", "10.253.0.0/16")
	if err != nil {
		return rows(), err
	}
	defer n.close()
	plugin, err := buildTestPlugin(ctx, b)
	if err != nil {
		return rows(), err
	}
	pluginDir := filepath.Join(n.dir, "kubelet", "device-plugins")
	devDir := filepath.Join(n.dir, "devices")
	if err := mknodDevices(devDir, devices); err != nil {
		return rows(), err
	}
	// start runs the plugin; registering gets the time it starts its
	// Register call, from the line it prints.
	start := func(args ...string) (cmd *exec.Cmd, registering chan time.Time, err error) {
		cmd = execCommand(ctx, plugin, append([]string{"-dir", pluginDir, "-dev-dir", devDir}, args...)...)
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, nil, err
		}
		b.onCleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		registering = make(chan time.Time, 1)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if ns, ok := strings.CutPrefix(sc.Text(), "registering "); ok {
					if v, err := strconv.ParseInt(ns, 10, 64); err == nil {
						select {
						case registering <- time.Unix(0, v):
						default:
						}
					}
				}
			}
		}()
		return cmd, registering, nil
	}

	b.logf("deviceplugin: %d registrations", samples)
	var reg []time.Duration
	for i := range samples {
		name := fmt.Sprintf("bench.bonsai.dev/reg%d", i)
		cmd, registering, err := start("-resource", name, "-socket", fmt.Sprintf("reg%d.sock", i))
		if err != nil {
			return rows(), err
		}
		if err := waitCapacity(ctx, n.cs, n.name, name, int64(devices), 30*time.Second); err != nil {
			return rows(), err
		}
		seen := time.Now()
		select {
		case t0 := <-registering:
			reg = append(reg, seen.Sub(t0))
			if d := seen.Sub(t0); d > 500*time.Millisecond {
				b.logf("deviceplugin: registration %d (%s) took %s, from %s", i, name, d, t0.UTC().Format("15:04:05.000"))
			}
		case <-time.After(5 * time.Second):
			return rows(), errors.New("the test plugin did not say when it registered")
		}
		cmd.Process.Kill()
		cmd.Wait()
	}
	res.regP50, res.regP99 = ms(percentile(reg, 0.5)), ms(percentile(reg, 0.99))

	if _, _, err := start("-resource", benchDevice, "-socket", "bench.sock"); err != nil {
		return rows(), err
	}
	if err := waitCapacity(ctx, n.cs, n.name, benchDevice, int64(devices), 30*time.Second); err != nil {
		return rows(), err
	}
	b.logf("deviceplugin: %d pods one at a time without, then with a device", seq)
	var without, with []time.Duration
	for i := range seq {
		d, err := podsToRunning(ctx, n.cs, fmt.Sprintf("plain-%d", i), 1, func(name string) *corev1.Pod { return devicePod(name, 0) })
		if err != nil {
			return rows(), err
		}
		without = append(without, d...)
	}
	if err := deletePods(ctx, n.cs); err != nil {
		return rows(), err
	}
	// The API forgets pods deleted with no grace at once; their
	// containers and networks go in the background, and the first pods
	// after them would pay for it.
	if err := sleep(ctx, 5*time.Second); err != nil {
		return rows(), err
	}
	for i := range seq {
		d, err := podsToRunning(ctx, n.cs, fmt.Sprintf("dev-%d", i), 1, func(name string) *corev1.Pod { return devicePod(name, 1) })
		if err != nil {
			return rows(), err
		}
		with = append(with, d...)
	}
	res.withoutDevP50 = ms(percentile(without, 0.5))
	res.withDevP50, res.withDevP99 = ms(percentile(with, 0.5)), ms(percentile(with, 0.99))
	raw, err := n.cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return rows(), err
	}
	res.allocP50, res.allocP99 = histogramQuantile(string(raw), "bonsai_device_admission_duration_seconds", 0.5), histogramQuantile(string(raw), "bonsai_device_admission_duration_seconds", 0.99)
	if err := deletePods(ctx, n.cs); err != nil {
		return rows(), err
	}

	b.logf("deviceplugin: %d pods at once for %d devices", burst, devices)
	t0 := time.Now()
	errs := make(chan error, burst)
	for i := range burst {
		go func() {
			_, err := n.cs.CoreV1().Pods("default").Create(ctx, devicePod(fmt.Sprintf("burst-%d", i), 1), metav1.CreateOptions{})
			errs <- err
		}()
	}
	for range burst {
		if err := <-errs; err != nil {
			return rows(), err
		}
	}
	running, failed, err := waitBurst(ctx, n.cs, devices, burst)
	if err != nil {
		return rows(), err
	}
	res.burstAllReady = ms(time.Since(t0))
	// Anything more that would start does so in a few seconds.
	if err := sleep(ctx, 3*time.Second); err != nil {
		return rows(), err
	}
	running, failed, _ = countPods(ctx, n.cs)
	res.burstRunning, res.burstFailed = num(float64(running)), num(float64(failed))
	twice, err := doubleBooked(ctx, filepath.Join(n.dir, "kubelet", "pod-resources", "kubelet.sock"))
	if err != nil {
		return rows(), err
	}
	res.burstTwice = num(float64(twice))
	if err := deletePods(ctx, n.cs); err != nil {
		return rows(), err
	}
	return rows(), nil
}

func buildTestPlugin(ctx context.Context, b *bench) (string, error) {
	bin := filepath.Join(b.dir, "testplugin")
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	cmd := execCommand(ctx, "go", "build", "-o", bin, "./deviceplugin/testdata/testplugin")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(out)))
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./deviceplugin/testdata/testplugin: %w", err)
	}
	return bin, nil
}

// mknodDevices makes n character devices with /dev/null's numbers.
func mknodDevices(dir string, n int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i := range n {
		if err := syscall.Mknod(filepath.Join(dir, fmt.Sprintf("bdev%02d", i)), syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
			return fmt.Errorf("mknod: %w", err)
		}
	}
	return nil
}

func waitCapacity(ctx context.Context, cs kubernetes.Interface, node, res string, want int64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err == nil {
			if q, ok := n.Status.Allocatable[corev1.ResourceName(res)]; ok && q.Value() == want {
				return nil
			}
		}
		if err := sleep(ctx, 5*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("node %s: %s not %d within %s", node, res, want, timeout)
}

// devicePod is a sleeping busybox pod asking the scheduler for n devices.
func devicePod(name string, n int) *corev1.Pod {
	zero := int64(0)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &zero, Containers: []corev1.Container{{
			Name: "main", Image: "bonsai.test/busybox:1", ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"},
		}}},
	}
	if n > 0 {
		rl := corev1.ResourceList{benchDevice: *resource.NewQuantity(int64(n), resource.DecimalSI)}
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Limits: rl, Requests: rl}
	}
	return p
}

func countPods(ctx context.Context, cs kubernetes.Interface) (running, failed, unschedulable int) {
	l, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, 0, 0
	}
	for _, p := range l.Items {
		switch p.Status.Phase {
		case corev1.PodRunning:
			running++
		case corev1.PodFailed:
			failed++
		case corev1.PodPending:
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable {
					unschedulable++
				}
			}
		}
	}
	return running, failed, unschedulable
}

// waitBurst waits until want pods run and the rest are failed or marked
// unschedulable.
func waitBurst(ctx context.Context, cs kubernetes.Interface, want, total int) (running, failed int, err error) {
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		r, f, u := countPods(ctx, cs)
		if r >= want && r+f+u == total {
			return r, f, nil
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return 0, 0, err
		}
	}
	r, f, u := countPods(ctx, cs)
	return r, f, fmt.Errorf("burst: %d running, %d failed, %d unschedulable of %d after 3 minutes", r, f, u, total)
}

// doubleBooked asks the pod-resources API how many device IDs are held by
// more than one container.
func doubleBooked(ctx context.Context, sock string) (int, error) {
	conn, err := deviceplugin.DialUnix(sock)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	list, err := podresourcesapi.NewPodResourcesListerClient(conn).List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return 0, err
	}
	seen := map[string]int{}
	for _, p := range list.PodResources {
		for _, c := range p.Containers {
			for _, d := range c.Devices {
				for _, id := range d.DeviceIds {
					seen[d.ResourceName+"/"+id]++
				}
			}
		}
	}
	twice := 0
	for _, n := range seen {
		if n > 1 {
			twice++
		}
	}
	if len(seen) == 0 {
		return 0, errors.New("pod-resources List reports no devices held")
	}
	return twice, nil
}

// histogramQuantile is Prometheus' histogram_quantile over one histogram
// in /metrics text: linear interpolation inside the bucket, in ms.
func histogramQuantile(text, name string, q float64) *float64 {
	type bucket struct{ le, cum float64 }
	var bs []bucket
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name+`_bucket{le="`)
		if !ok {
			continue
		}
		le, count, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		c, err := strconv.ParseFloat(strings.TrimSpace(count), 64)
		if err != nil {
			continue
		}
		l := math.Inf(1)
		if le != "+Inf" {
			if l, err = strconv.ParseFloat(le, 64); err != nil {
				continue
			}
		}
		bs = append(bs, bucket{l, c})
	}
	if len(bs) == 0 || bs[len(bs)-1].cum == 0 {
		return nil
	}
	rank := q * bs[len(bs)-1].cum
	prevLe, prevCum := 0.0, 0.0
	for _, b := range bs {
		if b.cum >= rank {
			if math.IsInf(b.le, 1) {
				return num(prevLe * 1000)
			}
			v := prevLe + (b.le-prevLe)*(rank-prevCum)/(b.cum-prevCum)
			return num(v * 1000)
		}
		prevLe, prevCum = b.le, b.cum
	}
	return nil
}
