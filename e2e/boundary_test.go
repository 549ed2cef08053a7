package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPodBoundary is one subtest per attack a pod author could try on the
// box through a pod spec, each against the real binary, its kubelet and
// containerd: what the API refuses, and what the kubelet refuses when a
// container prepares the attack at run time.
func TestPodBoundary(t *testing.T) {
	kubeletPort := freePort(t)
	e := startPodEnv(t, fmt.Sprintf("--kubelet-port=%d", kubeletPort), "--pod-max-pids=40")
	b := make([]byte, 4)
	rand.Read(b)
	marker := "/tmp/bonsai-escape-" + hex.EncodeToString(b)
	t.Cleanup(func() { os.RemoveAll(marker) })

	// refused creates the pod and wants kube-apiserver's 422 naming want.
	refused := func(t *testing.T, pod *corev1.Pod, want string) {
		t.Helper()
		pod.Spec.NodeName = e.node
		for i := range pod.Spec.Containers {
			pod.Spec.Containers[i].Image = podImage
		}
		_, err := e.cs.CoreV1().Pods("default").Create(t.Context(), pod, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
			t.Fatalf("create: %v, want 422 containing %q", err, want)
		}
		if _, err := e.cs.CoreV1().Pods("default").Get(t.Context(), pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("refused pod was stored: %v", err)
		}
	}
	emptyDir := []corev1.Volume{{Name: "vol", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}

	t.Run("subPath traversal", func(t *testing.T) {
		refused(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "subpath-traversal"}, Spec: corev1.PodSpec{
			Volumes: emptyDir,
			Containers: []corev1.Container{{Name: "main", Command: sh("echo owned > /host/target"),
				VolumeMounts: []corev1.VolumeMount{{Name: "vol", MountPath: "/host", SubPath: "../../../../../../../../" + strings.TrimPrefix(marker, "/")}}}},
		}}, `spec.containers[0].volumeMounts[0].subPath: Invalid value: "../../../../../../../../`)
		refused(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "subpathexpr-traversal"}, Spec: corev1.PodSpec{
			Volumes: emptyDir,
			Containers: []corev1.Container{{Name: "main", Command: sh("true"),
				VolumeMounts: []corev1.VolumeMount{{Name: "vol", MountPath: "/host", SubPathExpr: "$(HOME)/../.."}}}},
		}}, "must not contain '..'")
	})

	t.Run("item path traversal", func(t *testing.T) {
		refused(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "item-traversal"}, Spec: corev1.PodSpec{
			Volumes: []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "any"},
				Items:                []corev1.KeyToPath{{Key: "k", Path: "../../../../../../../.." + marker}}}}}},
			Containers: []corev1.Container{{Name: "main", Command: sh("true"), VolumeMounts: []corev1.VolumeMount{{Name: "cfg", MountPath: "/cfg"}}}},
		}}, `spec.volumes[0].configMap.items[0].path: Invalid value:`)
		refused(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "token-path"}, Spec: corev1.PodSpec{
			Volumes: []corev1.Volume{{Name: "tok", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: marker}}}}}}},
			Containers: []corev1.Container{{Name: "main", Command: sh("true"), VolumeMounts: []corev1.VolumeMount{{Name: "tok", MountPath: "/tok"}}}},
		}}, "must be a relative path")
	})

	t.Run("symlink swap between containers", func(t *testing.T) {
		// The init container plants symlinks out of the shared emptyDir;
		// the next containers mount them by subPath. Each must fail with
		// CreateContainerConfigError and the host stay untouched.
		p := e.create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "symlink-swap"}, Spec: corev1.PodSpec{
			Volumes: emptyDir,
			InitContainers: []corev1.Container{{Name: "plant", Command: sh("ln -s / /vol/escape && ln -s ../../../../../../../.. /vol/up && mkdir /vol/data && echo inside > /vol/data/f"),
				VolumeMounts: []corev1.VolumeMount{{Name: "vol", MountPath: "/vol"}}}},
			Containers: []corev1.Container{
				{Name: "absolute", Command: sh("touch /host" + marker + "; sleep 3600"),
					VolumeMounts: []corev1.VolumeMount{{Name: "vol", MountPath: "/host", SubPath: "escape"}}},
				{Name: "mkdir", Command: sh("sleep 3600"),
					VolumeMounts: []corev1.VolumeMount{{Name: "vol", MountPath: "/host", SubPath: "up" + marker}}},
				{Name: "inside", Command: sh("cat /data/f; sleep 3600"),
					VolumeMounts: []corev1.VolumeMount{{Name: "vol", MountPath: "/data", SubPath: "data"}}},
			},
		}})
		p = e.waitPod(t, p.Name, 60*time.Second, "refusing both escapes", func(p *corev1.Pod) bool {
			n := 0
			for _, cs := range p.Status.ContainerStatuses {
				if cs.State.Waiting != nil && cs.State.Waiting.Reason == "CreateContainerConfigError" && strings.Contains(cs.State.Waiting.Message, "not within volume path") {
					n++
				}
				if cs.Name == "inside" && cs.State.Running == nil {
					return false
				}
			}
			return n == 2
		})
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name != "inside" && (cs.State.Running != nil || cs.State.Terminated != nil) {
				t.Fatalf("container %s started: %s", cs.Name, statusSummary(p))
			}
		}
		if !hasEvent(e.events(t, p.Name), "Failed", "not within volume path") {
			t.Errorf("no Failed event names the refused subPath: %+v", e.events(t, p.Name))
		}
		if _, err := os.Lstat(marker); !os.IsNotExist(err) {
			t.Fatalf("the host's %s was created: %v", marker, err)
		}
		if got := e.logText(t, p, "inside", 0); got != "inside\n" {
			t.Fatalf("subPath inside the volume read %q", got)
		}
	})

	t.Run("subPathExpr and kubelet-written volumes", func(t *testing.T) {
		if _, err := e.cs.CoreV1().Secrets("default").Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "boundary"},
			StringData: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := e.create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "expr"}, Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Volumes:       append(emptyDir, corev1.Volume{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "boundary"}}}),
			Containers: []corev1.Container{{Name: "main",
				Env:          []corev1.EnvVar{{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
				Command:      sh("echo x > /logs/f && stat -f -c %T /sec && if (echo y > /sec/new) 2>/dev/null; then echo sec-writable; else echo sec-readonly; fi"),
				VolumeMounts: []corev1.VolumeMount{{Name: "vol", MountPath: "/logs", SubPathExpr: "pods/$(POD)"}, {Name: "sec", MountPath: "/sec", ReadOnly: false}}}},
		}})
		p = e.waitPod(t, p.Name, 60*time.Second, "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
		if got := e.logText(t, p, "main", 0); got != "tmpfs\nsec-readonly\n" {
			t.Fatalf("log %q, want the secret volume on a read-only tmpfs", got)
		}
		// The subPathExpr dir was made inside the emptyDir under the
		// pod's name.
		vol := fmt.Sprintf("%s/agent/pods/%s/volumes/empty-dir/vol/pods/expr/f", e.s.dataDir, p.UID)
		if b, err := os.ReadFile(vol); err != nil || string(b) != "x\n" {
			t.Fatalf("subPathExpr file: %q, %v", b, err)
		}
	})

	t.Run("hostPort on the API and kubelet ports", func(t *testing.T) {
		for _, port := range []struct {
			n    int
			what string
		}{{e.s.port, "the API server"}, {kubeletPort, "the kubelet API"}} {
			refused(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("steal-%d", port.n)}, Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "main", Command: sh("true"),
					Ports: []corev1.ContainerPort{{ContainerPort: 80, HostPort: int32(port.n)}}}},
			}}, fmt.Sprintf("spec.containers[0].ports[0].hostPort: Forbidden: port %d/TCP of the node is reserved for %s", port.n, port.what))
		}
		refused(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "steal-dns"}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "main", Command: sh("true"),
				Ports: []corev1.ContainerPort{{ContainerPort: 53, HostPort: 53, Protocol: corev1.ProtocolUDP}}}},
		}}, "port 53/UDP of the node is reserved for cluster DNS")
	})

	t.Run("seccomp profiles", func(t *testing.T) {
		dir := e.s.dataDir + "/kubelet/seccomp"
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		deny := `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir","mkdirat"],"action":"SCMP_ACT_ERRNO","errnoRet":1}]}`
		if err := os.WriteFile(dir+"/deny-mkdir.json", []byte(deny), 0o644); err != nil {
			t.Fatal(err)
		}
		profile := func(typ corev1.SeccompProfileType, local string) *corev1.SecurityContext {
			sp := &corev1.SeccompProfile{Type: typ}
			if local != "" {
				sp.LocalhostProfile = &local
			}
			return &corev1.SecurityContext{SeccompProfile: sp}
		}
		// Seccomp: in /proc/self/status is 0 unconfined, 2 filtered.
		report := sh("grep Seccomp: /proc/self/status | head -1; mkdir /tmp/d 2>/dev/null && echo mkdir-ok || echo mkdir-denied")
		p := e.create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "seccomp"}, Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{
				{Name: "unset", Command: report},
				{Name: "unconfined", Command: report, SecurityContext: profile(corev1.SeccompProfileTypeUnconfined, "")},
				{Name: "default", Command: report, SecurityContext: profile(corev1.SeccompProfileTypeRuntimeDefault, "")},
				{Name: "localhost", Command: report, SecurityContext: profile(corev1.SeccompProfileTypeLocalhost, "deny-mkdir.json")},
			},
		}})
		p = e.waitPod(t, p.Name, 60*time.Second, "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
		for name, want := range map[string]string{
			"unset":      "Seccomp:\t0\nmkdir-ok\n",
			"unconfined": "Seccomp:\t0\nmkdir-ok\n",
			"default":    "Seccomp:\t2\nmkdir-ok\n",
			"localhost":  "Seccomp:\t2\nmkdir-denied\n",
		} {
			if got := e.logText(t, p, name, 0); got != want {
				t.Errorf("container %s: log %q, want %q", name, got, want)
			}
		}
		// A Localhost profile that is not on the node refuses the
		// container with an event, as the kubelet does.
		missing := e.create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "seccomp-missing"}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "main", Command: sh("sleep 3600"), SecurityContext: profile(corev1.SeccompProfileTypeLocalhost, "absent.json")}},
		}})
		e.waitPod(t, missing.Name, 30*time.Second, "refused with CreateContainerConfigError", func(p *corev1.Pod) bool {
			cs := p.Status.ContainerStatuses
			return len(cs) == 1 && cs[0].State.Waiting != nil && cs[0].State.Waiting.Reason == "CreateContainerConfigError" &&
				strings.Contains(cs[0].State.Waiting.Message, `"absent.json"`)
		})
		if !hasEvent(e.events(t, missing.Name), "Failed", "absent.json") {
			t.Errorf("no Failed event names the missing profile")
		}
	})

	t.Run("fork bomb stops at the pod pids limit", func(t *testing.T) {
		// 60 sleepers in a pod capped at 40 processes: the forks past
		// the cap fail, and the box keeps its pids.
		p := e.create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "forks"}, Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			// ash gives up on a failed fork: the forks run in a subshell,
			// and the count uses builtins only, since the pod is full.
			Containers: []corev1.Container{{Name: "main", Command: sh("(i=0; while [ $i -lt 60 ]; do sleep 30 & i=$((i+1)); done) 2>/dev/null; n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo procs=$n")}},
		}})
		p = e.waitPod(t, p.Name, 90*time.Second, "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
		got := e.logText(t, p, "main", 0)
		var n int
		if _, err := fmt.Sscanf(got, "procs=%d", &n); err != nil || n > 40 || n < 10 {
			t.Fatalf("log %q: want between 10 and 40 processes in the pod", got)
		}
	})

	t.Run("AppArmor on a host without it", func(t *testing.T) {
		if _, err := os.Stat("/sys/module/apparmor/parameters/enabled"); err == nil {
			if b, _ := os.ReadFile("/sys/module/apparmor/parameters/enabled"); strings.HasPrefix(string(b), "Y") {
				t.Skip("this host enforces AppArmor: the refusal path is not reachable")
			}
		}
		p := e.create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "apparmor"}, Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}},
			Containers:      []corev1.Container{{Name: "main", Command: sh("sleep 3600")}},
		}})
		p = e.waitPod(t, p.Name, 30*time.Second, "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
		if p.Status.Reason != "AppArmor" || p.Status.Message != "Cannot enforce AppArmor: AppArmor is not enabled on the host" {
			t.Fatalf("status reason %q message %q", p.Status.Reason, p.Status.Message)
		}
	})
}
