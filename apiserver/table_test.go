package apiserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"bonsai.dev/bonsai/apiserver/registry"
)

// recent stands for an Age (or other "time since") cell of an object made
// moments ago: "0s", "1s", ...
const recent = "<recent>"

var recentRE = regexp.MustCompile(`^[0-9]{1,2}s$`)

// getTable asks for path as kubectl get does and checks the answer is a
// well-formed Table whose cells agree with their columns' types.
func getTable(t *testing.T, e *testEnv, path string) *metav1.Table {
	t.Helper()
	req := httptest.NewRequest("GET", path, nil)
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json")
	rr := httptest.NewRecorder()
	e.s.Handler().ServeHTTP(rr, req)
	if rr.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, rr.Code, rr.Body.String())
	}
	var tbl metav1.Table
	if err := json.Unmarshal(rr.Body.Bytes(), &tbl); err != nil || tbl.Kind != "Table" || tbl.APIVersion != "meta.k8s.io/v1" {
		t.Fatalf("GET %s: not a Table (%v): %.300s", path, err, rr.Body.String())
	}
	for i, row := range tbl.Rows {
		if len(row.Cells) != len(tbl.ColumnDefinitions) {
			t.Fatalf("GET %s: row %d has %d cells for %d columns", path, i, len(row.Cells), len(tbl.ColumnDefinitions))
		}
		for j, c := range tbl.ColumnDefinitions {
			if upstreamIntegerInString[groupResourceOf(path)+"/"+c.Name] && cellMatches(registry.TInteger, row.Cells[j]) == nil {
				continue
			}
			if err := cellMatches(c.Type, row.Cells[j]); err != nil {
				t.Errorf("GET %s: column %q: %v", path, c.Name, err)
			}
		}
	}
	return &tbl
}

// groupResourceOf is the group resource of an API path
// (/apis/g/v/[namespaces/ns/]resource[/name], /api/v/...), as "resource.g".
func groupResourceOf(path string) string {
	parts := strings.Split(strings.Trim(strings.SplitN(path, "?", 2)[0], "/"), "/")
	group := ""
	if len(parts) > 0 && parts[0] == "apis" && len(parts) > 1 {
		group, parts = parts[1], parts[3:]
	} else if len(parts) > 2 {
		parts = parts[2:]
	}
	if len(parts) > 2 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	if len(parts) == 0 {
		return ""
	}
	if group == "" {
		return parts[0]
	}
	return parts[0] + "." + group
}

// cellMatches checks a decoded JSON cell against its column type.
func cellMatches(typ string, cell any) error {
	ok := false
	switch typ {
	case registry.TString:
		_, ok = cell.(string)
	case registry.TInteger:
		// JSON numbers decode to float64 or int64 depending on the decoder.
		switch v := cell.(type) {
		case float64:
			ok = v == float64(int64(v))
		case int64:
			ok = true
		}
	case registry.TBoolean:
		_, ok = cell.(bool)
	case registry.TDate:
		s, isString := cell.(string)
		_, err := time.Parse(time.RFC3339, s)
		ok = isString && err == nil
	}
	if !ok {
		return fmt.Errorf("cell %#v (%T) is not a %s", cell, cell, typ)
	}
	return nil
}

// headers are the column names as kubectl prints them, wide-only ones in
// brackets.
func headers(tbl *metav1.Table) []string {
	var out []string
	for _, c := range tbl.ColumnDefinitions {
		h := strings.ToUpper(c.Name)
		if c.Priority > 0 {
			h = "[" + h + "]"
		}
		out = append(out, h)
	}
	return out
}

// normalRow is a row's cells with JSON's number type and fresh ages
// replaced by recent.
func normalRow(cells []any) []any {
	out := make([]any, len(cells))
	for i, c := range cells {
		switch v := c.(type) {
		case int64:
			out[i] = float64(v)
		case int:
			out[i] = float64(v)
		case string:
			if recentRE.MatchString(v) {
				out[i] = recent
			} else {
				out[i] = v
			}
		default:
			out[i] = v
		}
	}
	return out
}

// checkTable compares the headers and the one row of a table with what
// kubectl get shows for the object on Kubernetes.
func checkTable(t *testing.T, tbl *metav1.Table, wantHeaders []string, wantRow []any) {
	t.Helper()
	if diff := cmp.Diff(wantHeaders, headers(tbl)); diff != "" {
		t.Errorf("headers (-want +got):\n%s", diff)
	}
	if len(tbl.Rows) != 1 {
		t.Fatalf("%d rows, want 1", len(tbl.Rows))
	}
	if diff := cmp.Diff(normalRow(wantRow), normalRow(tbl.Rows[0].Cells)); diff != "" {
		t.Errorf("row (-want +got):\n%s", diff)
	}
	if tbl.Rows[0].Object.Raw == nil {
		t.Errorf("row carries no object metadata")
	}
}

// must unwraps a client call's result; a failed setup call ends the test
// binary with the error, which is plain enough in a test.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func ago(d time.Duration) metav1.Time {
	return metav1.NewTime(time.Now().Add(-d).Truncate(time.Second))
}

func qty(s string) apiresource.Quantity { return apiresource.MustParse(s) }

func podSpec(containers ...string) corev1.PodSpec {
	var s corev1.PodSpec
	for _, c := range containers {
		name, image, _ := strings.Cut(c, "=")
		s.Containers = append(s.Containers, corev1.Container{Name: name, Image: image})
	}
	return s
}

func template(lbls map[string]string, containers ...string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbls}, Spec: podSpec(containers...)}
}

