package apiserver

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
)

// printer renders one kind's rows: columns (with priority 1 for -o wide
// only) and cells per object.
type printer struct {
	columns []metav1.TableColumnDefinition
	cells   func(obj runtime.Object) []any
}

func col(name, typ, desc string, priority int32) metav1.TableColumnDefinition {
	c := metav1.TableColumnDefinition{Name: name, Type: typ, Description: desc, Priority: priority}
	if name == "Name" {
		c.Format = "name"
	}
	return c
}

func age(m metav1.Object) string {
	ts := m.GetCreationTimestamp()
	if ts.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(time.Since(ts.Time))
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// printers hold kube-apiserver's columns for the kinds kubectl users see
// most; every other kind gets Name and Created At, as upstream's default.
var printers = map[string]printer{
	"pods": {
		columns: []metav1.TableColumnDefinition{
			col("Name", "string", "Name must be unique within a namespace.", 0),
			col("Ready", "string", "The aggregate readiness state of this pod for accepting traffic.", 0),
			col("Status", "string", "The aggregate status of the containers in this pod.", 0),
			col("Restarts", "string", "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.", 0),
			col("Age", "string", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0),
			col("IP", "string", "IP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.", 1),
			col("Node", "string", "NodeName is a request to schedule this pod onto a specific node.", 1),
			col("Nominated Node", "string", "nominatedNodeName is set when this pod preempts other pods on the node.", 1),
			col("Readiness Gates", "string", "If specified, all readiness gates will be evaluated for pod readiness.", 1),
		},
		cells: func(o runtime.Object) []any {
			p := o.(*corev1.Pod)
			ready, restarts := 0, int32(0)
			for _, cs := range p.Status.ContainerStatuses {
				if cs.Ready {
					ready++
				}
				restarts += cs.RestartCount
			}
			return []any{p.Name, fmt.Sprintf("%d/%d", ready, len(p.Spec.Containers)), podStatusReason(p), fmt.Sprint(restarts), age(p),
				orNone(p.Status.PodIP), orNone(p.Spec.NodeName), orNone(p.Status.NominatedNodeName), readinessGates(p)}
		},
	},
	"namespaces": {
		columns: []metav1.TableColumnDefinition{col("Name", "string", "Name", 0), col("Status", "string", "The status of the namespace", 0), col("Age", "string", "Age", 0)},
		cells: func(o runtime.Object) []any {
			n := o.(*corev1.Namespace)
			return []any{n.Name, string(n.Status.Phase), age(n)}
		},
	},
	"configmaps": {
		columns: []metav1.TableColumnDefinition{col("Name", "string", "Name", 0), col("Data", "string", "Data", 0), col("Age", "string", "Age", 0)},
		cells: func(o runtime.Object) []any {
			c := o.(*corev1.ConfigMap)
			return []any{c.Name, int64(len(c.Data) + len(c.BinaryData)), age(c)}
		},
	},
	"secrets": {
		columns: []metav1.TableColumnDefinition{col("Name", "string", "Name", 0), col("Type", "string", "The type of the secret", 0), col("Data", "string", "The number of entries in the secret", 0), col("Age", "string", "Age", 0)},
		cells: func(o runtime.Object) []any {
			s := o.(*corev1.Secret)
			return []any{s.Name, string(s.Type), int64(len(s.Data)), age(s)}
		},
	},
	"services": {
		columns: []metav1.TableColumnDefinition{
			col("Name", "string", "Name", 0), col("Type", "string", "The type of the service", 0),
			col("Cluster-IP", "string", "The cluster ip of the service", 0), col("External-IP", "string", "The external ip of the service", 0),
			col("Port(s)", "string", "The ports of the service", 0), col("Age", "string", "Age", 0), col("Selector", "string", "The selector of the service", 1),
		},
		cells: func(o runtime.Object) []any {
			s := o.(*corev1.Service)
			ext := "<none>"
			if len(s.Spec.ExternalIPs) > 0 {
				ext = strings.Join(s.Spec.ExternalIPs, ",")
			} else if s.Spec.Type == corev1.ServiceTypeLoadBalancer {
				ext = "<pending>"
				var ips []string
				for _, in := range s.Status.LoadBalancer.Ingress {
					ips = append(ips, in.IP+in.Hostname)
				}
				if len(ips) > 0 {
					ext = strings.Join(ips, ",")
				}
			} else if s.Spec.Type == corev1.ServiceTypeExternalName {
				ext = s.Spec.ExternalName
			}
			var ports []string
			for _, p := range s.Spec.Ports {
				if p.NodePort != 0 {
					ports = append(ports, fmt.Sprintf("%d:%d/%s", p.Port, p.NodePort, p.Protocol))
				} else {
					ports = append(ports, fmt.Sprintf("%d/%s", p.Port, p.Protocol))
				}
			}
			cip := s.Spec.ClusterIP
			if cip == "" {
				cip = "<none>"
			}
			return []any{s.Name, string(s.Spec.Type), cip, ext, orNone(strings.Join(ports, ",")), age(s), orNone(selectorString(s.Spec.Selector))}
		},
	},
	"deployments": {
		columns: []metav1.TableColumnDefinition{
			col("Name", "string", "Name", 0), col("Ready", "string", "Number of the pod with ready state", 0),
			col("Up-to-date", "string", "Total number of non-terminated pods targeted by this deployment that have the desired template spec.", 0),
			col("Available", "string", "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.", 0),
			col("Age", "string", "Age", 0), col("Containers", "string", "Names of each container in the template.", 1),
			col("Images", "string", "Images referenced by each container in the template.", 1), col("Selector", "string", "Label selector for pods.", 1),
		},
		cells: func(o runtime.Object) []any {
			d := o.(*appsv1.Deployment)
			want := int32(1)
			if d.Spec.Replicas != nil {
				want = *d.Spec.Replicas
			}
			names, images := containerColumns(d.Spec.Template.Spec.Containers)
			sel, _ := metav1.LabelSelectorAsSelector(d.Spec.Selector)
			s := "<none>"
			if sel != nil && !sel.Empty() {
				s = sel.String()
			}
			return []any{d.Name, fmt.Sprintf("%d/%d", d.Status.ReadyReplicas, want), int64(d.Status.UpdatedReplicas), int64(d.Status.AvailableReplicas), age(d), names, images, s}
		},
	},
	"nodes": {
		columns: []metav1.TableColumnDefinition{
			col("Name", "string", "Name", 0), col("Status", "string", "The status of the node", 0), col("Roles", "string", "The roles of the node", 0),
			col("Age", "string", "Age", 0), col("Version", "string", "Kubelet Version reported by the node.", 0),
			col("Internal-IP", "string", "List of internal IPs", 1), col("External-IP", "string", "List of external IPs", 1),
			col("OS-Image", "string", "OS Image reported by the node", 1), col("Kernel-Version", "string", "Kernel version reported by the node", 1),
			col("Container-Runtime", "string", "Container runtime version", 1),
		},
		cells: func(o runtime.Object) []any {
			n := o.(*corev1.Node)
			status := "Unknown"
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady {
					if c.Status == corev1.ConditionTrue {
						status = "Ready"
					} else {
						status = "NotReady"
					}
				}
			}
			if n.Spec.Unschedulable {
				status += ",SchedulingDisabled"
			}
			var roles []string
			for k := range n.Labels {
				if r, ok := strings.CutPrefix(k, "node-role.kubernetes.io/"); ok && r != "" {
					roles = append(roles, r)
				}
			}
			sort.Strings(roles)
			var in, ext []string
			for _, a := range n.Status.Addresses {
				switch a.Type {
				case corev1.NodeInternalIP:
					in = append(in, a.Address)
				case corev1.NodeExternalIP:
					ext = append(ext, a.Address)
				}
			}
			ni := n.Status.NodeInfo
			return []any{n.Name, status, orNone(strings.Join(roles, ",")), age(n), ni.KubeletVersion, orNone(strings.Join(in, ",")), orNone(strings.Join(ext, ",")), orNone(ni.OSImage), orNone(ni.KernelVersion), orNone(ni.ContainerRuntimeVersion)}
		},
	},
}

