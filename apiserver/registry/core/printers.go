package core

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"bonsai.dev/bonsai/apiserver/registry"
)

var podPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Ready", registry.TString, "The aggregate readiness state of this pod for accepting traffic."),
		registry.Col("Status", registry.TString, "The aggregate status of the containers in this pod."),
		registry.Col("Restarts", registry.TString, "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."),
		registry.AgeCol,
		registry.Wide(registry.Col("IP", registry.TString, corev1.PodStatus{}.SwaggerDoc()["podIP"])),
		registry.Wide(registry.Col("Node", registry.TString, corev1.PodSpec{}.SwaggerDoc()["nodeName"])),
		registry.Wide(registry.Col("Nominated Node", registry.TString, corev1.PodStatus{}.SwaggerDoc()["nominatedNodeName"])),
		registry.Wide(registry.Col("Readiness Gates", registry.TString, corev1.PodSpec{}.SwaggerDoc()["readinessGates"])),
	),
	Cells: func(o runtime.Object) []any {
		p := o.(*corev1.Pod)
		s := summarizePod(p)
		ip := p.Status.PodIP
		if len(p.Status.PodIPs) > 0 {
			ip = p.Status.PodIPs[0].IP
		}
		return []any{p.Name, fmt.Sprintf("%d/%d", s.ready, s.total), s.reason, s.restarts, registry.Age(p),
			registry.OrNone(ip), registry.OrNone(p.Spec.NodeName), registry.OrNone(p.Status.NominatedNodeName), readinessGates(p)}
	},
	Conditions: func(o runtime.Object) []metav1.TableRowCondition {
		switch o.(*corev1.Pod).Status.Phase {
		case corev1.PodSucceeded:
			return []metav1.TableRowCondition{{Type: metav1.RowCompleted, Status: metav1.ConditionTrue, Reason: string(corev1.PodSucceeded), Message: "The pod has completed successfully."}}
		case corev1.PodFailed:
			return []metav1.TableRowCondition{{Type: metav1.RowCompleted, Status: metav1.ConditionTrue, Reason: string(corev1.PodFailed), Message: "The pod failed."}}
		}
		return nil
	},
}

type podSummary struct {
	ready, total int
	reason       string
	restarts     string
}

// summarizePod computes READY, STATUS and RESTARTS the way kubectl users
// know them: init progress (Init:1/2, Init:CrashLoopBackOff), the last
// container's waiting or terminated reason (CrashLoopBackOff, Completed,
// Error), Terminating, and when the last restart was.
func summarizePod(p *corev1.Pod) podSummary {
	reason := registry.OrDefault(p.Status.Reason, string(p.Status.Phase))
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonSchedulingGated {
			reason = corev1.PodReasonSchedulingGated
		}
	}
	// Sidecars (restartable init containers) count as the pod's
	// containers, and their restarts count after initialization.
	total := len(p.Spec.Containers)
	sidecar := map[string]bool{}
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sidecar[c.Name] = true
			total++
		}
	}
	ready, restarts, sidecarRestarts := 0, 0, 0
	var lastRestart, lastSidecarRestart time.Time
	initializing := false
	for i, cs := range p.Status.InitContainerStatuses {
		restarts += int(cs.RestartCount)
		lastRestart = laterRestart(lastRestart, cs)
		if sidecar[cs.Name] {
			sidecarRestarts += int(cs.RestartCount)
			lastSidecarRestart = laterRestart(lastSidecarRestart, cs)
		}
		if t := cs.State.Terminated; t != nil && t.ExitCode == 0 {
			continue
		}
		if sidecar[cs.Name] && cs.Started != nil && *cs.Started {
			if cs.Ready {
				ready++
			}
			continue
		}
		initializing = true
		switch t, w := cs.State.Terminated, cs.State.Waiting; {
		case t != nil && t.Reason != "":
			reason = "Init:" + t.Reason
		case t != nil && t.Signal != 0:
			reason = fmt.Sprintf("Init:Signal:%d", t.Signal)
		case t != nil:
			reason = fmt.Sprintf("Init:ExitCode:%d", t.ExitCode)
		case w != nil && w.Reason != "" && w.Reason != "PodInitializing":
			reason = "Init:" + w.Reason
		default:
			reason = fmt.Sprintf("Init:%d/%d", i, len(p.Spec.InitContainers))
		}
		break
	}
	if !initializing || podCondition(p, corev1.PodInitialized) {
		restarts, lastRestart = sidecarRestarts, lastSidecarRestart
		running := false
		for i := len(p.Status.ContainerStatuses) - 1; i >= 0; i-- {
			cs := p.Status.ContainerStatuses[i]
			restarts += int(cs.RestartCount)
			lastRestart = laterRestart(lastRestart, cs)
			switch t, w := cs.State.Terminated, cs.State.Waiting; {
			case w != nil && w.Reason != "":
				reason = w.Reason
			case t != nil && t.Reason != "":
				reason = t.Reason
			case t != nil && t.Signal != 0:
				reason = fmt.Sprintf("Signal:%d", t.Signal)
			case t != nil:
				reason = fmt.Sprintf("ExitCode:%d", t.ExitCode)
			case cs.Ready && cs.State.Running != nil:
				running = true
				ready++
			}
		}
		// A pod whose last container completed while others still run is
		// not complete.
		if reason == "Completed" && running {
			reason = "NotReady"
			if podCondition(p, corev1.PodReady) {
				reason = "Running"
			}
		}
	}
	terminal := p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	switch {
	case p.DeletionTimestamp != nil && p.Status.Reason == "NodeLost":
		reason = "Unknown"
	case p.DeletionTimestamp != nil && !terminal:
		reason = "Terminating"
	}
	rs := strconv.Itoa(restarts)
	if restarts != 0 && !lastRestart.IsZero() {
		rs = fmt.Sprintf("%d (%s ago)", restarts, registry.Since(lastRestart))
	}
	return podSummary{ready: ready, total: total, reason: reason, restarts: rs}
}

