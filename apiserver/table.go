package apiserver

import (
	"fmt"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"bonsai.dev/bonsai/apiserver/registry"
)

// printers is keyed by group and resource: the same resource name can
// mean different types in two groups (events in core and events.k8s.io).
var printers = map[schema.GroupResource]printer{
	// kube-apiserver shows CRDs with the default columns.
	{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}: defaultPrinter,
	apiServiceGVR.GroupResource():                                          apiServicePrinter,
	{Resource: "pods"}:                                                     podPrinter,
	{Resource: "namespaces"}:                                               namespacePrinter,
	{Resource: "nodes"}:                                                    nodePrinter,
	{Resource: "services"}:                                                 servicePrinter,
	{Resource: "endpoints"}:                                                endpointsPrinter,
	{Resource: "configmaps"}:                                               configMapPrinter,
	{Resource: "secrets"}:                                                  secretPrinter,
	{Resource: "serviceaccounts"}:                                          serviceAccountPrinter,
	{Resource: "events"}:                                                   coreEventPrinter,
	{Resource: "limitranges"}:                                              defaultPrinter, // upstream has no columns of its own
	{Resource: "resourcequotas"}:                                           resourceQuotaPrinter,
	{Resource: "podtemplates"}:                                             podTemplatePrinter,
	{Resource: "persistentvolumes"}:                                        persistentVolumePrinter,
	{Resource: "persistentvolumeclaims"}:                                   persistentVolumeClaimPrinter,
	{Resource: "replicationcontrollers"}:                                   replicationControllerPrinter,
	{Group: "events.k8s.io", Resource: "events"}:                           eventsV1Printer,
}

// --- core/v1 ---