var webLabels = map[string]string{"app": "web"}

// TestTablesCore covers core/v1 kinds.
func TestTablesCore(t *testing.T) {
	e := newTestEnv(t)
	core := e.cs.CoreV1()
	ctx := e.ctx

	t.Run("pods", func(t *testing.T) {
		p := must(core.Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.PodSpec{
			NodeName:   "node-1",
			Containers: []corev1.Container{{Name: "app", Image: "nginx:1.27"}, {Name: "log", Image: "busybox"}},
		}}, metav1.CreateOptions{}))
		tbl := getTable(t, e, "/api/v1/namespaces/default/pods/web")
		hdr := []string{"NAME", "READY", "STATUS", "RESTARTS", "AGE", "[IP]", "[NODE]", "[NOMINATED NODE]", "[READINESS GATES]"}
		checkTable(t, tbl, hdr, []any{"web", "0/2", "Pending", "0", recent, "<none>", "node-1", "<none>", "<none>"})

		p.Status = corev1.PodStatus{
			Phase:  corev1.PodRunning,
			PodIP:  "10.42.0.5",
			PodIPs: []corev1.PodIP{{IP: "10.42.0.5"}},
			ContainerStatuses: []corev1.ContainerStatus{
				{Name: "app", Ready: true, RestartCount: 3, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
					LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, FinishedAt: ago(74 * time.Hour)}}},
				{Name: "log", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}},
			},
		}
		must(core.Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}))
		tbl = getTable(t, e, "/api/v1/namespaces/default/pods/web")
		checkTable(t, tbl, hdr, []any{"web", "1/2", "CrashLoopBackOff", "3 (3d2h ago)", recent, "10.42.0.5", "node-1", "<none>", "<none>"})

		// A finished pod's row says so, for clients that hide them.
		p = must(core.Pods("default").Get(ctx, "web", metav1.GetOptions{}))
		p.Status.Phase = corev1.PodSucceeded
		must(core.Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}))
		tbl = getTable(t, e, "/api/v1/namespaces/default/pods/web")
		if c := tbl.Rows[0].Conditions; len(c) != 1 || c[0].Type != metav1.RowCompleted || c[0].Reason != "Succeeded" {
			t.Errorf("succeeded pod's row conditions: %+v", c)
		}
	})

	t.Run("namespaces", func(t *testing.T) {
		checkTable(t, getTable(t, e, "/api/v1/namespaces/default"), []string{"NAME", "STATUS", "AGE"}, []any{"default", "Active", recent})
	})

	t.Run("nodes", func(t *testing.T) {
		must(core.Nodes().Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{"node-role.kubernetes.io/control-plane": "", "kubernetes.io/role": "edge"}},
			Spec:       corev1.NodeSpec{Unschedulable: true},
			Status: corev1.NodeStatus{
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse}, {Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
				Addresses:  []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: "node-1"}, {Type: corev1.NodeInternalIP, Address: "192.168.1.10"}, {Type: corev1.NodeInternalIP, Address: "fd00::10"}},
				NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: "v1.33.1", OSImage: "Ubuntu 24.04.2 LTS", KernelVersion: "6.8.0-60-generic", ContainerRuntimeVersion: "containerd://2.0.5"},
			},
		}, metav1.CreateOptions{}))
		checkTable(t, getTable(t, e, "/api/v1/nodes/node-1"),
			[]string{"NAME", "STATUS", "ROLES", "AGE", "VERSION", "[INTERNAL-IP]", "[EXTERNAL-IP]", "[OS-IMAGE]", "[KERNEL-VERSION]", "[CONTAINER-RUNTIME]"},
			[]any{"node-1", "Ready,SchedulingDisabled", "control-plane,edge", recent, "v1.33.1", "192.168.1.10", "<none>", "Ubuntu 24.04.2 LTS", "6.8.0-60-generic", "containerd://2.0.5"})
		// A node that has not reported yet.
		must(core.Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-2"}}, metav1.CreateOptions{}))
		checkTable(t, getTable(t, e, "/api/v1/nodes/node-2"),
			[]string{"NAME", "STATUS", "ROLES", "AGE", "VERSION", "[INTERNAL-IP]", "[EXTERNAL-IP]", "[OS-IMAGE]", "[KERNEL-VERSION]", "[CONTAINER-RUNTIME]"},
			[]any{"node-2", "Unknown", "<none>", recent, "", "<none>", "<none>", "<unknown>", "<unknown>", "<unknown>"})
	})

	t.Run("services", func(t *testing.T) {
		hdr := []string{"NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE", "[SELECTOR]"}
		checkTable(t, getTable(t, e, "/api/v1/namespaces/default/services/kubernetes"), hdr,
			[]any{"kubernetes", "ClusterIP", "10.43.0.1", "<none>", "443/TCP", recent, "<none>"})
		s := must(core.Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "lb"}, Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.43.0.50", Selector: map[string]string{"app": "web", "tier": "front"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), NodePort: 30080}, {Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, NodePort: 30053}},
		}}, metav1.CreateOptions{}))
		checkTable(t, getTable(t, e, "/api/v1/namespaces/default/services/lb"), hdr,
			[]any{"lb", "LoadBalancer", "10.43.0.50", "<pending>", "80:30080/TCP,53:30053/UDP", recent, "app=web,tier=front"})
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.7"}, {Hostname: "lb.example.com"}}
		must(core.Services("default").UpdateStatus(ctx, s, metav1.UpdateOptions{}))
		checkTable(t, getTable(t, e, "/api/v1/namespaces/default/services/lb"), hdr,
			[]any{"lb", "LoadBalancer", "10.43.0.50", "203.0.113.7,lb.example.com", "80:30080/TCP,53:30053/UDP", recent, "app=web,tier=front"})
		must(core.Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db"}, Spec: corev1.ServiceSpec{
			ClusterIP: "None", Selector: map[string]string{"app": "db"}, Ports: []corev1.ServicePort{{Port: 5432}},
		}}, metav1.CreateOptions{}))
		checkTable(t, getTable(t, e, "/api/v1/namespaces/default/services/db"), hdr,
			[]any{"db", "ClusterIP", "None", "<none>", "5432/TCP", recent, "app=db"})
		must(core.Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "ext"}, Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeExternalName, ExternalName: "db.example.com",
		}}, metav1.CreateOptions{}))
		checkTable(t, getTable(t, e, "/api/v1/namespaces/default/services/ext"), hdr,
			[]any{"ext", "ExternalName", "<none>", "db.example.com", "<none>", recent, "<none>"})
	})

	t.Run("endpoints", func(t *testing.T) {
		must(core.Endpoints("default").Create(ctx, &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Subsets: []corev1.EndpointSubset{{
			Addresses: []corev1.EndpointAddress{{IP: "10.42.0.5"}, {IP: "10.42.0.6"}},
			Ports:     []corev1.EndpointPort{{Name: "http", Port: 8080}, {Name: "metrics", Port: 9090}},
		}}}, metav1.CreateOptions{}))
		checkTable(t, getTable(t, e, "/api/v1/namespaces/default/endpoints/web"), []string{"NAME", "ENDPOINTS", "AGE"},
			[]any{"web", "10.42.0.5:8080,10.42.0.6:8080,10.42.0.5:9090 + 1 more...", recent})
		checkTable(t, getTable(t, e, "/api/v1/namespaces/default/endpoints/kubernetes"), []string{"NAME", "ENDPOINTS", "AGE"},
			[]any{"kubernetes", "127.0.0.1:6443", recent})
	})

	t.Run("configmaps", func(t *testing.T) {
		must(core.ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "conf"},
			Data: map[string]string{"a": "1", "b": "2"}, BinaryData: map[string][]byte{"c": {0}}}, metav1.CreateOptions{}))
		checkTable(t, getTable(t, e, "/api/v1/namespaces/default/configmaps/conf"), []string{"NAME", "DATA", "AGE"}, []any{"conf", 3, recent})
	})

	t.Run("secrets", func(t *testing.T) {
		must(core.Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "tls"}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.crt": []byte("x"), "tls.key": []byte("y")}}, metav1.CreateOptions{}))
		checkTable(t, getTable(t, e, "/api/v1/namespaces/default/secrets/tls"), []string{"NAME", "TYPE", "DATA", "AGE"},
			[]any{"tls", "kubernetes.io/tls", 2, recent})
	})

	t.Run("serviceaccounts", func(t *testing.T) {
		must(core.ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "builder"},
			Secrets: []corev1.ObjectReference{{Name: "builder-token"}}}, metav1.CreateOptions{}))
		checkTable(t, getTable(t, e, "/api/v1/namespaces/default/serviceaccounts/builder"), []string{"NAME", "SECRETS", "AGE"}, []any{"builder", 1, recent})
	})

	t.Run("events", func(t *testing.T) {
		must(core.Events("default").Create(ctx, &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: "web.17d2a"},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web", FieldPath: "spec.containers{log}"},
			Reason:         "BackOff", Message: "Back-off restarting failed container log in pod web_default\n", Type: corev1.EventTypeWarning,
			Source:         corev1.EventSource{Component: "kubelet", Host: "node-1"},
			FirstTimestamp: ago(2 * time.Hour), LastTimestamp: ago(30 * time.Minute), Count: 7,
		}, metav1.CreateOptions{}))
		checkTable(t, getTable(t, e, "/api/v1/namespaces/default/events/web.17d2a"),
			[]string{"LAST SEEN", "TYPE", "REASON", "OBJECT", "[SUBOBJECT]", "[SOURCE]", "MESSAGE", "[FIRST SEEN]", "[COUNT]", "[NAME]"},
			[]any{"30m", "Warning", "BackOff", "pod/web", "spec.containers{log}", "kubelet, node-1", "Back-off restarting failed container log in pod web_default", "120m", 7, "web.17d2a"})
	})

	t.Run("limitranges", func(t *testing.T) {
		lr := must(core.LimitRanges("default").Create(ctx, &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: "limits"}, Spec: corev1.LimitRangeSpec{
			Limits: []corev1.LimitRangeItem{{Type: corev1.LimitTypeContainer, Default: corev1.ResourceList{corev1.ResourceCPU: qty("500m")}}},
		}}, metav1.CreateOptions{}))
		tbl := getTable(t, e, "/api/v1/namespaces/default/limitranges/limits")
		checkTable(t, tbl, []string{"NAME", "CREATED AT"}, []any{"limits", lr.CreationTimestamp.UTC().Format(time.RFC3339)})
		if tbl.ColumnDefinitions[1].Type != "date" {
			t.Errorf("Created At is a %q column", tbl.ColumnDefinitions[1].Type)
		}
	})

	t.Run("resourcequotas", func(t *testing.T) {
		hard := corev1.ResourceList{corev1.ResourcePods: qty("10"), corev1.ResourceRequestsCPU: qty("1"), corev1.ResourceLimitsMemory: qty("2Gi"), corev1.ResourceLimitsCPU: qty("2")}
		q := must(core.ResourceQuotas("default").Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "quota"},
			Spec: corev1.ResourceQuotaSpec{Hard: hard}}, metav1.CreateOptions{}))
		hdr := []string{"NAME", "REQUEST", "LIMIT", "AGE"}
		checkTable(t, getTable(t, e, "/api/v1/namespaces/default/resourcequotas/quota"), hdr, []any{"quota", "", "", recent})
		q.Status = corev1.ResourceQuotaStatus{Hard: hard, Used: corev1.ResourceList{corev1.ResourcePods: qty("2"), corev1.ResourceRequestsCPU: qty("500m"), corev1.ResourceLimitsMemory: qty("1Gi")}}
		must(core.ResourceQuotas("default").UpdateStatus(ctx, q, metav1.UpdateOptions{}))
		checkTable(t, getTable(t, e, "/api/v1/namespaces/default/resourcequotas/quota"), hdr,
			[]any{"quota", "pods: 2/10, requests.cpu: 500m/1", "limits.cpu: 0/2, limits.memory: 1Gi/2Gi", recent})
	})

	t.Run("podtemplates", func(t *testing.T) {
		must(core.PodTemplates("default").Create(ctx, &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: "tmpl"},
			Template: template(map[string]string{"tier": "front", "app": "web"}, "app=nginx:1.27", "log=busybox")}, metav1.CreateOptions{}))
		checkTable(t, getTable(t, e, "/api/v1/namespaces/default/podtemplates/tmpl"), []string{"NAME", "CONTAINERS", "IMAGES", "POD LABELS"},
			[]any{"tmpl", "app,log", "nginx:1.27,busybox", "app=web,tier=front"})
	})

	t.Run("persistentvolumes", func(t *testing.T) {
		fs := corev1.PersistentVolumeFilesystem
		pv := must(core.PersistentVolumes().Create(ctx, &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-1"}, Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: qty("10Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany, corev1.ReadWriteOnce, corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			ClaimRef:                      &corev1.ObjectReference{Namespace: "default", Name: "data"},
			StorageClassName:              "local",
			VolumeMode:                    &fs,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/srv/pv-1"}},
		}}, metav1.CreateOptions{}))
		pv.Status.Phase = corev1.VolumeBound
		must(core.PersistentVolumes().UpdateStatus(ctx, pv, metav1.UpdateOptions{}))
		checkTable(t, getTable(t, e, "/api/v1/persistentvolumes/pv-1"),
			[]string{"NAME", "CAPACITY", "ACCESS MODES", "RECLAIM POLICY", "STATUS", "CLAIM", "STORAGECLASS", "VOLUMEATTRIBUTESCLASS", "REASON", "AGE", "[VOLUMEMODE]"},
			[]any{"pv-1", "10Gi", "RWO,RWX", "Retain", "Bound", "default/data", "local", "<unset>", "", recent, "Filesystem"})
	})

	t.Run("persistentvolumeclaims", func(t *testing.T) {
		hdr := []string{"NAME", "STATUS", "VOLUME", "CAPACITY", "ACCESS MODES", "STORAGECLASS", "VOLUMEATTRIBUTESCLASS", "AGE", "[VOLUMEMODE]"}
		fs, class := corev1.PersistentVolumeFilesystem, "local"
		c := must(core.PersistentVolumeClaims("default").Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data"}, Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: qty("5Gi")}},
			StorageClassName: &class, VolumeMode: &fs,
		}}, metav1.CreateOptions{}))
		c.Status.Phase = corev1.ClaimPending
		c = must(core.PersistentVolumeClaims("default").UpdateStatus(ctx, c, metav1.UpdateOptions{}))
		checkTable(t, getTable(t, e, "/api/v1/namespaces/default/persistentvolumeclaims/data"), hdr,
			[]any{"data", "Pending", "", "", "", "local", "<unset>", recent, "Filesystem"})
		c.Spec.VolumeName = "pv-1"
		c = must(core.PersistentVolumeClaims("default").Update(ctx, c, metav1.UpdateOptions{}))
		c.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Capacity: corev1.ResourceList{corev1.ResourceStorage: qty("10Gi")}}
		must(core.PersistentVolumeClaims("default").UpdateStatus(ctx, c, metav1.UpdateOptions{}))
		checkTable(t, getTable(t, e, "/api/v1/namespaces/default/persistentvolumeclaims/data"), hdr,
			[]any{"data", "Bound", "pv-1", "10Gi", "RWO", "local", "<unset>", recent, "Filesystem"})
	})

	t.Run("replicationcontrollers", func(t *testing.T) {
		tmpl := template(webLabels, "app=nginx:1.27")
		rc := must(core.ReplicationControllers("default").Create(ctx, &corev1.ReplicationController{ObjectMeta: metav1.ObjectMeta{Name: "web-rc"},
			Spec: corev1.ReplicationControllerSpec{Replicas: ptrTo[int32](3), Selector: webLabels, Template: &tmpl}}, metav1.CreateOptions{}))
		rc.Status = corev1.ReplicationControllerStatus{Replicas: 3, ReadyReplicas: 2}
		must(core.ReplicationControllers("default").UpdateStatus(ctx, rc, metav1.UpdateOptions{}))
		checkTable(t, getTable(t, e, "/api/v1/namespaces/default/replicationcontrollers/web-rc"),
			[]string{"NAME", "DESIRED", "CURRENT", "READY", "AGE", "[CONTAINERS]", "[IMAGES]", "[SELECTOR]"},
			[]any{"web-rc", 3, 3, 2, recent, "app", "nginx:1.27", "app=web"})
	})
}