func laterRestart(t time.Time, cs corev1.ContainerStatus) time.Time {
	if lt := cs.LastTerminationState.Terminated; lt != nil && t.Before(lt.FinishedAt.Time) {
		return lt.FinishedAt.Time
	}
	return t
}

func podCondition(p *corev1.Pod, typ corev1.PodConditionType) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == typ {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func readinessGates(p *corev1.Pod) string {
	if len(p.Spec.ReadinessGates) == 0 {
		return "<none>"
	}
	ok := 0
	for _, g := range p.Spec.ReadinessGates {
		for _, c := range p.Status.Conditions {
			if c.Type == g.ConditionType {
				if c.Status == corev1.ConditionTrue {
					ok++
				}
				break
			}
		}
	}
	return fmt.Sprintf("%d/%d", ok, len(p.Spec.ReadinessGates))
}

var namespacePrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol, registry.Col("Status", registry.TString, "The status of the namespace"), registry.AgeCol),
	Cells: func(o runtime.Object) []any {
		n := o.(*corev1.Namespace)
		return []any{n.Name, string(n.Status.Phase), registry.Age(n)}
	},
}

var nodePrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Status", registry.TString, "The status of the node"),
		registry.Col("Roles", registry.TString, "The roles of the node"),
		registry.AgeCol,
		registry.Col("Version", registry.TString, corev1.NodeSystemInfo{}.SwaggerDoc()["kubeletVersion"]),
		registry.Wide(registry.Col("Internal-IP", registry.TString, corev1.NodeStatus{}.SwaggerDoc()["addresses"])),
		registry.Wide(registry.Col("External-IP", registry.TString, corev1.NodeStatus{}.SwaggerDoc()["addresses"])),
		registry.Wide(registry.Col("OS-Image", registry.TString, corev1.NodeSystemInfo{}.SwaggerDoc()["osImage"])),
		registry.Wide(registry.Col("Kernel-Version", registry.TString, corev1.NodeSystemInfo{}.SwaggerDoc()["kernelVersion"])),
		registry.Wide(registry.Col("Container-Runtime", registry.TString, corev1.NodeSystemInfo{}.SwaggerDoc()["containerRuntimeVersion"])),
	),
	Cells: func(o runtime.Object) []any {
		n := o.(*corev1.Node)
		status := "Unknown"
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				status = "NotReady"
				if c.Status == corev1.ConditionTrue {
					status = "Ready"
				}
			}
		}
		if n.Spec.Unschedulable {
			status += ",SchedulingDisabled"
		}
		ni := n.Status.NodeInfo
		return []any{n.Name, status, registry.OrNone(strings.Join(nodeRoles(n), ",")), registry.Age(n), ni.KubeletVersion,
			nodeAddress(n, corev1.NodeInternalIP), nodeAddress(n, corev1.NodeExternalIP),
			registry.OrDefault(ni.OSImage, "<unknown>"), registry.OrDefault(ni.KernelVersion, "<unknown>"), registry.OrDefault(ni.ContainerRuntimeVersion, "<unknown>")}
	},
}

