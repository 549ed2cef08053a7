package authz

import (
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels and annotations of the default policy, as Kubernetes sets them.
const (
	// AutoUpdateAnnotation "false" on a default role or binding stops the
	// server from adding what it misses on start.
	AutoUpdateAnnotation = "rbac.authorization.kubernetes.io/autoupdate"
	BootstrappingLabel   = "kubernetes.io/bootstrapping"
	aggregateToAdmin     = "rbac.authorization.k8s.io/aggregate-to-admin"
	aggregateToEdit      = "rbac.authorization.k8s.io/aggregate-to-edit"
	aggregateToView      = "rbac.authorization.k8s.io/aggregate-to-view"
)

// Identities of bonsai's in-process components besides those Kubernetes
// names (system:kube-scheduler, system:kube-controller-manager,
// system:kube-proxy, system:node:<name>).
const (
	UserSimulator = "system:bonsai-simulator"
	UserDNS       = "system:bonsai-dns"
	UserNetpol    = "system:bonsai-netpol"
	UserIngress   = "system:bonsai-ingress"
	// GroupDefaultNodeToken is the extra group of the bootstrap tokens
	// `bonsai token create` makes by default: agents join with them.
	GroupDefaultNodeToken = "system:bootstrappers:bonsai:default-node-token"
)

var (
	readVerbs  = []string{"get", "list", "watch"}
	writeVerbs = []string{"create", "delete", "deletecollection", "patch", "update"}
	rwVerbs    = []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
)

func rule(verbs []string, group string, resources ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: verbs, APIGroups: []string{group}, Resources: resources}
}

func urls(verbs []string, paths ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: verbs, NonResourceURLs: paths}
}

func clusterRole(name string, labels map[string]string, rules ...rbacv1.PolicyRule) *rbacv1.ClusterRole {
	l := map[string]string{BootstrappingLabel: "rbac-defaults"}
	for k, v := range labels {
		l[k] = v
	}
	return &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l, Annotations: map[string]string{AutoUpdateAnnotation: "true"}},
		Rules:      rules,
	}
}

func aggregated(name, label string) *rbacv1.ClusterRole {
	r := clusterRole(name, nil)
	r.AggregationRule = &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{label: "true"}}}}
	return r
}