// TestTablesApps covers apps/v1 and batch/v1.
func TestTablesApps(t *testing.T) {
	e := newTestEnv(t)
	apps, batch := e.cs.AppsV1(), e.cs.BatchV1()
	ctx := e.ctx
	sel := &metav1.LabelSelector{MatchLabels: webLabels}

	t.Run("deployments", func(t *testing.T) {
		d := must(apps.Deployments("default").Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: appsv1.DeploymentSpec{
			Replicas: ptrTo[int32](3), Selector: sel, Template: template(webLabels, "app=nginx:1.27", "log=busybox:1.36"),
		}}, metav1.CreateOptions{}))
		d.Status = appsv1.DeploymentStatus{Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: 2, AvailableReplicas: 2}
		must(apps.Deployments("default").UpdateStatus(ctx, d, metav1.UpdateOptions{}))
		checkTable(t, getTable(t, e, "/apis/apps/v1/namespaces/default/deployments/web"),
			[]string{"NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE", "[CONTAINERS]", "[IMAGES]", "[SELECTOR]"},
			[]any{"web", "2/3", 3, 2, recent, "app,log", "nginx:1.27,busybox:1.36", "app=web"})
	})

	t.Run("replicasets", func(t *testing.T) {
		lbls := map[string]string{"app": "web", "pod-template-hash": "5d8f7c"}
		rs := must(apps.ReplicaSets("default").Create(ctx, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-5d8f7c"}, Spec: appsv1.ReplicaSetSpec{
			Replicas: ptrTo[int32](3), Selector: &metav1.LabelSelector{MatchLabels: lbls}, Template: template(lbls, "app=nginx:1.27"),
		}}, metav1.CreateOptions{}))
		rs.Status = appsv1.ReplicaSetStatus{Replicas: 3, ReadyReplicas: 1}
		must(apps.ReplicaSets("default").UpdateStatus(ctx, rs, metav1.UpdateOptions{}))
		checkTable(t, getTable(t, e, "/apis/apps/v1/namespaces/default/replicasets/web-5d8f7c"),
			[]string{"NAME", "DESIRED", "CURRENT", "READY", "AGE", "[CONTAINERS]", "[IMAGES]", "[SELECTOR]"},
			[]any{"web-5d8f7c", 3, 3, 1, recent, "app", "nginx:1.27", "app=web,pod-template-hash=5d8f7c"})
	})

	t.Run("statefulsets", func(t *testing.T) {
		lbls := map[string]string{"app": "db"}
		s := must(apps.StatefulSets("default").Create(ctx, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db"}, Spec: appsv1.StatefulSetSpec{
			Replicas: ptrTo[int32](3), ServiceName: "db", Selector: &metav1.LabelSelector{MatchLabels: lbls}, Template: template(lbls, "postgres=postgres:16"),
		}}, metav1.CreateOptions{}))
		s.Status = appsv1.StatefulSetStatus{Replicas: 2, ReadyReplicas: 1}
		must(apps.StatefulSets("default").UpdateStatus(ctx, s, metav1.UpdateOptions{}))
		checkTable(t, getTable(t, e, "/apis/apps/v1/namespaces/default/statefulsets/db"),
			[]string{"NAME", "READY", "AGE", "[CONTAINERS]", "[IMAGES]"},
			[]any{"db", "1/3", recent, "postgres", "postgres:16"})
	})

	t.Run("daemonsets", func(t *testing.T) {
		lbls := map[string]string{"app": "agent"}
		tmpl := template(lbls, "agent=example.com/agent:1.0")
		tmpl.Spec.NodeSelector = map[string]string{"kubernetes.io/os": "linux"}
		d := must(apps.DaemonSets("default").Create(ctx, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent"}, Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: lbls}, Template: tmpl,
		}}, metav1.CreateOptions{}))
		d.Status = appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, CurrentNumberScheduled: 2, NumberReady: 1, UpdatedNumberScheduled: 2, NumberAvailable: 1}
		must(apps.DaemonSets("default").UpdateStatus(ctx, d, metav1.UpdateOptions{}))
		checkTable(t, getTable(t, e, "/apis/apps/v1/namespaces/default/daemonsets/agent"),
			[]string{"NAME", "DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE", "NODE SELECTOR", "AGE", "[CONTAINERS]", "[IMAGES]", "[SELECTOR]"},
			[]any{"agent", 2, 2, 1, 2, 1, "kubernetes.io/os=linux", recent, "agent", "example.com/agent:1.0", "app=agent"})
	})

	t.Run("controllerrevisions", func(t *testing.T) {
		must(apps.ControllerRevisions("default").Create(ctx, &appsv1.ControllerRevision{
			ObjectMeta: metav1.ObjectMeta{Name: "db-7c9d8", OwnerReferences: []metav1.OwnerReference{
				{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: "1234", Controller: ptrTo(true)},
			}},
			Data:     runtime.RawExtension{Raw: []byte(`{"spec":{}}`)},
			Revision: 2,
		}, metav1.CreateOptions{}))
		checkTable(t, getTable(t, e, "/apis/apps/v1/namespaces/default/controllerrevisions/db-7c9d8"),
			[]string{"NAME", "CONTROLLER", "REVISION", "AGE"}, []any{"db-7c9d8", "statefulset.apps/db", 2, recent})
	})

	t.Run("jobs", func(t *testing.T) {
		tmpl := template(nil, "pi=perl:5.34")
		tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
		j := must(batch.Jobs("default").Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "pi"}, Spec: batchv1.JobSpec{
			Completions: ptrTo[int32](3), Template: tmpl,
		}}, metav1.CreateOptions{}))
		hdr := []string{"NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE", "[CONTAINERS]", "[IMAGES]", "[SELECTOR]"}
		selector := "batch.kubernetes.io/controller-uid=" + string(j.UID)
		checkTable(t, getTable(t, e, "/apis/batch/v1/namespaces/default/jobs/pi"), hdr,
			[]any{"pi", "Running", "0/3", "", recent, "pi", "perl:5.34", selector})
		start := ago(2 * time.Hour)
		done := metav1.NewTime(start.Add(95 * time.Second))
		j.Status = batchv1.JobStatus{StartTime: &start, CompletionTime: &done, Succeeded: 3, Conditions: []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue}, {Type: batchv1.JobComplete, Status: corev1.ConditionTrue},
		}}
		must(batch.Jobs("default").UpdateStatus(ctx, j, metav1.UpdateOptions{}))
		checkTable(t, getTable(t, e, "/apis/batch/v1/namespaces/default/jobs/pi"), hdr,
			[]any{"pi", "Complete", "3/3", "95s", recent, "pi", "perl:5.34", selector})
	})

	t.Run("cronjobs", func(t *testing.T) {
		tmpl := template(nil, "backup=busybox")
		tmpl.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
		c := must(batch.CronJobs("default").Create(ctx, &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "nightly"}, Spec: batchv1.CronJobSpec{
			Schedule: "0 3 * * *", TimeZone: ptrTo("Etc/UTC"), JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: tmpl}},
		}}, metav1.CreateOptions{}))
		hdr := []string{"NAME", "SCHEDULE", "TIMEZONE", "SUSPEND", "ACTIVE", "LAST SCHEDULE", "AGE", "[CONTAINERS]", "[IMAGES]", "[SELECTOR]"}
		checkTable(t, getTable(t, e, "/apis/batch/v1/namespaces/default/cronjobs/nightly"), hdr,
			[]any{"nightly", "0 3 * * *", "Etc/UTC", "False", 0, "<none>", recent, "backup", "busybox", "<none>"})
		last := ago(30 * time.Minute)
		c.Status = batchv1.CronJobStatus{LastScheduleTime: &last, Active: []corev1.ObjectReference{{Kind: "Job", Namespace: "default", Name: "nightly-29123"}}}
		must(batch.CronJobs("default").UpdateStatus(ctx, c, metav1.UpdateOptions{}))
		checkTable(t, getTable(t, e, "/apis/batch/v1/namespaces/default/cronjobs/nightly"), hdr,
			[]any{"nightly", "0 3 * * *", "Etc/UTC", "False", 1, "30m", recent, "backup", "busybox", "<none>"})
	})
}