// nodeRoles reads both role label conventions: node-role.kubernetes.io/<role>
// and the older kubernetes.io/role=<role>.
func nodeRoles(n *corev1.Node) []string {
	set := map[string]bool{}
	for k, v := range n.Labels {
		if r, ok := strings.CutPrefix(k, "node-role.kubernetes.io/"); ok && r != "" {
			set[r] = true
		} else if k == "kubernetes.io/role" && v != "" {
			set[v] = true
		}
	}
	roles := make([]string, 0, len(set))
	for r := range set {
		roles = append(roles, r)
	}
	sort.Strings(roles)
	return roles
}

// nodeAddress is the node's first address of a type: kubectl shows one.
func nodeAddress(n *corev1.Node, typ corev1.NodeAddressType) string {
	for _, a := range n.Status.Addresses {
		if a.Type == typ {
			return a.Address
		}
	}
	return "<none>"
}

var servicePrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Type", registry.TString, corev1.ServiceSpec{}.SwaggerDoc()["type"]),
		registry.Col("Cluster-IP", registry.TString, corev1.ServiceSpec{}.SwaggerDoc()["clusterIP"]),
		registry.Col("External-IP", registry.TString, corev1.ServiceSpec{}.SwaggerDoc()["externalIPs"]),
		registry.Col("Port(s)", registry.TString, corev1.ServiceSpec{}.SwaggerDoc()["ports"]),
		registry.AgeCol,
		registry.Wide(registry.Col("Selector", registry.TString, corev1.ServiceSpec{}.SwaggerDoc()["selector"])),
	),
	Cells: func(o runtime.Object) []any {
		s := o.(*corev1.Service)
		cip := "<none>"
		if len(s.Spec.ClusterIPs) > 0 {
			cip = s.Spec.ClusterIPs[0]
		}
		ports := make([]string, len(s.Spec.Ports))
		for i, p := range s.Spec.Ports {
			if p.NodePort > 0 {
				ports[i] = fmt.Sprintf("%d:%d/%s", p.Port, p.NodePort, p.Protocol)
			} else {
				ports[i] = fmt.Sprintf("%d/%s", p.Port, p.Protocol)
			}
		}
		return []any{s.Name, string(s.Spec.Type), cip, serviceExternalIP(s), registry.OrNone(strings.Join(ports, ",")), registry.Age(s), labels.FormatLabels(s.Spec.Selector)}
	},
}

func serviceExternalIP(s *corev1.Service) string {
	switch s.Spec.Type {
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort:
		return registry.OrNone(strings.Join(s.Spec.ExternalIPs, ","))
	case corev1.ServiceTypeLoadBalancer:
		var lb []string
		for _, in := range s.Status.LoadBalancer.Ingress {
			lb = append(lb, registry.OrDefault(in.IP, in.Hostname))
		}
		all := append(registry.UniqueSorted(lb), s.Spec.ExternalIPs...)
		if len(all) == 0 {
			return "<pending>"
		}
		return strings.Join(all, ",")
	case corev1.ServiceTypeExternalName:
		return s.Spec.ExternalName
	}
	return "<unknown>"
}

var endpointsPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol, registry.Col("Endpoints", registry.TString, corev1.Endpoints{}.SwaggerDoc()["subsets"]), registry.AgeCol),
	Cells: func(o runtime.Object) []any {
		e := o.(*corev1.Endpoints)
		return []any{e.Name, formatEndpoints(e), registry.Age(e)}
	},
}

