package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"bonsai.dev/bonsai/e2e/testenv"
)

// workloadsCIDR is TestWorkloads' cluster CIDR.
const workloadsCIDR = "10.199.0.0/16"

// TestWorkloads runs the usual kubectl workflows on real containerd:
// roll out, roll back, scale, delete with each cascade mode, run a Job,
// keep a StatefulSet's volume, drain past a PodDisruptionBudget, and use
// a service-account token from inside a pod, through the kubernetes
// Service (the service proxy takes 10.43.0.1:443 to the API server).
func TestWorkloads(t *testing.T) {
	e := startPodEnv(t, "--cluster-cidr="+workloadsCIDR)
	kcs := testenv.Kubectls(t)
	kc := kcs[len(kcs)-1]
	k := &kubectlRunner{t: t, bin: kc.Path, kubeconfig: filepath.Join(e.s.dataDir, "kubeconfig.yaml"), cacheDir: t.TempDir()}
	bb, err := testenv.BusyboxPath()
	if err != nil {
		t.Fatal(err)
	}
	layer, config, err := testenv.BusyboxLayer(bb)
	if err != nil {
		t.Fatal(err)
	}
	for _, tag := range []string{"1", "2"} {
		if err := e.registry.Push("e2e/app", tag, layer, config); err != nil {
			t.Fatal(err)
		}
	}
	const app1, app2 = "registry.bonsai.test/e2e/app:1", "registry.bonsai.test/e2e/app:2"

	t.Run("deployment rollout undo and scale", func(t *testing.T) {
		k.t = t
		k.must("apply", "-f", writeFile(t, "web.yaml", deploymentYAML("web", 3, app1), 0o600))
		wantContains(t, "rollout status", k.must("rollout", "status", "deployment/web", "--timeout=90s"), `deployment "web" successfully rolled out`)
		waitImages(t, k, "app=web", 3, app1)

		wantContains(t, "set image", k.must("set", "image", "deployment/web", "main="+app2), "deployment.apps/web image updated")
		wantContains(t, "rollout status", k.must("rollout", "status", "deployment/web", "--timeout=90s"), `deployment "web" successfully rolled out`)
		waitImages(t, k, "app=web", 3, app2)
		hist := k.must("rollout", "history", "deployment/web")
		if rows := fieldsOf(hist); len(rows) < 3 || rows[len(rows)-2][0] != "1" || rows[len(rows)-1][0] != "2" {
			t.Errorf("rollout history:\n%s", hist)
		}

		wantContains(t, "rollout undo", k.must("rollout", "undo", "deployment/web"), "deployment.apps/web rolled back")
		k.must("rollout", "status", "deployment/web", "--timeout=90s")
		waitImages(t, k, "app=web", 3, app1)
		if got := k.must("get", "deployment/web", "-o", `jsonpath={.metadata.annotations.deployment\.kubernetes\.io/revision}`); got != "3" {
			t.Errorf("revision after undo = %q, want 3", got)
		}
		// Two ReplicaSets: the undo reused the first one.
		if got := strings.Fields(k.must("get", "replicasets", "-l", "app=web", "-o", "name")); len(got) != 2 {
			t.Errorf("replicasets after undo: %v", got)
		}

		wantContains(t, "scale to 0", k.must("scale", "deployment/web", "--replicas=0"), "deployment.apps/web scaled")
		waitImages(t, k, "app=web", 0, app1)
		k.must("scale", "deployment/web", "--replicas=5")
		k.must("rollout", "status", "deployment/web", "--timeout=90s")
		if got := k.must("get", "deployment/web", "-o", "jsonpath={.status.readyReplicas}/{.status.availableReplicas}"); got != "5/5" {
			t.Errorf("ready/available after scale to 5: %s", got)
		}
		waitImages(t, k, "app=web", 5, app1)
		k.must("delete", "deployment/web")
		waitGone(t, k, "app=web")
	})

	t.Run("delete with each cascade mode", func(t *testing.T) {
		k.t = t
		for _, name := range []string{"c-orphan", "c-fg", "c-bg"} {
			k.must("apply", "-f", writeFile(t, name+".yaml", deploymentYAML(name, 1, app1), 0o600))
		}
		for _, name := range []string{"c-orphan", "c-fg", "c-bg"} {
			k.must("rollout", "status", "deployment/"+name, "--timeout=90s")
		}

		// Orphan: the ReplicaSet and its pod stay, no longer owned.
		k.must("delete", "deployment/c-orphan", "--cascade=orphan")
		rs := strings.TrimSpace(k.must("get", "replicasets", "-l", "app=c-orphan", "-o", "name"))
		if rs == "" {
			t.Fatal("orphan delete removed the ReplicaSet")
		}
		if got := k.must("get", rs, "-o", "jsonpath={.metadata.ownerReferences}"); got != "" {
			t.Errorf("orphaned ReplicaSet still owned: %s", got)
		}
		waitImages(t, k, "app=c-orphan", 1, app1)
		k.must("delete", rs)
		waitGone(t, k, "app=c-orphan")

		// Foreground: kubectl waits for the Deployment, which goes only
		// after its ReplicaSet and pods are gone.
		k.must("delete", "deployment/c-fg", "--cascade=foreground", "--timeout=60s")
		if got := strings.TrimSpace(k.must("get", "replicasets,pods", "-l", "app=c-fg", "-o", "name")); got != "" {
			t.Errorf("left after a foreground delete returned: %s", got)
		}

		// Background: the Deployment goes at once, the rest after.
		k.must("delete", "deployment/c-bg", "--cascade=background")
		waitGone(t, k, "app=c-bg")
	})

	t.Run("job to completion and its logs", func(t *testing.T) {
		k.t = t
		wantContains(t, "create job", k.must("create", "job", "hello", "--image="+app1, "--", "sh", "-c", "echo hello from a job"), "job.batch/hello created")
		k.must("wait", "--for=condition=complete", "job/hello", "--timeout=90s")
		if got := k.must("logs", "job/hello"); got != "hello from a job\n" {
			t.Errorf("logs job/hello = %q", got)
		}
		if got := k.must("get", "job/hello", "-o", "jsonpath={.status.succeeded}"); got != "1" {
			t.Errorf("succeeded = %q", got)
		}
	})

	t.Run("statefulset volume survives its pod", func(t *testing.T) {
		k.t = t
		k.must("apply", "-f", writeFile(t, "db.yaml", statefulSetYAML, 0o600))
		k.must("rollout", "status", "statefulset/db", "--timeout=90s")
		if got := k.must("get", "pvc/data-db-0", "-o", "jsonpath={.status.phase} {.spec.storageClassName}"); got != "Bound local-path" {
			t.Errorf("pvc data-db-0: %q", got)
		}
		first := k.must("exec", "db-0", "--", "cat", "/data/first")
		uid := k.must("get", "pod/db-0", "-o", "jsonpath={.metadata.uid}")
		k.must("delete", "pod/db-0")
		waitFor(t, 90*time.Second, "db-0 back and Ready", func() bool {
			r := k.run("get", "pod/db-0", "-o", `jsonpath={.metadata.uid} {.status.conditions[?(@.type=="Ready")].status}`)
			return r.code == 0 && !strings.HasPrefix(r.stdout, uid) && strings.HasSuffix(r.stdout, " True")
		})
		if again := k.must("exec", "db-0", "--", "cat", "/data/first"); again != first {
			t.Errorf("/data/first after the pod was replaced: %q, was %q", again, first)
		}
		pv := k.must("get", "pvc/data-db-0", "-o", "jsonpath={.spec.volumeName}")
		dirs, _ := filepath.Glob(filepath.Join(e.s.dataDir, "storage", pv+"*"))
		if len(dirs) != 1 {
			t.Fatalf("volume %s on the host: %v", pv, dirs)
		}
		if b, err := os.ReadFile(filepath.Join(dirs[0], "first")); err != nil || string(b) != first {
			t.Errorf("%s/first on the host: %q, %v", dirs[0], b, err)
		}
		// bonsai restarting changes nothing: the pod keeps running on the
		// same volume.
		e.restart(t)
		// exec works again once the restarted kubelet has posted its new
		// port in the Node's status.
		var again kubectlResult
		waitFor(t, 60*time.Second, "exec into db-0 after the restart", func() bool {
			again = k.run("exec", "db-0", "--", "cat", "/data/first")
			return again.code == 0
		})
		if again.stdout != first {
			t.Errorf("/data/first after bonsai restarted: %q, was %q", again.stdout, first)
		}
	})

	t.Run("drain respects a PodDisruptionBudget", func(t *testing.T) {
		k.t = t
		k.must("apply", "-f", writeFile(t, "guarded.yaml", deploymentYAML("guarded", 2, app1)+pdbYAML, 0o600))
		k.must("rollout", "status", "deployment/guarded", "--timeout=90s")
		waitFor(t, 30*time.Second, "the budget to count 2 healthy pods", func() bool {
			return k.run("get", "pdb/guarded", "-o", "jsonpath={.status.currentHealthy}/{.status.disruptionsAllowed}").stdout == "2/0"
		})
		r := k.run("drain", e.node, "--pod-selector=app=guarded", "--ignore-daemonsets", "--timeout=8s")
		if r.code == 0 || !strings.Contains(r.stderr, "Cannot evict pod as it would violate the pod's disruption budget") {
			t.Fatalf("drain with a blocking budget: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
		}
		if got := k.must("get", "node", e.node, "-o", "jsonpath={.spec.unschedulable}"); got != "true" {
			t.Errorf("node not cordoned by drain: %q", got)
		}
		k.must("delete", "pdb/guarded")
		out := k.must("drain", e.node, "--pod-selector=app=guarded", "--ignore-daemonsets", "--timeout=60s")
		wantContains(t, "drain", out, "node/"+e.node+" drained")
		// The replacements wait: the node is cordoned.
		waitFor(t, 30*time.Second, "replacement pods Pending", func() bool {
			return strings.TrimSpace(k.run("get", "pods", "-l", "app=guarded", "--field-selector=status.phase=Pending", "-o", "name").stdout) != ""
		})
		k.must("uncordon", e.node)
		k.must("rollout", "status", "deployment/guarded", "--timeout=90s")
		k.must("delete", "deployment/guarded")
	})

	t.Run("services by name through cluster DNS and the proxy", func(t *testing.T) {
		k.t = t
		k.must("apply", "-f", writeFile(t, "echo.yaml", echoYAML, 0o600))
		k.must("rollout", "status", "deployment/echo", "--timeout=90s")
		// Only fully qualified names in the cluster domain: nothing is
		// forwarded off the host. Debian's static busybox cannot resolve
		// names itself (its glibc needs NSS libraries the image lacks),
		// so wget gets the address nslookup found.
		backends := strings.Fields(k.must("get", "pods", "-l", "app=echo", "-o", "jsonpath={.items[*].metadata.name}"))
		if len(backends) != 2 {
			t.Fatalf("echo pods: %v", backends)
		}
		// The client asks until both backends have answered: a new
		// endpoint reaches the proxy's rules within a sync or two.
		k.must("run", "dnsclient", "--image="+app1, "--restart=Never", "--command", "--", "sh", "-c",
			"cat /etc/resolv.conf && nslookup kubernetes.default.svc.cluster.local. && nslookup echo.default.svc.cluster.local. > /tmp/echo && cat /tmp/echo && "+
				"ip=$(sed -n 's/^Address: //p' /tmp/echo) && i=0; while [ $i -lt 300 ]; do wget -q -O - http://$ip:80/index.html >> /tmp/seen; "+
				fmt.Sprintf("grep -q %s /tmp/seen && grep -q %s /tmp/seen && break; i=$((i+1)); sleep 0.1; done; cat /tmp/seen", backends[0], backends[1]))
		waitFor(t, 90*time.Second, "dnsclient to finish", func() bool {
			ph := k.run("get", "pod/dnsclient", "-o", "jsonpath={.status.phase}").stdout
			return ph == "Succeeded" || ph == "Failed"
		})
		out := k.must("logs", "dnsclient")
		if ph := k.must("get", "pod/dnsclient", "-o", "jsonpath={.status.phase}"); ph != "Succeeded" {
			t.Fatalf("dnsclient %s:\n%s", ph, out)
		}
		svcIP := k.must("get", "service/echo", "-o", "jsonpath={.spec.clusterIP}")
		wantContains(t, "dnsclient output", out, "Address: 10.43.0.1\n", "Address: "+svcIP+"\n",
			// dnsPolicy ClusterFirst, the default.
			"nameserver 10.43.0.10\n", "search default.svc.cluster.local svc.cluster.local cluster.local", "options ndots:5\n")
		// Both backends answered through the cluster IP.
		for _, pod := range backends {
			wantContains(t, "answers through service/echo", out, pod+"\n")
		}
	})

	t.Run("pod uses its service-account token", func(t *testing.T) {
		k.t = t
		bin := buildInCluster(t)
		ilayer, iconfig, err := testenv.BusyboxLayer(bb, map[string][]byte{"bin/incluster": bin})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.registry.Push("e2e/incluster", "1", ilayer, iconfig); err != nil {
			t.Fatal(err)
		}
		k.must("create", "namespace", "team")
		waitFor(t, 30*time.Second, "the default service account of team", func() bool {
			return k.run("get", "serviceaccount/default", "-n", "team").code == 0
		})
		// As on Kubernetes, a service account may list pods once bound
		// to a role that allows it.
		k.must("create", "rolebinding", "lister-views", "-n", "team", "--clusterrole=view", "--serviceaccount=team:default")
		k.must("run", "-n", "team", "bystander", "--image="+app1, "--command", "--", "sleep", "3600")
		k.must("run", "-n", "team", "lister", "--image=registry.bonsai.test/e2e/incluster:1", "--restart=Never",
			"--command", "--", "/bin/incluster")
		waitFor(t, 60*time.Second, "lister to finish", func() bool {
			ph := k.run("get", "pod/lister", "-n", "team", "-o", "jsonpath={.status.phase}").stdout
			return ph == "Succeeded" || ph == "Failed"
		})
		logs := k.must("logs", "-n", "team", "lister")
		if ph := k.must("get", "pod/lister", "-n", "team", "-o", "jsonpath={.status.phase}"); ph != "Succeeded" {
			t.Fatalf("lister %s:\n%s", ph, logs)
		}
		wantContains(t, "lister output", logs, "pod bystander\n", "pod lister\n")
		mounts := k.must("get", "pod/lister", "-n", "team", "-o", "jsonpath={.spec.containers[0].volumeMounts[0].mountPath}")
		if mounts != "/var/run/secrets/kubernetes.io/serviceaccount" {
			t.Errorf("token mount: %q", mounts)
		}
	})
}

func deploymentYAML(name string, replicas int, image string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[1]s
spec:
  replicas: %[2]d
  selector:
    matchLabels: {app: %[1]s}
  template:
    metadata:
      labels: {app: %[1]s}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: %[3]s
        command: [sleep, "3600"]
`, name, replicas, image)
}

const echoYAML = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: echo
spec:
  replicas: 2
  selector:
    matchLabels: {app: echo}
  template:
    metadata:
      labels: {app: echo}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: registry.bonsai.test/e2e/app:1
        command: [sh, -c, "mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www"]
        readinessProbe:
          tcpSocket: {port: 8080}
          periodSeconds: 1
---
apiVersion: v1
kind: Service
metadata:
  name: echo
spec:
  selector: {app: echo}
  ports:
  - {name: http, port: 80, targetPort: 8080}
`

const pdbYAML = `---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: guarded
spec:
  minAvailable: 2
  selector:
    matchLabels: {app: guarded}
`

const statefulSetYAML = `apiVersion: v1
kind: Service
metadata:
  name: db
spec:
  clusterIP: None
  selector: {app: db}
  ports:
  - {name: db, port: 5432}
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
spec:
  serviceName: db
  replicas: 1
  selector:
    matchLabels: {app: db}
  template:
    metadata:
      labels: {app: db}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: registry.bonsai.test/e2e/app:1
        command: [sh, -c, "[ -f /data/first ] || date +%s%N > /data/first; exec sleep 3600"]
        volumeMounts:
        - {name: data, mountPath: /data}
  volumeClaimTemplates:
  - metadata:
      name: data
    spec:
      accessModes: [ReadWriteOnce]
      resources:
        requests: {storage: 64Mi}
`

// waitImages waits until exactly n pods match selector, none of them
// terminating, all running image.
func waitImages(t *testing.T, k *kubectlRunner, selector string, n int, image string) {
	t.Helper()
	var last string
	waitFor(t, 90*time.Second, fmt.Sprintf("%d pods %s of %s", n, selector, image), func() bool {
		last = k.run("get", "pods", "-l", selector, "-o", `jsonpath={range .items[*]}{.metadata.deletionTimestamp}|{.spec.containers[0].image}{"\n"}{end}`).stdout
		lines := strings.Fields(last)
		if len(lines) != n {
			return false
		}
		for _, l := range lines {
			if l != "|"+image {
				return false
			}
		}
		return true
	})
}

// waitGone waits until no ReplicaSet or pod matches selector.
func waitGone(t *testing.T, k *kubectlRunner, selector string) {
	t.Helper()
	waitFor(t, 60*time.Second, "replicasets and pods "+selector+" gone", func() bool {
		r := k.run("get", "replicasets,pods", "-l", selector, "-o", "name")
		return r.code == 0 && strings.TrimSpace(r.stdout) == ""
	})
}

func waitFor(t *testing.T, timeout time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %s", what, timeout)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// buildInCluster builds testdata/incluster, statically, for an image.
func buildInCluster(t *testing.T) []byte {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out := filepath.Join(t.TempDir(), "incluster")
	cmd := exec.Command(goBin, "build", "-trimpath", "-ldflags=-s -w", "-o", out, "./testdata/incluster")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build testdata/incluster: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