var podPrinter = printer{
	Columns: cols(nameCol,
		col("Ready", tString, "The aggregate readiness state of this pod for accepting traffic."),
		col("Status", tString, "The aggregate status of the containers in this pod."),
		col("Restarts", tString, "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."),
		ageCol,
		wide(col("IP", tString, corev1.PodStatus{}.SwaggerDoc()["podIP"])),
		wide(col("Node", tString, corev1.PodSpec{}.SwaggerDoc()["nodeName"])),
		wide(col("Nominated Node", tString, corev1.PodStatus{}.SwaggerDoc()["nominatedNodeName"])),
		wide(col("Readiness Gates", tString, corev1.PodSpec{}.SwaggerDoc()["readinessGates"])),
	),
	Cells: func(o runtime.Object) []any {
		p := o.(*corev1.Pod)
		s := summarizePod(p)
		ip := p.Status.PodIP
		if len(p.Status.PodIPs) > 0 {
			ip = p.Status.PodIPs[0].IP
		}
		return []any{p.Name, fmt.Sprintf("%d/%d", s.ready, s.total), s.reason, s.restarts, age(p),
			orNone(ip), orNone(p.Spec.NodeName), orNone(p.Status.NominatedNodeName), readinessGates(p)}
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
	reason := orDefault(p.Status.Reason, string(p.Status.Phase))
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
		rs = fmt.Sprintf("%d (%s ago)", restarts, since(lastRestart))
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

var namespacePrinter = printer{
	Columns: cols(nameCol, col("Status", tString, "The status of the namespace"), ageCol),
	Cells: func(o runtime.Object) []any {
		n := o.(*corev1.Namespace)
		return []any{n.Name, string(n.Status.Phase), age(n)}
	},
}

var nodePrinter = printer{
	Columns: cols(nameCol,
		col("Status", tString, "The status of the node"),
		col("Roles", tString, "The roles of the node"),
		ageCol,
		col("Version", tString, corev1.NodeSystemInfo{}.SwaggerDoc()["kubeletVersion"]),
		wide(col("Internal-IP", tString, corev1.NodeStatus{}.SwaggerDoc()["addresses"])),
		wide(col("External-IP", tString, corev1.NodeStatus{}.SwaggerDoc()["addresses"])),
		wide(col("OS-Image", tString, corev1.NodeSystemInfo{}.SwaggerDoc()["osImage"])),
		wide(col("Kernel-Version", tString, corev1.NodeSystemInfo{}.SwaggerDoc()["kernelVersion"])),
		wide(col("Container-Runtime", tString, corev1.NodeSystemInfo{}.SwaggerDoc()["containerRuntimeVersion"])),
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
		return []any{n.Name, status, orNone(strings.Join(nodeRoles(n), ",")), age(n), ni.KubeletVersion,
			nodeAddress(n, corev1.NodeInternalIP), nodeAddress(n, corev1.NodeExternalIP),
			orDefault(ni.OSImage, "<unknown>"), orDefault(ni.KernelVersion, "<unknown>"), orDefault(ni.ContainerRuntimeVersion, "<unknown>")}
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

var servicePrinter = printer{
	Columns: cols(nameCol,
		col("Type", tString, corev1.ServiceSpec{}.SwaggerDoc()["type"]),
		col("Cluster-IP", tString, corev1.ServiceSpec{}.SwaggerDoc()["clusterIP"]),
		col("External-IP", tString, corev1.ServiceSpec{}.SwaggerDoc()["externalIPs"]),
		col("Port(s)", tString, corev1.ServiceSpec{}.SwaggerDoc()["ports"]),
		ageCol,
		wide(col("Selector", tString, corev1.ServiceSpec{}.SwaggerDoc()["selector"])),
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
		return []any{s.Name, string(s.Spec.Type), cip, serviceExternalIP(s), orNone(strings.Join(ports, ",")), age(s), labels.FormatLabels(s.Spec.Selector)}
	},
}

func serviceExternalIP(s *corev1.Service) string {
	switch s.Spec.Type {
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort:
		return orNone(strings.Join(s.Spec.ExternalIPs, ","))
	case corev1.ServiceTypeLoadBalancer:
		var lb []string
		for _, in := range s.Status.LoadBalancer.Ingress {
			lb = append(lb, orDefault(in.IP, in.Hostname))
		}
		all := append(uniqueSorted(lb), s.Spec.ExternalIPs...)
		if len(all) == 0 {
			return "<pending>"
		}
		return strings.Join(all, ",")
	case corev1.ServiceTypeExternalName:
		return s.Spec.ExternalName
	}
	return "<unknown>"
}

var endpointsPrinter = printer{
	Columns: cols(nameCol, col("Endpoints", tString, corev1.Endpoints{}.SwaggerDoc()["subsets"]), ageCol),
	Cells: func(o runtime.Object) []any {
		e := o.(*corev1.Endpoints)
		return []any{e.Name, formatEndpoints(e), age(e)}
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
	return moreList(list, total, "")
}

var configMapPrinter = printer{
	Columns: cols(nameCol, col("Data", tInteger, corev1.ConfigMap{}.SwaggerDoc()["data"]), ageCol),
	Cells: func(o runtime.Object) []any {
		c := o.(*corev1.ConfigMap)
		return []any{c.Name, int64(len(c.Data) + len(c.BinaryData)), age(c)}
	},
}

var secretPrinter = printer{
	Columns: cols(nameCol, col("Type", tString, corev1.Secret{}.SwaggerDoc()["type"]), col("Data", tInteger, corev1.Secret{}.SwaggerDoc()["data"]), ageCol),
	Cells: func(o runtime.Object) []any {
		s := o.(*corev1.Secret)
		return []any{s.Name, string(s.Type), int64(len(s.Data)), age(s)}
	},
}

var serviceAccountPrinter = printer{
	Columns: cols(nameCol, col("Secrets", tInteger, corev1.ServiceAccount{}.SwaggerDoc()["secrets"]), ageCol),
	Cells: func(o runtime.Object) []any {
		s := o.(*corev1.ServiceAccount)
		return []any{s.Name, int64(len(s.Secrets)), age(s)}
	},
}

// Both event APIs print alike, as kube-apiserver stores them as one type.
var eventColumns = cols(
	col("Last Seen", tString, corev1.Event{}.SwaggerDoc()["lastTimestamp"]),
	col("Type", tString, corev1.Event{}.SwaggerDoc()["type"]),
	col("Reason", tString, corev1.Event{}.SwaggerDoc()["reason"]),
	col("Object", tString, corev1.Event{}.SwaggerDoc()["involvedObject"]),
	wide(col("Subobject", tString, corev1.ObjectReference{}.SwaggerDoc()["fieldPath"])),
	wide(col("Source", tString, corev1.Event{}.SwaggerDoc()["source"])),
	col("Message", tString, corev1.Event{}.SwaggerDoc()["message"]),
	wide(col("First Seen", tString, corev1.Event{}.SwaggerDoc()["firstTimestamp"])),
	wide(col("Count", tInteger, corev1.Event{}.SwaggerDoc()["count"])),
	wide(col("Name", tString, objectMetaDoc["name"])),
)

var coreEventPrinter = printer{
	Columns: eventColumns,
	Cells:   func(o runtime.Object) []any { return eventCells(o.(*corev1.Event)) },
}

var eventsV1Printer = printer{
	Columns: eventColumns,
	Cells: func(o runtime.Object) []any {
		e := o.(*eventsv1.Event)
		return eventCells(&corev1.Event{
			ObjectMeta:          e.ObjectMeta,
			InvolvedObject:      e.Regarding,
			Reason:              e.Reason,
			Message:             e.Note,
			Source:              e.DeprecatedSource,
			FirstTimestamp:      e.DeprecatedFirstTimestamp,
			LastTimestamp:       e.DeprecatedLastTimestamp,
			Count:               e.DeprecatedCount,
			Type:                e.Type,
			EventTime:           e.EventTime,
			Series:              eventSeries(e.Series),
			ReportingController: e.ReportingController,
			ReportingInstance:   e.ReportingInstance,
		})
	},
}

func eventSeries(s *eventsv1.EventSeries) *corev1.EventSeries {
	if s == nil {
		return nil
	}
	return &corev1.EventSeries{Count: s.Count, LastObservedTime: s.LastObservedTime}
}

func eventCells(e *corev1.Event) []any {
	first := since(e.FirstTimestamp.Time)
	if e.FirstTimestamp.IsZero() {
		first = since(e.EventTime.Time)
	}
	last := since(e.LastTimestamp.Time)
	if e.LastTimestamp.IsZero() {
		last = first
	}
	count := e.Count
	if e.Series != nil {
		last, count = since(e.Series.LastObservedTime.Time), e.Series.Count
	} else if count == 0 {
		// Events of the new API that happened once carry no count.
		count = 1
	}
	target := strings.ToLower(e.InvolvedObject.Kind)
	if e.InvolvedObject.Name != "" {
		target += "/" + e.InvolvedObject.Name
	}
	component := orDefault(e.Source.Component, e.ReportingController)
	source := component
	if host := orDefault(e.Source.Host, e.ReportingInstance); host != "" {
		source += ", " + host
	}
	return []any{last, e.Type, e.Reason, target, e.InvolvedObject.FieldPath, source, strings.TrimSpace(e.Message), first, int64(count), e.Name}
}

// resourceQuotaPrinter has Age last, as since Kubernetes 1.33.
var resourceQuotaPrinter = printer{
	Columns: cols(nameCol,
		col("Request", tString, "Request represents a minimum amount of cpu/memory that a container may consume."),
		col("Limit", tString, "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node."),
		ageCol,
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
		return []any{q.Name, strings.Join(req, ", "), strings.Join(lim, ", "), age(q)}
	},
}

var podTemplatePrinter = printer{
	Columns: cols(nameCol,
		col("Containers", tString, "Names of each container in the template."),
		col("Images", tString, "Images referenced by each container in the template."),
		col("Pod Labels", tString, "The labels for the pod template."),
	),
	Cells: func(o runtime.Object) []any {
		t := o.(*corev1.PodTemplate)
		return append(withContainers([]any{t.Name}, t.Template.Spec.Containers), labels.FormatLabels(t.Template.Labels))
	},
}

var persistentVolumePrinter = printer{
	Columns: cols(nameCol,
		col("Capacity", tString, corev1.PersistentVolumeSpec{}.SwaggerDoc()["capacity"]),
		col("Access Modes", tString, corev1.PersistentVolumeSpec{}.SwaggerDoc()["accessModes"]),
		col("Reclaim Policy", tString, corev1.PersistentVolumeSpec{}.SwaggerDoc()["persistentVolumeReclaimPolicy"]),
		col("Status", tString, corev1.PersistentVolumeStatus{}.SwaggerDoc()["phase"]),
		col("Claim", tString, corev1.PersistentVolumeSpec{}.SwaggerDoc()["claimRef"]),
		col("StorageClass", tString, "StorageClass of the pv"),
		col("VolumeAttributesClass", tString, "VolumeAttributesClass of the pv"),
		col("Reason", tString, corev1.PersistentVolumeStatus{}.SwaggerDoc()["reason"]),
		ageCol,
		wide(col("VolumeMode", tString, corev1.PersistentVolumeSpec{}.SwaggerDoc()["volumeMode"])),
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
			phase, claim, class, strOr(pv.Spec.VolumeAttributesClassName, "<unset>"), pv.Status.Reason, age(pv), volumeMode(pv.Spec.VolumeMode)}
	},
}

var persistentVolumeClaimPrinter = printer{
	Columns: cols(nameCol,
		col("Status", tString, corev1.PersistentVolumeClaimStatus{}.SwaggerDoc()["phase"]),
		col("Volume", tString, corev1.PersistentVolumeClaimSpec{}.SwaggerDoc()["volumeName"]),
		col("Capacity", tString, corev1.PersistentVolumeClaimStatus{}.SwaggerDoc()["capacity"]),
		col("Access Modes", tString, corev1.PersistentVolumeClaimStatus{}.SwaggerDoc()["accessModes"]),
		col("StorageClass", tString, "StorageClass of the pvc"),
		col("VolumeAttributesClass", tString, "VolumeAttributesClass of the pvc"),
		ageCol,
		wide(col("VolumeMode", tString, corev1.PersistentVolumeClaimSpec{}.SwaggerDoc()["volumeMode"])),
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
			class = strOr(c.Spec.StorageClassName, "")
		}
		return []any{c.Name, phase, c.Spec.VolumeName, capacity, modes, class,
			strOr(c.Spec.VolumeAttributesClassName, "<unset>"), age(c), volumeMode(c.Spec.VolumeMode)}
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

var replicationControllerPrinter = printer{
	Columns: cols(nameCol,
		col("Desired", tInteger, corev1.ReplicationControllerSpec{}.SwaggerDoc()["replicas"]),
		col("Current", tInteger, corev1.ReplicationControllerStatus{}.SwaggerDoc()["replicas"]),
		col("Ready", tInteger, corev1.ReplicationControllerStatus{}.SwaggerDoc()["readyReplicas"]),
		ageCol, containersCol, imagesCol,
		wide(col("Selector", tString, corev1.ReplicationControllerSpec{}.SwaggerDoc()["selector"])),
	),
	Cells: func(o runtime.Object) []any {
		rc := o.(*corev1.ReplicationController)
		var cs []corev1.Container
		if rc.Spec.Template != nil {
			cs = rc.Spec.Template.Spec.Containers
		}
		cells := []any{rc.Name, replicasOr1(rc.Spec.Replicas), int64(rc.Status.Replicas), int64(rc.Status.ReadyReplicas), age(rc)}
		return append(withContainers(cells, cs), labels.FormatLabels(rc.Spec.Selector))
	},
}

// --- apps/v1 ---

// --- batch/v1 ---

// --- other groups ---

// table renders objects as a server-side Table. includeObject=None|
// Metadata|Object says what each row carries (Metadata by default).
func (s *Server) table(r *http.Request, res *resource, objs []runtime.Object, rv, cont string) (*metav1.Table, error) {
	p := res.printer
	if res.custom != nil {
		p = &res.custom.printer
	} else if p == nil {
		p = registry.DefaultPrinter
	}
	include := metav1.IncludeMetadata
	switch v := r.URL.Query().Get("includeObject"); v {
	case "", "Metadata":
	case "None":
		include = metav1.IncludeNone
	case "Object":
		include = metav1.IncludeObject
	default:
		return nil, apierrors.NewBadRequest(fmt.Sprintf("includeObject: unsupported value %q", v))
	}
	t := &metav1.Table{TypeMeta: metav1.TypeMeta{Kind: "Table", APIVersion: "meta.k8s.io/v1"}, ColumnDefinitions: p.Columns}
	t.ResourceVersion, t.Continue = rv, cont
	t.Rows = make([]metav1.TableRow, 0, len(objs))
	for _, o := range objs {
		row := metav1.TableRow{Cells: p.Cells(o)}
		if p.Conditions != nil {
			row.Conditions = p.Conditions(o)
		}
		switch include {
		case metav1.IncludeMetadata:
			row.Object.Object = partialMetadata(o)
		case metav1.IncludeObject:
			o.GetObjectKind().SetGroupVersionKind(res.gvk())
			row.Object.Object = o
		}
		t.Rows = append(t.Rows, row)
	}
	return t, nil
}
