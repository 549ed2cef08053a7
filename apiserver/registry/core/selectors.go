package core

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Field selector labels each kind supports beyond metadata.name and
// metadata.namespace, as kube-apiserver's per-kind GetAttrs define them.
var (
	fieldsPod = map[string]func(runtime.Object) string{
		"spec.nodeName":           func(o runtime.Object) string { return o.(*corev1.Pod).Spec.NodeName },
		"spec.restartPolicy":      func(o runtime.Object) string { return string(o.(*corev1.Pod).Spec.RestartPolicy) },
		"spec.schedulerName":      func(o runtime.Object) string { return o.(*corev1.Pod).Spec.SchedulerName },
		"spec.serviceAccountName": func(o runtime.Object) string { return o.(*corev1.Pod).Spec.ServiceAccountName },
		"spec.hostNetwork":        func(o runtime.Object) string { return strconv.FormatBool(o.(*corev1.Pod).Spec.HostNetwork) },
		"status.phase":            func(o runtime.Object) string { return string(o.(*corev1.Pod).Status.Phase) },
		"status.podIP":            func(o runtime.Object) string { return o.(*corev1.Pod).Status.PodIP },
		"status.nominatedNodeName": func(o runtime.Object) string {
			return o.(*corev1.Pod).Status.NominatedNodeName
		},
	}
	fieldsEvent = map[string]func(runtime.Object) string{
		"involvedObject.kind":            func(o runtime.Object) string { return o.(*corev1.Event).InvolvedObject.Kind },
		"involvedObject.namespace":       func(o runtime.Object) string { return o.(*corev1.Event).InvolvedObject.Namespace },
		"involvedObject.name":            func(o runtime.Object) string { return o.(*corev1.Event).InvolvedObject.Name },
		"involvedObject.uid":             func(o runtime.Object) string { return string(o.(*corev1.Event).InvolvedObject.UID) },
		"involvedObject.apiVersion":      func(o runtime.Object) string { return o.(*corev1.Event).InvolvedObject.APIVersion },
		"involvedObject.resourceVersion": func(o runtime.Object) string { return o.(*corev1.Event).InvolvedObject.ResourceVersion },
		"involvedObject.fieldPath":       func(o runtime.Object) string { return o.(*corev1.Event).InvolvedObject.FieldPath },
		"reason":                         func(o runtime.Object) string { return o.(*corev1.Event).Reason },
		"reportingComponent":             func(o runtime.Object) string { return o.(*corev1.Event).ReportingController },
		"source":                         func(o runtime.Object) string { return o.(*corev1.Event).Source.Component },
		"type":                           func(o runtime.Object) string { return o.(*corev1.Event).Type },
	}
	fieldsSecret = map[string]func(runtime.Object) string{
		"type": func(o runtime.Object) string { return string(o.(*corev1.Secret).Type) },
	}
	fieldsNode = map[string]func(runtime.Object) string{
		"spec.unschedulable": func(o runtime.Object) string { return strconv.FormatBool(o.(*corev1.Node).Spec.Unschedulable) },
	}
	fieldsNamespace = map[string]func(runtime.Object) string{
		"status.phase": func(o runtime.Object) string { return string(o.(*corev1.Namespace).Status.Phase) },
	}
)