func containerColumns(cs []corev1.Container) (string, string) {
	var names, images []string
	for _, c := range cs {
		names, images = append(names, c.Name), append(images, c.Image)
	}
	return strings.Join(names, ","), strings.Join(images, ",")
}

func selectorString(sel map[string]string) string {
	keys := make([]string, 0, len(sel))
	for k := range sel {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + sel[k]
	}
	return strings.Join(parts, ",")
}

func readinessGates(p *corev1.Pod) string {
	if len(p.Spec.ReadinessGates) == 0 {
		return "<none>"
	}
	ok := 0
	for _, g := range p.Spec.ReadinessGates {
		for _, c := range p.Status.Conditions {
			if c.Type == g.ConditionType && c.Status == corev1.ConditionTrue {
				ok++
			}
		}
	}
	return fmt.Sprintf("%d/%d", ok, len(p.Spec.ReadinessGates))
}

// podStatusReason is the STATUS column: the phase, or the reason a
// container is waiting or terminated, or Terminating.
func podStatusReason(p *corev1.Pod) string {
	reason := string(p.Status.Phase)
	if p.Status.Reason != "" {
		reason = p.Status.Reason
	}
	for i := len(p.Status.InitContainerStatuses) - 1; i >= 0; i-- {
		cs := p.Status.InitContainerStatuses[i]
		switch {
		case cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0:
			continue
		case cs.State.Terminated != nil:
			return "Init:" + orDefault(cs.State.Terminated.Reason, fmt.Sprintf("ExitCode:%d", cs.State.Terminated.ExitCode))
		case cs.State.Waiting != nil && cs.State.Waiting.Reason != "" && cs.State.Waiting.Reason != "PodInitializing":
			return "Init:" + cs.State.Waiting.Reason
		default:
			return fmt.Sprintf("Init:%d/%d", i, len(p.Spec.InitContainers))
		}
	}
	for i := len(p.Status.ContainerStatuses) - 1; i >= 0; i-- {
		cs := p.Status.ContainerStatuses[i]
		if cs.State.Waiting != nil && cs.State.Waiting.Reason != "" {
			reason = cs.State.Waiting.Reason
		} else if cs.State.Terminated != nil && cs.State.Terminated.Reason != "" {
			reason = cs.State.Terminated.Reason
		}
	}
	if p.DeletionTimestamp != nil {
		reason = "Terminating"
	}
	return reason
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

var defaultPrinter = printer{
	columns: []metav1.TableColumnDefinition{
		col("Name", "string", "Name must be unique within a namespace.", 0),
		{Name: "Created At", Type: "date", Description: "CreationTimestamp is a timestamp representing the server time when this object was created."},
	},
	cells: func(o runtime.Object) []any {
		m, _ := metaOf(o)
		return []any{m.GetName(), m.GetCreationTimestamp().UTC().Format(time.RFC3339)}
	},
}

// table renders objects as a server-side Table. includeObject=None|
// Metadata|Object says what each row carries (Metadata by default).
func (s *Server) table(r *http.Request, res *resource, objs []runtime.Object, rv, cont string) (*metav1.Table, error) {
	p, ok := printers[res.gvr.Resource]
	if !ok || res.gvr.Group != groupOfPrinter(res.gvr.Resource) {
		p = defaultPrinter
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
	t := &metav1.Table{TypeMeta: metav1.TypeMeta{Kind: "Table", APIVersion: "meta.k8s.io/v1"}, ColumnDefinitions: p.columns}
	t.ResourceVersion, t.Continue = rv, cont
	t.Rows = make([]metav1.TableRow, 0, len(objs))
	for _, o := range objs {
		row := metav1.TableRow{Cells: p.cells(o)}
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

// groupOfPrinter keeps a printer to its own group: "events" in core and in
// events.k8s.io print differently.
func groupOfPrinter(resource string) string {
	if resource == "deployments" {
		return "apps"
	}
	return ""
}