// TestTablesOtherGroups covers the remaining groups, events.k8s.io among
// them: its events print like core's, from the new API's fields.
func TestTablesOtherGroups(t *testing.T) {
	e := newTestEnv(t)
	ctx := e.ctx

	t.Run("events.k8s.io", func(t *testing.T) {
		must(e.cs.EventsV1().Events("default").Create(ctx, &eventsv1.Event{
			ObjectMeta: metav1.ObjectMeta{Name: "web.17d2b"},
			EventTime:  metav1.NewMicroTime(time.Now().Add(-45 * time.Minute)), ReportingController: "kubelet", ReportingInstance: "node-1",
			Action: "Started", Reason: "Started", Type: corev1.EventTypeNormal, Note: "Started container app",
			Regarding: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web", FieldPath: "spec.containers{app}"},
		}, metav1.CreateOptions{}))
		checkTable(t, getTable(t, e, "/apis/events.k8s.io/v1/namespaces/default/events/web.17d2b"),
			[]string{"LAST SEEN", "TYPE", "REASON", "OBJECT", "[SUBOBJECT]", "[SOURCE]", "MESSAGE", "[FIRST SEEN]", "[COUNT]", "[NAME]"},
			[]any{"45m", "Normal", "Started", "pod/web", "spec.containers{app}", "kubelet, node-1", "Started container app", "45m", 1, "web.17d2b"})
		// A series: last seen and count come from it.
		must(e.cs.EventsV1().Events("default").Create(ctx, &eventsv1.Event{
			ObjectMeta: metav1.ObjectMeta{Name: "web.17d2c"},
			EventTime:  metav1.NewMicroTime(time.Now().Add(-3 * time.Hour)), ReportingController: "kubelet", ReportingInstance: "node-1",
			Action: "Pulling", Reason: "BackOff", Type: corev1.EventTypeWarning, Note: "Back-off pulling image",
			Regarding: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web"},
			Series:    &eventsv1.EventSeries{Count: 12, LastObservedTime: metav1.NewMicroTime(time.Now().Add(-20 * time.Minute))},
		}, metav1.CreateOptions{}))
		checkTable(t, getTable(t, e, "/apis/events.k8s.io/v1/namespaces/default/events/web.17d2c"),
			[]string{"LAST SEEN", "TYPE", "REASON", "OBJECT", "[SUBOBJECT]", "[SOURCE]", "MESSAGE", "[FIRST SEEN]", "[COUNT]", "[NAME]"},
			[]any{"20m", "Warning", "BackOff", "pod/web", "", "kubelet, node-1", "Back-off pulling image", "3h", 12, "web.17d2c"})
	})

	t.Run("leases", func(t *testing.T) {
		must(e.cs.CoordinationV1().Leases("default").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptrTo("node-1"), LeaseDurationSeconds: ptrTo[int32](40)}}, metav1.CreateOptions{}))
		checkTable(t, getTable(t, e, "/apis/coordination.k8s.io/v1/namespaces/default/leases/node-1"), []string{"NAME", "HOLDER", "AGE"}, []any{"node-1", "node-1", recent})
	})

	t.Run("endpointslices", func(t *testing.T) {
		hdr := []string{"NAME", "ADDRESSTYPE", "PORTS", "ENDPOINTS", "AGE"}
		must(e.cs.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "web-x7k2p"},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptrTo("http"), Port: ptrTo[int32](8080)}, {Name: ptrTo("metrics"), Port: ptrTo[int32](9090)}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.42.0.5"}}, {Addresses: []string{"10.42.0.6"}}, {Addresses: []string{"10.42.0.7"}},
				{Addresses: []string{"10.42.0.8"}}, {Addresses: []string{"10.42.0.9"}}},
		}, metav1.CreateOptions{}))
		checkTable(t, getTable(t, e, "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/web-x7k2p"), hdr,
			[]any{"web-x7k2p", "IPv4", "8080,9090", "10.42.0.5,10.42.0.6,10.42.0.7 + 2 more...", recent})
		must(e.cs.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "empty"},
			AddressType: discoveryv1.AddressTypeIPv4}, metav1.CreateOptions{}))
		checkTable(t, getTable(t, e, "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/empty"), hdr,
			[]any{"empty", "IPv4", "<unset>", "<unset>", recent})
	})

	t.Run("ingresses", func(t *testing.T) {
		pt := networkingv1.PathTypePrefix
		backend := networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Number: 80}}}
		rule := func(host string) networkingv1.IngressRule {
			return networkingv1.IngressRule{Host: host, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
				Paths: []networkingv1.HTTPIngressPath{{Path: "/", PathType: &pt, Backend: backend}}}}}
		}
		in := must(e.cs.NetworkingV1().Ingresses("default").Create(ctx, &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: networkingv1.IngressSpec{
			IngressClassName: ptrTo("nginx"),
			Rules:            []networkingv1.IngressRule{rule("a.example.com"), rule("b.example.com")},
			TLS:              []networkingv1.IngressTLS{{Hosts: []string{"a.example.com"}, SecretName: "tls"}},
		}}, metav1.CreateOptions{}))
		in.Status.LoadBalancer.Ingress = []networkingv1.IngressLoadBalancerIngress{{IP: "203.0.113.9"}}
		must(e.cs.NetworkingV1().Ingresses("default").UpdateStatus(ctx, in, metav1.UpdateOptions{}))
		hdr := []string{"NAME", "CLASS", "HOSTS", "ADDRESS", "PORTS", "AGE"}
		checkTable(t, getTable(t, e, "/apis/networking.k8s.io/v1/namespaces/default/ingresses/web"), hdr,
			[]any{"web", "nginx", "a.example.com,b.example.com", "203.0.113.9", "80, 443", recent})
		must(e.cs.NetworkingV1().Ingresses("default").Create(ctx, &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "catchall"}, Spec: networkingv1.IngressSpec{
			DefaultBackend: &backend,
		}}, metav1.CreateOptions{}))
		checkTable(t, getTable(t, e, "/apis/networking.k8s.io/v1/namespaces/default/ingresses/catchall"), hdr,
			[]any{"catchall", "<none>", "*", "", "80", recent})
	})

	t.Run("ingressclasses", func(t *testing.T) {
		must(e.cs.NetworkingV1().IngressClasses().Create(ctx, &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: "nginx"}, Spec: networkingv1.IngressClassSpec{
			Controller: "k8s.io/ingress-nginx",
			Parameters: &networkingv1.IngressClassParametersReference{APIGroup: ptrTo("k8s.example.com"), Kind: "IngressParameters", Name: "external-lb"},
		}}, metav1.CreateOptions{}))
		checkTable(t, getTable(t, e, "/apis/networking.k8s.io/v1/ingressclasses/nginx"), []string{"NAME", "CONTROLLER", "PARAMETERS", "AGE"},
			[]any{"nginx", "k8s.io/ingress-nginx", "IngressParameters.k8s.example.com/external-lb", recent})
	})

	t.Run("ipaddresses and servicecidrs", func(t *testing.T) {
		checkTable(t, getTable(t, e, "/apis/networking.k8s.io/v1/ipaddresses/10.43.0.1"), []string{"NAME", "PARENTREF"},
			[]any{"10.43.0.1", "services/default/kubernetes"})
		checkTable(t, getTable(t, e, "/apis/networking.k8s.io/v1/servicecidrs/kubernetes"), []string{"NAME", "CIDRS", "AGE"},
			[]any{"kubernetes", "10.43.0.0/16", recent})
	})

	t.Run("networkpolicies", func(t *testing.T) {
		for name, sel := range map[string]metav1.LabelSelector{"web-only": {MatchLabels: webLabels}, "deny-all": {}} {
			must(e.cs.NetworkingV1().NetworkPolicies("default").Create(ctx, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: networkingv1.NetworkPolicySpec{PodSelector: sel}}, metav1.CreateOptions{}))
		}
		checkTable(t, getTable(t, e, "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies/web-only"), []string{"NAME", "POD-SELECTOR", "AGE"}, []any{"web-only", "app=web", recent})
		checkTable(t, getTable(t, e, "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies/deny-all"), []string{"NAME", "POD-SELECTOR", "AGE"}, []any{"deny-all", "<none>", recent})
	})

	t.Run("poddisruptionbudgets", func(t *testing.T) {
		min := intstr.FromInt32(2)
		p := must(e.cs.PolicyV1().PodDisruptionBudgets("default").Create(ctx, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web"},
			Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &min, Selector: &metav1.LabelSelector{MatchLabels: webLabels}}}, metav1.CreateOptions{}))
		p.Status = policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 1, CurrentHealthy: 3, DesiredHealthy: 2, ExpectedPods: 3}
		must(e.cs.PolicyV1().PodDisruptionBudgets("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}))
		hdr := []string{"NAME", "MIN AVAILABLE", "MAX UNAVAILABLE", "ALLOWED DISRUPTIONS", "AGE"}
		checkTable(t, getTable(t, e, "/apis/policy/v1/namespaces/default/poddisruptionbudgets/web"), hdr, []any{"web", "2", "N/A", 1, recent})
		max := intstr.FromString("25%")
		must(e.cs.PolicyV1().PodDisruptionBudgets("default").Create(ctx, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "db"},
			Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &max, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}}, metav1.CreateOptions{}))
		checkTable(t, getTable(t, e, "/apis/policy/v1/namespaces/default/poddisruptionbudgets/db"), hdr, []any{"db", "N/A", "25%", 0, recent})
	})

	t.Run("priorityclasses", func(t *testing.T) {
		never := corev1.PreemptNever
		must(e.cs.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "batch-low"},
			Value: -10, PreemptionPolicy: &never, Description: "batch work"}, metav1.CreateOptions{}))
		checkTable(t, getTable(t, e, "/apis/scheduling.k8s.io/v1/priorityclasses/batch-low"),
			[]string{"NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"}, []any{"batch-low", -10, false, recent, "Never"})
	})

	t.Run("storageclasses", func(t *testing.T) {
		wait := storagev1.VolumeBindingWaitForFirstConsumer
		must(e.cs.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
			ObjectMeta:  metav1.ObjectMeta{Name: "local-path", Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}},
			Provisioner: "rancher.io/local-path", VolumeBindingMode: &wait, AllowVolumeExpansion: ptrTo(true),
		}, metav1.CreateOptions{}))
		checkTable(t, getTable(t, e, "/apis/storage.k8s.io/v1/storageclasses/local-path"),
			[]string{"NAME", "PROVISIONER", "RECLAIMPOLICY", "VOLUMEBINDINGMODE", "ALLOWVOLUMEEXPANSION", "AGE"},
			[]any{"local-path (default)", "rancher.io/local-path", "Delete", "WaitForFirstConsumer", true, recent})
	})

	t.Run("runtimeclasses", func(t *testing.T) {
		must(e.cs.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc"}, metav1.CreateOptions{}))
		checkTable(t, getTable(t, e, "/apis/node.k8s.io/v1/runtimeclasses/gvisor"), []string{"NAME", "HANDLER", "AGE"}, []any{"gvisor", "runsc", recent})
	})

	// A list is a table too, with one row per object and the list's
	// resourceVersion.
	t.Run("list", func(t *testing.T) {
		tbl := getTable(t, e, "/api/v1/namespaces?limit=2")
		if len(tbl.Rows) != 2 || tbl.ResourceVersion == "" || tbl.Continue == "" {
			t.Errorf("namespace table page: %d rows, rv %q, continue %q", len(tbl.Rows), tbl.ResourceVersion, tbl.Continue)
		}
	})
}

