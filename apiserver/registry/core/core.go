// The core group's rows; their strategies are in strategies.go and
// services.go, defaults in defaults.go, table columns in printers.go and
// field selectors in selectors.go.

package core

import (
	"bonsai.dev/bonsai/apiserver/registry"
)

// Kinds are the core group's rows of the table of served kinds.
func Kinds() []registry.Kind {
	all := []string{"all"}
	return []registry.Kind{
		{GVR: registry.GVR("", "v1", "namespaces"), Kind: "Namespace", ShortNames: []string{"ns"}, Subresources: []string{"status", "finalize"},
			Strategy: namespaceStrategy{}, Defaulter: defaultNamespace, Printer: &namespacePrinter, Fields: fieldsNamespace, NoCollection: true},
		{GVR: registry.GVR("", "v1", "nodes"), Kind: "Node", ShortNames: []string{"no"}, Subresources: []string{"status", "proxy"},
			Strategy: nodeStrategy{}, Printer: &nodePrinter, Fields: fieldsNode},
		{GVR: registry.GVR("", "v1", "pods"), Kind: "Pod", Namespaced: true, ShortNames: []string{"po"}, Categories: all,
			Subresources: []string{"status", "binding", "eviction", "ephemeralcontainers", "log", "exec", "attach", "portforward", "proxy"},
			Strategy:     podStrategy{}, Defaulter: defaultPod, Printer: &podPrinter, ReturnDeleted: true, Fields: fieldsPod},
		// The older form of pods/binding: created, never stored.
		{GVR: registry.GVR("", "v1", "bindings"), Kind: "Binding", Namespaced: true, CreateOnly: true},
		{GVR: registry.GVR("", "v1", "services"), Kind: "Service", Namespaced: true, ShortNames: []string{"svc"}, Categories: all, Subresources: []string{"status", "proxy"},
			Strategy: serviceStrategy{}, Defaulter: defaultServiceObject, Printer: &servicePrinter},
		{GVR: registry.GVR("", "v1", "endpoints"), Kind: "Endpoints", ListKind: "EndpointsList", Singular: "endpoints", Namespaced: true, ShortNames: []string{"ep"},
			Defaulter: defaultEndpoints, Printer: &endpointsPrinter, AllowCreateOnUpdate: true},
		{GVR: registry.GVR("", "v1", "configmaps"), Kind: "ConfigMap", Namespaced: true, ShortNames: []string{"cm"}, Strategy: configMapStrategy{}, Printer: &configMapPrinter},
		{GVR: registry.GVR("", "v1", "secrets"), Kind: "Secret", Namespaced: true, Strategy: secretStrategy{}, Defaulter: defaultSecret, Printer: &secretPrinter, Fields: fieldsSecret},
		{GVR: registry.GVR("", "v1", "serviceaccounts"), Kind: "ServiceAccount", Namespaced: true, ShortNames: []string{"sa"}, Subresources: []string{"token"}, Printer: &serviceAccountPrinter},
		{GVR: registry.GVR("", "v1", "events"), Kind: "Event", Namespaced: true, ShortNames: []string{"ev"}, Printer: &coreEventPrinter, Fields: fieldsEvent},
		// Upstream has no columns of its own for LimitRanges.
		{GVR: registry.GVR("", "v1", "limitranges"), Kind: "LimitRange", Namespaced: true, ShortNames: []string{"limits"}, Defaulter: defaultLimitRangeObject, Printer: registry.DefaultPrinter},
		{GVR: registry.GVR("", "v1", "resourcequotas"), Kind: "ResourceQuota", Namespaced: true, ShortNames: []string{"quota"}, Subresources: []string{"status"}, Printer: &resourceQuotaPrinter},
		{GVR: registry.GVR("", "v1", "podtemplates"), Kind: "PodTemplate", Namespaced: true, Defaulter: defaultPodTemplate, Printer: &podTemplatePrinter},
		{GVR: registry.GVR("", "v1", "persistentvolumes"), Kind: "PersistentVolume", ShortNames: []string{"pv"}, Subresources: []string{"status"},
			Strategy: persistentVolumeStrategy{}, Defaulter: defaultPersistentVolume, Printer: &persistentVolumePrinter},
		{GVR: registry.GVR("", "v1", "persistentvolumeclaims"), Kind: "PersistentVolumeClaim", Namespaced: true, ShortNames: []string{"pvc"}, Subresources: []string{"status"},
			Strategy: claimStrategy{}, Defaulter: defaultPersistentVolumeClaim, Printer: &persistentVolumeClaimPrinter},
		{GVR: registry.GVR("", "v1", "replicationcontrollers"), Kind: "ReplicationController", Namespaced: true, ShortNames: []string{"rc"}, Categories: all, Subresources: []string{"status", "scale"},
			Strategy: replicationControllerStrategy{}, Defaulter: defaultReplicationController, Printer: &replicationControllerPrinter},
	}
}