// formatEndpoints lists ip:port for every port of every subset (bare IPs
// for headless subsets without ports), three at most.
func formatEndpoints(e *corev1.Endpoints) string {
	if len(e.Subsets) == 0 {
		return "<none>"
	}
	var list []string
	total := 0
	add := func(s string) {
		if len(list) < 3 {
			list = append(list, s)
		}
		total++
	}
	for _, ss := range e.Subsets {
		if len(ss.Ports) == 0 {
			for _, a := range ss.Addresses {
				add(a.IP)
			}
			continue
		}
		for _, p := range ss.Ports {
			for _, a := range ss.Addresses {
				add(net.JoinHostPort(a.IP, strconv.Itoa(int(p.Port))))
			}
		}
	}
	return registry.MoreList(list, total, "")
}

var configMapPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol, registry.Col("Data", registry.TInteger, corev1.ConfigMap{}.SwaggerDoc()["data"]), registry.AgeCol),
	Cells: func(o runtime.Object) []any {
		c := o.(*corev1.ConfigMap)
		return []any{c.Name, int64(len(c.Data) + len(c.BinaryData)), registry.Age(c)}
	},
}

var secretPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol, registry.Col("Type", registry.TString, corev1.Secret{}.SwaggerDoc()["type"]), registry.Col("Data", registry.TInteger, corev1.Secret{}.SwaggerDoc()["data"]), registry.AgeCol),
	Cells: func(o runtime.Object) []any {
		s := o.(*corev1.Secret)
		return []any{s.Name, string(s.Type), int64(len(s.Data)), registry.Age(s)}
	},
}

var serviceAccountPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol, registry.Col("Secrets", registry.TInteger, corev1.ServiceAccount{}.SwaggerDoc()["secrets"]), registry.AgeCol),
	Cells: func(o runtime.Object) []any {
		s := o.(*corev1.ServiceAccount)
		return []any{s.Name, int64(len(s.Secrets)), registry.Age(s)}
	},
}

// Both event APIs print alike, as kube-apiserver stores them as one type.
var EventColumns = registry.Cols(
	registry.Col("Last Seen", registry.TString, corev1.Event{}.SwaggerDoc()["lastTimestamp"]),
	registry.Col("Type", registry.TString, corev1.Event{}.SwaggerDoc()["type"]),
	registry.Col("Reason", registry.TString, corev1.Event{}.SwaggerDoc()["reason"]),
	registry.Col("Object", registry.TString, corev1.Event{}.SwaggerDoc()["involvedObject"]),
	registry.Wide(registry.Col("Subobject", registry.TString, corev1.ObjectReference{}.SwaggerDoc()["fieldPath"])),
	registry.Wide(registry.Col("Source", registry.TString, corev1.Event{}.SwaggerDoc()["source"])),
	registry.Col("Message", registry.TString, corev1.Event{}.SwaggerDoc()["message"]),
	registry.Wide(registry.Col("First Seen", registry.TString, corev1.Event{}.SwaggerDoc()["firstTimestamp"])),
	registry.Wide(registry.Col("Count", registry.TInteger, corev1.Event{}.SwaggerDoc()["count"])),
	registry.Wide(registry.Col("Name", registry.TString, registry.ObjectMetaDoc["name"])),
)

var coreEventPrinter = registry.Printer{
	Columns: EventColumns,
	Cells:   func(o runtime.Object) []any { return EventCells(o.(*corev1.Event)) },
}

func EventCells(e *corev1.Event) []any {
	first := registry.Since(e.FirstTimestamp.Time)
	if e.FirstTimestamp.IsZero() {
		first = registry.Since(e.EventTime.Time)
	}
	last := registry.Since(e.LastTimestamp.Time)
	if e.LastTimestamp.IsZero() {
		last = first
	}
	count := e.Count
	if e.Series != nil {
		last, count = registry.Since(e.Series.LastObservedTime.Time), e.Series.Count
	} else if count == 0 {
		// Events of the new API that happened once carry no count.
		count = 1
	}
	target := strings.ToLower(e.InvolvedObject.Kind)
	if e.InvolvedObject.Name != "" {
		target += "/" + e.InvolvedObject.Name
	}
	component := registry.OrDefault(e.Source.Component, e.ReportingController)
	source := component
	if host := registry.OrDefault(e.Source.Host, e.ReportingInstance); host != "" {
		source += ", " + host
	}
	return []any{last, e.Type, e.Reason, target, e.InvolvedObject.FieldPath, source, strings.TrimSpace(e.Message), first, int64(count), e.Name}
}