// upstreamIntegerInString are the columns kube-apiserver declares as
// string but fills with integers (its HorizontalPodAutoscaler and API
// Priority and Fairness printers), which bonsai's tables copy as they are
// on the wire.
var upstreamIntegerInString = map[string]bool{
	"horizontalpodautoscalers.autoscaling/MaxPods":                                      true,
	"horizontalpodautoscalers.autoscaling/Replicas":                                     true,
	"flowschemas.flowcontrol.apiserver.k8s.io/MatchingPrecedence":                       true,
	"prioritylevelconfigurations.flowcontrol.apiserver.k8s.io/NominalConcurrencyShares": true,
	"prioritylevelconfigurations.flowcontrol.apiserver.k8s.io/Queues":                   true,
	"prioritylevelconfigurations.flowcontrol.apiserver.k8s.io/HandSize":                 true,
	"prioritylevelconfigurations.flowcontrol.apiserver.k8s.io/QueueLengthLimit":         true,
}

// TestTablePrintersCoverEveryResource keeps a new kind from silently
// printing only Name and Created At, and checks every printer's cells
// against its columns for an empty object (as a fresh create can be).
func TestTablePrintersCoverEveryResource(t *testing.T) {
	for _, res := range builtinResources() {
		if res.createOnly {
			continue // reviews are answered, never listed
		}
		gr := res.gvr.GroupResource()
		p := res.def.Printer
		if p == nil {
			t.Errorf("%s has no table printer", gr)
			continue
		}
		obj := res.newObject()
		m, _ := metaOf(obj)
		m.SetName("x")
		cells := p.Cells(obj)
		if len(cells) != len(p.Columns) {
			t.Errorf("%s: %d cells for %d columns", gr, len(cells), len(p.Columns))
			continue
		}
		for i, c := range p.Columns {
			var ok bool
			switch c.Type {
			case registry.TString, registry.TDate:
				_, ok = cells[i].(string)
			case registry.TInteger:
				_, ok = cells[i].(int64)
			case registry.TBoolean:
				_, ok = cells[i].(bool)
			}
			if !ok && !upstreamIntegerInString[gr.String()+"/"+c.Name] {
				t.Errorf("%s: column %q is %s but its cell is %T", gr, c.Name, c.Type, cells[i])
			}
		}
		if p.Columns[0].Name != "Name" && gr.Resource != "events" {
			t.Errorf("%s: first column is %q", gr, p.Columns[0].Name)
		}
	}
}
