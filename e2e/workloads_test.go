package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"bonsai.dev/bonsai/testsupport/testenv"
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
		backends := rollOut(t, k, "echo", echoYAML, 2)
		// Only fully qualified names in the cluster domain: nothing is
		// forwarded off the host. Debian's static busybox cannot resolve
		// names itself (its glibc needs NSS libraries the image lacks),
		// so wget gets the address nslookup found.
		// The client asks until both backends have answered: a new
		// endpoint reaches the proxy's rules within a sync or two.
		out := runPod(t, k, "default", 90*time.Second, "dnsclient", "--image="+app1, "--command", "--", "sh", "-c",
			"cat /etc/resolv.conf && nslookup kubernetes.default.svc.cluster.local. && nslookup echo.default.svc.cluster.local. > /tmp/echo && cat /tmp/echo && "+
				"ip=$(sed -n 's/^Address: //p' /tmp/echo) && i=0; while [ $i -lt 300 ]; do wget -q -O - http://$ip:80/index.html >> /tmp/seen; "+
				fmt.Sprintf("grep -q %s /tmp/seen && grep -q %s /tmp/seen && break; i=$((i+1)); sleep 0.1; done; cat /tmp/seen", backends[0], backends[1]))
		svcIP := k.must("get", "service/echo", "-o", "jsonpath={.spec.clusterIP}")
		wantContains(t, "dnsclient output", out, "Address: 10.43.0.1\n", "Address: "+svcIP+"\n",
			// dnsPolicy ClusterFirst, the default.
			"nameserver 10.43.0.10\n", "search default.svc.cluster.local svc.cluster.local cluster.local", "options ndots:5\n")
		// Both backends answered through the cluster IP.
		for _, pod := range backends {
			wantContains(t, "answers through service/echo", out, pod+"\n")
		}
	})

	t.Run("service reachability and environment", func(t *testing.T) {
		k.t = t
		pods := rollOut(t, k, "web", webYAML, 2)
		clusterIP := k.must("get", "service/web", "-o", "jsonpath={.spec.clusterIP}")
		nodePort := k.must("get", "service/web", "-o", "jsonpath={.spec.ports[0].nodePort}")
		nodeIP := k.must("get", "node", e.node, "-o", `jsonpath={.status.addresses[?(@.type=="InternalIP")].address}`)
		podCIDR := netip.MustParsePrefix(k.must("get", "node", e.node, "-o", "jsonpath={.spec.podCIDR}"))
		gateway := podCIDR.Masked().Addr().Next() // the node's address on the pod bridge
		both := map[string]bool{pods[0]: true, pods[1]: true}

		// From the host: the cluster IP, and the node port on 127.0.0.1,
		// on the node's address and on its pod-bridge address.
		for _, addr := range []string{clusterIP + ":80", "127.0.0.1:" + nodePort, nodeIP + ":" + nodePort, gateway.String() + ":" + nodePort} {
			waitAnswers(t, addr, both)
		}

		// ClientIP affinity: one client, one backend, every time.
		k.must("patch", "service/web", "-p", `{"spec":{"sessionAffinity":"ClientIP"}}`)
		if got := k.must("get", "service/web", "-o", "jsonpath={.spec.sessionAffinityConfig.clientIP.timeoutSeconds}"); got != "10800" {
			t.Errorf("affinity timeout defaulted to %q, want 10800", got)
		}
		waitFor(t, 30*time.Second, "ClientIP affinity to stick", func() bool {
			seen := answers(t, clusterIP+":80", 20)
			return len(seen) == 1 && seen[""] == 0
		})
		k.must("patch", "service/web", "-p", `{"spec":{"sessionAffinity":"None","sessionAffinityConfig":null}}`)
		waitAnswers(t, clusterIP+":80", both)

		// Headless DNS lists every ready pod.
		ips := map[string]string{}
		for _, p := range pods {
			ips[p] = k.must("get", "pod", p, "-o", "jsonpath={.status.podIP}")
		}
		lookup := func(name string) string {
			t.Helper()
			return runPod(t, k, "default", 60*time.Second, "lookup", "--image="+app1, "--command", "--", "nslookup", name)
		}
		// The headless Service's own slice is written apart from web's:
		// its records follow once it lists both pods ready.
		waitFor(t, 30*time.Second, "both pods ready in web-headless's EndpointSlice", func() bool {
			got := k.run("get", "endpointslices", "-l", "kubernetes.io/service-name=web-headless", "-o",
				`jsonpath={range .items[*].endpoints[*]}{.targetRef.name}={.conditions.ready}{"\n"}{end}`).stdout
			return strings.Contains(got, pods[0]+"=true") && strings.Contains(got, pods[1]+"=true")
		})
		out := lookup("web-headless.default.svc.cluster.local.")
		wantContains(t, "headless lookup", out, "Address: "+ips[pods[0]]+"\n", "Address: "+ips[pods[1]]+"\n")

		// A pod failing its readiness probe leaves the slice, the proxy
		// and the headless records; it keeps running.
		k.must("exec", pods[0], "--", "rm", "/tmp/ready")
		waitFor(t, 30*time.Second, pods[0]+" not ready in the EndpointSlice", func() bool {
			got := k.run("get", "endpointslices", "-l", "kubernetes.io/service-name=web", "-o",
				`jsonpath={range .items[*].endpoints[*]}{.targetRef.name}={.conditions.ready}{"\n"}{end}`).stdout
			return strings.Contains(got, pods[0]+"=false") && strings.Contains(got, pods[1]+"=true")
		})
		waitFor(t, 30*time.Second, "only "+pods[1]+" to answer", func() bool {
			seen := answers(t, clusterIP+":80", 20)
			return len(seen) == 1 && seen[pods[1]] == 20
		})
		out = lookup("web-headless.default.svc.cluster.local.")
		wantContains(t, "headless lookup, one pod not ready", out, "Address: "+ips[pods[1]]+"\n")
		if strings.Contains(out, ips[pods[0]]) {
			t.Errorf("headless lookup lists the pod that is not ready (%s):\n%s", ips[pods[0]], out)
		}
		k.must("exec", pods[0], "--", "touch", "/tmp/ready")
		waitAnswers(t, clusterIP+":80", both)

		// Scaling the Deployment changes who answers.
		k.must("scale", "deployment/web", "--replicas=3")
		k.must("rollout", "status", "deployment/web", "--timeout=90s")
		three := map[string]bool{}
		for _, p := range strings.Fields(k.must("get", "pods", "-l", "app=web", "--field-selector=status.phase=Running", "-o", "jsonpath={.items[*].metadata.name}")) {
			three[p] = true
		}
		if len(three) != 3 {
			t.Fatalf("web pods after scaling to 3: %v", three)
		}
		waitAnswers(t, clusterIP+":80", three)

		// The Service environment of a pod started after the Service.
		k.must("create", "service", "clusterip", "redis-master", "--tcp=6379")
		redisIP := k.must("get", "service/redis-master", "-o", "jsonpath={.spec.clusterIP}")
		env := runPod(t, k, "default", 60*time.Second, "envdump", "--image="+app1, "--command", "--", "env")
		wantContains(t, "envdump", env,
			"REDIS_MASTER_SERVICE_HOST="+redisIP+"\n",
			"REDIS_MASTER_SERVICE_PORT=6379\n",
			"REDIS_MASTER_PORT=tcp://"+redisIP+":6379\n",
			"REDIS_MASTER_PORT_6379_TCP=tcp://"+redisIP+":6379\n",
			"REDIS_MASTER_PORT_6379_TCP_PROTO=tcp\n",
			"REDIS_MASTER_PORT_6379_TCP_PORT=6379\n",
			"REDIS_MASTER_PORT_6379_TCP_ADDR="+redisIP+"\n")
		k.must("delete", "deployment/web", "service/web", "service/web-headless", "service/redis-master", "pod/envdump", "pod/lookup")
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
		logs := runPod(t, k, "team", 60*time.Second, "lister", "--image=registry.bonsai.test/e2e/incluster:1", "--command", "--", "/bin/incluster")
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

// webYAML is echo with a readiness probe a test can fail (rm /tmp/ready),
// a NodePort Service and a headless one.
const webYAML = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: registry.bonsai.test/e2e/app:1
        command: [sh, -c, "touch /tmp/ready && mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www"]
        readinessProbe:
          exec: {command: [test, -f, /tmp/ready]}
          periodSeconds: 1
          failureThreshold: 1
---
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  type: NodePort
  selector: {app: web}
  ports:
  - {name: http, port: 80, targetPort: 8080}
---
apiVersion: v1
kind: Service
metadata:
  name: web-headless
spec:
  clusterIP: None
  selector: {app: web}
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
// runPod runs a pod to completion (kubectl run args: name first, then
// flags and command, --restart=Never added) in namespace ns, fails the test
// unless it Succeeded, and returns its logs.
func runPod(t *testing.T, k *kubectlRunner, ns string, timeout time.Duration, args ...string) string {
	t.Helper()
	name := args[0]
	k.run("delete", "pod", name, "-n", ns, "--now", "--ignore-not-found")
	k.must(append([]string{"run", "-n", ns, "--restart=Never"}, args...)...)
	var phase string
	waitFor(t, timeout, name+" to finish", func() bool {
		phase = k.run("get", "pod", name, "-n", ns, "-o", "jsonpath={.status.phase}").stdout
		return phase == "Succeeded" || phase == "Failed"
	})
	logs := k.must("logs", "-n", ns, name)
	if phase != "Succeeded" {
		t.Fatalf("pod %s %s:\n%s", name, phase, logs)
	}
	return logs
}

// rollOut applies a manifest, waits for its Deployment and returns the
// names of its n pods (selected by app=<deployment>).
func rollOut(t *testing.T, k *kubectlRunner, deployment, manifest string, n int) []string {
	t.Helper()
	k.must("apply", "-f", writeFile(t, deployment+".yaml", manifest, 0o600))
	k.must("rollout", "status", "deployment/"+deployment, "--timeout=90s")
	pods := strings.Fields(k.must("get", "pods", "-l", "app="+deployment, "-o", "jsonpath={.items[*].metadata.name}"))
	if len(pods) != n {
		t.Fatalf("%s pods: %v, want %d", deployment, pods, n)
	}
	return pods
}

// answers GETs http://addr/index.html n times from the host and counts the
// answers by body (the answering pod's name); "" counts failures.
func answers(t *testing.T, addr string, n int) map[string]int {
	t.Helper()
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	seen := map[string]int{}
	for range n {
		resp, err := hc.Get("http://" + addr + "/index.html")
		if err != nil {
			seen[""]++
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		seen[strings.TrimSpace(string(body))]++
	}
	return seen
}

// waitAnswers waits until GETs to addr are answered by every pod of want
// and no other.
func waitAnswers(t *testing.T, addr string, want map[string]bool) {
	t.Helper()
	var last map[string]int
	waitFor(t, 60*time.Second, fmt.Sprintf("%s answered by %v", addr, want), func() bool {
		last = answers(t, addr, 10*len(want))
		if len(last) != len(want) {
			return false
		}
		for name := range last {
			if !want[name] {
				return false
			}
		}
		return true
	})
}

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