// resourceQuotaPrinter has Age last, as since Kubernetes 1.33.
var resourceQuotaPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Request", registry.TString, "Request represents a minimum amount of cpu/memory that a container may consume."),
		registry.Col("Limit", registry.TString, "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node."),
		registry.AgeCol,
	),
	Cells: func(o runtime.Object) []any {
		q := o.(*corev1.ResourceQuota)
		names := make([]string, 0, len(q.Status.Hard))
		for n := range q.Status.Hard {
			names = append(names, string(n))
		}
		sort.Strings(names)
		var req, lim []string
		for _, n := range names {
			used, hard := q.Status.Used[corev1.ResourceName(n)], q.Status.Hard[corev1.ResourceName(n)]
			s := fmt.Sprintf("%s: %s/%s", n, used.String(), hard.String())
			if strings.HasPrefix(n, "limits.") {
				lim = append(lim, s)
			} else {
				req = append(req, s)
			}
		}
		return []any{q.Name, strings.Join(req, ", "), strings.Join(lim, ", "), registry.Age(q)}
	},
}

var podTemplatePrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Containers", registry.TString, "Names of each container in the template."),
		registry.Col("Images", registry.TString, "Images referenced by each container in the template."),
		registry.Col("Pod Labels", registry.TString, "The labels for the pod template."),
	),
	Cells: func(o runtime.Object) []any {
		t := o.(*corev1.PodTemplate)
		return append(registry.WithContainers([]any{t.Name}, t.Template.Spec.Containers), labels.FormatLabels(t.Template.Labels))
	},
}

var persistentVolumePrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Capacity", registry.TString, corev1.PersistentVolumeSpec{}.SwaggerDoc()["capacity"]),
		registry.Col("Access Modes", registry.TString, corev1.PersistentVolumeSpec{}.SwaggerDoc()["accessModes"]),
		registry.Col("Reclaim Policy", registry.TString, corev1.PersistentVolumeSpec{}.SwaggerDoc()["persistentVolumeReclaimPolicy"]),
		registry.Col("Status", registry.TString, corev1.PersistentVolumeStatus{}.SwaggerDoc()["phase"]),
		registry.Col("Claim", registry.TString, corev1.PersistentVolumeSpec{}.SwaggerDoc()["claimRef"]),
		registry.Col("StorageClass", registry.TString, "StorageClass of the pv"),
		registry.Col("VolumeAttributesClass", registry.TString, "VolumeAttributesClass of the pv"),
		registry.Col("Reason", registry.TString, corev1.PersistentVolumeStatus{}.SwaggerDoc()["reason"]),
		registry.AgeCol,
		registry.Wide(registry.Col("VolumeMode", registry.TString, corev1.PersistentVolumeSpec{}.SwaggerDoc()["volumeMode"])),
	),
	Cells: func(o runtime.Object) []any {
		pv := o.(*corev1.PersistentVolume)
		claim := ""
		if r := pv.Spec.ClaimRef; r != nil {
			claim = r.Namespace + "/" + r.Name
		}
		phase := string(pv.Status.Phase)
		if pv.DeletionTimestamp != nil {
			phase = "Terminating"
		}
		size := pv.Spec.Capacity[corev1.ResourceStorage]
		class := pv.Annotations[corev1.BetaStorageClassAnnotation]
		if class == "" {
			class = pv.Spec.StorageClassName
		}
		return []any{pv.Name, size.String(), accessModes(pv.Spec.AccessModes), string(pv.Spec.PersistentVolumeReclaimPolicy),
			phase, claim, class, registry.StrOr(pv.Spec.VolumeAttributesClassName, "<unset>"), pv.Status.Reason, registry.Age(pv), volumeMode(pv.Spec.VolumeMode)}
	},
}

var persistentVolumeClaimPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Status", registry.TString, corev1.PersistentVolumeClaimStatus{}.SwaggerDoc()["phase"]),
		registry.Col("Volume", registry.TString, corev1.PersistentVolumeClaimSpec{}.SwaggerDoc()["volumeName"]),
		registry.Col("Capacity", registry.TString, corev1.PersistentVolumeClaimStatus{}.SwaggerDoc()["capacity"]),
		registry.Col("Access Modes", registry.TString, corev1.PersistentVolumeClaimStatus{}.SwaggerDoc()["accessModes"]),
		registry.Col("StorageClass", registry.TString, "StorageClass of the pvc"),
		registry.Col("VolumeAttributesClass", registry.TString, "VolumeAttributesClass of the pvc"),
		registry.AgeCol,
		registry.Wide(registry.Col("VolumeMode", registry.TString, corev1.PersistentVolumeClaimSpec{}.SwaggerDoc()["volumeMode"])),
	),
	Cells: func(o runtime.Object) []any {
		c := o.(*corev1.PersistentVolumeClaim)
		phase := string(c.Status.Phase)
		if c.DeletionTimestamp != nil {
			phase = "Terminating"
		}
		// Capacity and modes are the bound volume's; unbound claims show
		// neither.
		capacity, modes := "", ""
		if c.Spec.VolumeName != "" {
			q := c.Status.Capacity[corev1.ResourceStorage]
			capacity, modes = q.String(), accessModes(c.Status.AccessModes)
		}
		class := c.Annotations[corev1.BetaStorageClassAnnotation]
		if class == "" {
			class = registry.StrOr(c.Spec.StorageClassName, "")
		}
		return []any{c.Name, phase, c.Spec.VolumeName, capacity, modes, class,
			registry.StrOr(c.Spec.VolumeAttributesClassName, "<unset>"), registry.Age(c), volumeMode(c.Spec.VolumeMode)}
	},
}

func volumeMode(m *corev1.PersistentVolumeMode) string {
	if m == nil {
		return "<unset>"
	}
	return string(*m)
}

// accessModes abbreviates access modes in a fixed order, once each.
func accessModes(modes []corev1.PersistentVolumeAccessMode) string {
	var out []string
	for _, m := range []struct {
		mode  corev1.PersistentVolumeAccessMode
		short string
	}{{corev1.ReadWriteOnce, "RWO"}, {corev1.ReadOnlyMany, "ROX"}, {corev1.ReadWriteMany, "RWX"}, {corev1.ReadWriteOncePod, "RWOP"}} {
		for _, x := range modes {
			if x == m.mode {
				out = append(out, m.short)
				break
			}
		}
	}
	return strings.Join(out, ",")
}

var replicationControllerPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Desired", registry.TInteger, corev1.ReplicationControllerSpec{}.SwaggerDoc()["replicas"]),
		registry.Col("Current", registry.TInteger, corev1.ReplicationControllerStatus{}.SwaggerDoc()["replicas"]),
		registry.Col("Ready", registry.TInteger, corev1.ReplicationControllerStatus{}.SwaggerDoc()["readyReplicas"]),
		registry.AgeCol, registry.ContainersCol, registry.ImagesCol,
		registry.Wide(registry.Col("Selector", registry.TString, corev1.ReplicationControllerSpec{}.SwaggerDoc()["selector"])),
	),
	Cells: func(o runtime.Object) []any {
		rc := o.(*corev1.ReplicationController)
		var cs []corev1.Container
		if rc.Spec.Template != nil {
			cs = rc.Spec.Template.Spec.Containers
		}
		cells := []any{rc.Name, registry.ReplicasOr1(rc.Spec.Replicas), int64(rc.Status.Replicas), int64(rc.Status.ReadyReplicas), registry.Age(rc)}
		return append(registry.WithContainers(cells, cs), labels.FormatLabels(rc.Spec.Selector))
	},
}

// --- apps/v1 ---

// --- batch/v1 ---

// --- other groups ---