// DefaultClusterRoles are the ClusterRoles every Kubernetes cluster has
// from the start, with the rules of kube-apiserver's bootstrap policy
// for what bonsai serves, and the roles of bonsai's own components.
func DefaultClusterRoles() []*rbacv1.ClusterRole {
	get := []string{"get"}
	admin := aggregated("admin", aggregateToAdmin)
	edit := aggregated("edit", aggregateToEdit)
	edit.Labels[aggregateToAdmin] = "true"
	view := aggregated("view", aggregateToView)
	view.Labels[aggregateToEdit] = "true"
	return []*rbacv1.ClusterRole{
		clusterRole("cluster-admin", nil,
			rbacv1.PolicyRule{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}},
			urls([]string{"*"}, "*")),
		clusterRole("system:discovery", nil,
			urls(get, "/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz", "/version", "/version/")),
		clusterRole("system:public-info-viewer", nil,
			urls(get, "/healthz", "/livez", "/readyz", "/version", "/version/")),
		clusterRole("system:basic-user", nil,
			rule([]string{"create"}, "authorization.k8s.io", "selfsubjectaccessreviews", "selfsubjectrulesreviews"),
			rule([]string{"create"}, "authentication.k8s.io", "selfsubjectreviews")),
		// Aggregated API servers delegate authentication and
		// authorization back to the API server with it.
		clusterRole("system:auth-delegator", nil,
			rule([]string{"create"}, "authentication.k8s.io", "tokenreviews"),
			rule([]string{"create"}, "authorization.k8s.io", "subjectaccessreviews")),
		clusterRole("system:monitoring", nil,
			urls(get, "/healthz", "/healthz/*", "/livez", "/livez/*", "/metrics", "/metrics/slis", "/readyz", "/readyz/*")),
		clusterRole("system:service-account-issuer-discovery", nil,
			urls(get, "/.well-known/openid-configuration", "/.well-known/openid-configuration/", "/openid/v1/jwks", "/openid/v1/jwks/")),
		admin, edit, view,
		clusterRole("system:aggregate-to-admin", map[string]string{aggregateToAdmin: "true"},
			rule([]string{"create"}, "authorization.k8s.io", "localsubjectaccessreviews"),
			rule(rwVerbs, "rbac.authorization.k8s.io", "rolebindings", "roles")),
		clusterRole("system:aggregate-to-edit", map[string]string{aggregateToEdit: "true"},
			rule(readVerbs, "", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy", "secrets", "services/proxy"),
			rule([]string{"impersonate"}, "", "serviceaccounts"),
			rule(writeVerbs, "", "pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"),
			rule([]string{"create"}, "", "pods/eviction"),
			rule(writeVerbs, "", "configmaps", "events", "persistentvolumeclaims", "replicationcontrollers", "replicationcontrollers/scale", "secrets", "serviceaccounts", "services", "services/proxy"),
			rule([]string{"create"}, "", "serviceaccounts/token"),
			rule(writeVerbs, "apps", "daemonsets", "deployments", "deployments/rollback", "deployments/scale", "replicasets", "replicasets/scale", "statefulsets", "statefulsets/scale"),
			rule(writeVerbs, "autoscaling", "horizontalpodautoscalers"),
			rule(writeVerbs, "batch", "cronjobs", "jobs"),
			rule(writeVerbs, "policy", "poddisruptionbudgets"),
			rule(writeVerbs, "networking.k8s.io", "ingresses", "networkpolicies"),
			rule(writeVerbs, "coordination.k8s.io", "leases")),
		// metrics-server's, for kubectl top: the metrics API is built in.
		clusterRole("system:aggregated-metrics-reader", map[string]string{aggregateToView: "true", aggregateToEdit: "true", aggregateToAdmin: "true"},
			rule([]string{"get", "list", "watch"}, "metrics.k8s.io", "pods", "nodes")),
		clusterRole("system:aggregate-to-view", map[string]string{aggregateToView: "true"},
			rule(readVerbs, "", "configmaps", "endpoints", "persistentvolumeclaims", "persistentvolumeclaims/status", "pods", "replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts", "services", "services/status"),
			rule(readVerbs, "", "bindings", "events", "limitranges", "namespaces/status", "pods/log", "pods/status", "replicationcontrollers/status", "resourcequotas", "resourcequotas/status"),
			rule(readVerbs, "", "namespaces"),
			rule(readVerbs, "discovery.k8s.io", "endpointslices"),
			rule(readVerbs, "apps", "controllerrevisions", "daemonsets", "daemonsets/status", "deployments", "deployments/scale", "deployments/status", "replicasets", "replicasets/scale", "replicasets/status", "statefulsets", "statefulsets/scale", "statefulsets/status"),
			rule(readVerbs, "autoscaling", "horizontalpodautoscalers", "horizontalpodautoscalers/status"),
			rule(readVerbs, "batch", "cronjobs", "cronjobs/status", "jobs", "jobs/status"),
			rule(readVerbs, "policy", "poddisruptionbudgets", "poddisruptionbudgets/status"),
			rule(readVerbs, "networking.k8s.io", "ingresses", "ingresses/status", "networkpolicies"),
			rule(readVerbs, "coordination.k8s.io", "leases")),
		clusterRole("system:node", nil, NodeRules()...),
		// Full use of the kubelet API through nodes/proxy and the like.
		clusterRole("system:kubelet-api-admin", nil,
			rule(readVerbs, "", "nodes"),
			rule([]string{"proxy"}, "", "nodes"),
			rule([]string{"*"}, "", "nodes/proxy", "nodes/metrics", "nodes/stats", "nodes/log")),
		clusterRole("system:node-proxier", nil,
			rule([]string{"list", "watch"}, "", "endpoints", "services"),
			rule(readVerbs, "", "nodes"),
			rule([]string{"create", "patch", "update"}, "", "events"),
			rule([]string{"create", "patch", "update"}, "events.k8s.io", "events"),
			rule([]string{"list", "watch"}, "discovery.k8s.io", "endpointslices"),
			rule([]string{"update", "patch"}, "", "services/status")),
		clusterRole("system:kube-dns", nil,
			rule([]string{"list", "watch"}, "", "endpoints", "services")),
		// What CoreDNS's published manifest grants it: bonsai's cluster
		// DNS serves the same records.
		clusterRole("system:coredns", nil,
			rule([]string{"list", "watch"}, "", "endpoints", "services", "pods", "namespaces"),
			rule([]string{"list", "watch"}, "discovery.k8s.io", "endpointslices")),
		clusterRole("system:kube-scheduler", nil,
			rule([]string{"create", "patch", "update"}, "", "events"),
			rule([]string{"create", "patch", "update"}, "events.k8s.io", "events"),
			rule([]string{"create"}, "coordination.k8s.io", "leases"),
			rbacv1.PolicyRule{Verbs: []string{"get", "update"}, APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{"kube-scheduler"}},
			rule(readVerbs, "", "nodes"),
			rule([]string{"delete", "get", "list", "watch"}, "", "pods"),
			rule([]string{"create"}, "", "bindings", "pods/binding"),
			rule([]string{"patch", "update"}, "", "pods/status"),
			rule(readVerbs, "", "replicationcontrollers", "services"),
			rule(readVerbs, "apps", "replicasets", "statefulsets"),
			rule(readVerbs, "policy", "poddisruptionbudgets"),
			rule(readVerbs, "", "persistentvolumeclaims", "persistentvolumes"),
			rule([]string{"create"}, "authentication.k8s.io", "tokenreviews"),
			rule([]string{"create"}, "authorization.k8s.io", "subjectaccessreviews"),
			rule(readVerbs, "storage.k8s.io", "csinodes"),
			rule(readVerbs, "", "namespaces"),
			rule(readVerbs, "storage.k8s.io", "csidrivers", "csistoragecapacities"),
			// Dynamic resource allocation: the scheduler allocates
			// devices and records the allocation in the claim's status.
			rule(readVerbs, "resource.k8s.io", "deviceclasses", "resourceclaims", "resourceslices", "devicetaintrules"),
			rule([]string{"patch", "update"}, "resource.k8s.io", "resourceclaims", "resourceclaims/status")),
		clusterRole("system:volume-scheduler", nil,
			rule([]string{"get", "list", "patch", "update", "watch"}, "", "persistentvolumes"),
			rule(readVerbs, "storage.k8s.io", "storageclasses"),
			rule([]string{"get", "list", "patch", "update", "watch"}, "", "persistentvolumeclaims")),
		clusterRole("system:kube-controller-manager", nil,
			rule([]string{"create", "patch", "update"}, "", "events"),
			rule([]string{"create", "patch", "update"}, "events.k8s.io", "events"),
			rule([]string{"create"}, "coordination.k8s.io", "leases"),
			rbacv1.PolicyRule{Verbs: []string{"get", "update"}, APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{"kube-controller-manager"}},
			rule([]string{"create"}, "", "secrets", "serviceaccounts"),
			rule([]string{"delete"}, "", "secrets"),
			rule(get, "", "configmaps", "namespaces", "secrets", "serviceaccounts"),
			rule([]string{"update"}, "", "secrets", "serviceaccounts"),
			rule([]string{"create"}, "authentication.k8s.io", "tokenreviews"),
			rule([]string{"create"}, "authorization.k8s.io", "subjectaccessreviews"),
			rule([]string{"list", "watch"}, "*", "*"),
			rule([]string{"create"}, "", "serviceaccounts/token")),
		// kube-controller-manager runs every controller with its own
		// credentials when it does not use per-controller service
		// accounts, and then needs the union of their roles: the garbage
		// collector and namespace controller read, update and delete
		// every kind; the others create what they own.
		clusterRole("system:bonsai:controllers", nil,
			rule([]string{"get", "list", "watch", "patch", "update", "delete", "deletecollection"}, "*", "*"),
			rule([]string{"create"}, "", "pods", "pods/eviction", "pods/binding", "events", "endpoints", "services", "serviceaccounts", "serviceaccounts/token", "secrets", "configmaps", "persistentvolumes", "persistentvolumeclaims"),
			rule([]string{"create"}, "apps", "replicasets", "controllerrevisions"),
			rule([]string{"create"}, "batch", "jobs"),
			rule([]string{"create"}, "discovery.k8s.io", "endpointslices"),
			rule([]string{"create"}, "events.k8s.io", "events"),
			rule([]string{"create"}, "resource.k8s.io", "resourceclaims"),
			rule([]string{"create"}, "coordination.k8s.io", "leases"),
			// The local-path provisioner's default StorageClass.
			// and the attach/detach controller's VolumeAttachments.
			rule([]string{"create"}, "storage.k8s.io", "storageclasses", "volumeattachments"),
			// The clusterrole-aggregation controller writes rules it
			// need not hold.
			rule([]string{"escalate"}, "rbac.authorization.k8s.io", "clusterroles")),
		// The network policy enforcer of a node: what a policy selects
		// and allows depends on every pod and namespace of the cluster.
		clusterRole("system:bonsai:netpol", nil,
			rule([]string{"list", "watch"}, "", "pods", "namespaces"),
			rule([]string{"list", "watch"}, "networking.k8s.io", "networkpolicies")),
		// The built-in Ingress controller: what it routes to, the TLS
		// Secrets it serves, its IngressClass, the status of what it
		// serves and Warning events on what it cannot.
		clusterRole("system:bonsai:ingress", nil,
			rule(readVerbs, "networking.k8s.io", "ingresses", "ingressclasses"),
			rule([]string{"create"}, "networking.k8s.io", "ingressclasses"),
			rule([]string{"update"}, "networking.k8s.io", "ingresses/status"),
			rule(readVerbs, "", "services", "secrets", "nodes"),
			rule(readVerbs, "discovery.k8s.io", "endpointslices"),
			rule([]string{"create", "patch", "update"}, "", "events"),
			rule([]string{"create", "patch", "update"}, "events.k8s.io", "events")),
		// Kubelet TLS bootstrap, as upstream's roles: a bootstrap token
		// asks for a client certificate, which the csrapproving
		// controller approves for who may create nodeclient; a node
		// renews its own with selfnodeclient.
		clusterRole("system:node-bootstrapper", nil,
			rule([]string{"create", "get", "list", "watch"}, "certificates.k8s.io", "certificatesigningrequests")),
		clusterRole("system:certificates.k8s.io:certificatesigningrequests:nodeclient", nil,
			rule([]string{"create"}, "certificates.k8s.io", "certificatesigningrequests/nodeclient")),
		clusterRole("system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", nil,
			rule([]string{"create"}, "certificates.k8s.io", "certificatesigningrequests/selfnodeclient")),
		// The csrapproving and csrsigning controllers: which signers
		// they approve for and sign as.
		clusterRole("system:bonsai:certificate-controller", nil,
			rbacv1.PolicyRule{Verbs: []string{"approve"}, APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"signers"},
				ResourceNames: []string{"kubernetes.io/kube-apiserver-client-kubelet", "kubernetes.io/kubelet-serving"}},
			rbacv1.PolicyRule{Verbs: []string{"sign"}, APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"signers"},
				ResourceNames: []string{"kubernetes.io/kube-apiserver-client", "kubernetes.io/kube-apiserver-client-kubelet", "kubernetes.io/kubelet-serving"}},
			rule([]string{"update"}, "certificates.k8s.io", "certificatesigningrequests/approval", "certificatesigningrequests/status")),
		// What the node simulator needs beyond the node role: after a
		// restart it lists the node Leases once instead of reading each.
		clusterRole("system:bonsai:simulator", nil,
			rule([]string{"list"}, "coordination.k8s.io", "leases")),
	}
}

func clusterRoleBinding(name, role string, subjects ...rbacv1.Subject) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{BootstrappingLabel: "rbac-defaults"}, Annotations: map[string]string{AutoUpdateAnnotation: "true"}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   subjects,
	}
}

func user(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}
}

func group(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: name}
}

// DefaultClusterRoleBindings bind the default roles to Kubernetes'
// well-known users and groups and to bonsai's components.
func DefaultClusterRoleBindings() []*rbacv1.ClusterRoleBinding {
	return []*rbacv1.ClusterRoleBinding{
		clusterRoleBinding("cluster-admin", "cluster-admin", group("system:masters")),
		clusterRoleBinding("system:discovery", "system:discovery", group("system:authenticated")),
		clusterRoleBinding("system:basic-user", "system:basic-user", group("system:authenticated")),
		clusterRoleBinding("system:public-info-viewer", "system:public-info-viewer", group("system:authenticated"), group("system:unauthenticated")),
		clusterRoleBinding("system:monitoring", "system:monitoring", group("system:monitoring")),
		clusterRoleBinding("system:service-account-issuer-discovery", "system:service-account-issuer-discovery", group("system:serviceaccounts")),
		clusterRoleBinding("system:kube-scheduler", "system:kube-scheduler", user("system:kube-scheduler")),
		clusterRoleBinding("system:volume-scheduler", "system:volume-scheduler", user("system:kube-scheduler")),
		clusterRoleBinding("system:kube-controller-manager", "system:kube-controller-manager", user("system:kube-controller-manager")),
		clusterRoleBinding("system:bonsai:controllers", "system:bonsai:controllers", user("system:kube-controller-manager")),
		clusterRoleBinding("system:node-proxier", "system:node-proxier", user("system:kube-proxy")),
		clusterRoleBinding("system:kube-dns", "system:kube-dns", rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "kube-dns", Namespace: "kube-system"}),
		clusterRoleBinding("system:bonsai:dns", "system:coredns", user(UserDNS)),
		clusterRoleBinding("system:bonsai:netpol", "system:bonsai:netpol", user(UserNetpol)),
		clusterRoleBinding("system:bonsai:ingress", "system:bonsai:ingress", user(UserIngress)),
		clusterRoleBinding("system:bonsai:certificate-controller", "system:bonsai:certificate-controller", user("system:kube-controller-manager")),
		// Agents join with tokens of GroupDefaultNodeToken (bonsai token
		// create), as kubeadm binds its default node token's group.
		clusterRoleBinding("system:bonsai:kubelet-bootstrap", "system:node-bootstrapper", group(GroupDefaultNodeToken)),
		clusterRoleBinding("system:bonsai:node-autoapprove-bootstrap", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", group(GroupDefaultNodeToken)),
		clusterRoleBinding("system:bonsai:node-autoapprove-certificate-rotation", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", group("system:nodes")),
		// Simulated nodes are kubelets for many node names at once: they
		// get the node role without the Node authorizer's per-node limits.
		clusterRoleBinding("system:bonsai:simulator", "system:node", user(UserSimulator)),
		clusterRoleBinding("system:bonsai:simulator-leases", "system:bonsai:simulator", user(UserSimulator)),
	}
}
