package replicaset

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"bonsai.dev/bonsai/client"
)

// Owners are the objects the controller keeps pods for, seen as
// ReplicaSets. The ReplicaSet controller's are ReplicaSets; the
// ReplicationController manager's (controllers/replication) are
// ReplicationControllers converted on the way in and out, as upstream
// runs its ReplicaSet controller over converted ReplicationControllers
// rather than keeping a second copy of it.
type Owners struct {
	// Kind is what the pods' controller references name.
	Kind schema.GroupVersionKind
	// Component names the controller: the source of its events, its
	// queue.
	Component string
	// Informer holds the owners, in their own type.
	Informer cache.SharedIndexInformer
	// AsReplicaSet is one of Informer's objects as a ReplicaSet; false
	// for any other type. It may share memory with the cache: read only.
	AsReplicaSet func(obj any) (*appsv1.ReplicaSet, bool)
	// Get reads an owner from the API, not the cache.
	Get func(ctx context.Context, namespace, name string) (*appsv1.ReplicaSet, error)
	// UpdateStatus writes rs's status and returns what was stored.
	UpdateStatus func(ctx context.Context, rs *appsv1.ReplicaSet) (*appsv1.ReplicaSet, error)
	// EventObject is the object the events about rs are recorded on.
	EventObject func(rs *appsv1.ReplicaSet) runtime.Object
	// TerminatingReplicas says whether the kind reports
	// status.terminatingReplicas (a ReplicationController has no such
	// field: setting it would make every sync a write).
	TerminatingReplicas bool
}

// replicaSets are the ReplicaSet controller's Owners.
func replicaSets(cs *client.Clientset, inf *client.Informers) *Owners {
	return &Owners{
		Kind:      appsv1.SchemeGroupVersion.WithKind("ReplicaSet"),
		Component: "replicaset-controller",
		Informer:  inf.For(&appsv1.ReplicaSet{}),
		AsReplicaSet: func(obj any) (*appsv1.ReplicaSet, bool) {
			rs, ok := obj.(*appsv1.ReplicaSet)
			return rs, ok
		},
		Get: func(ctx context.Context, namespace, name string) (*appsv1.ReplicaSet, error) {
			return cs.Apps.ReplicaSets(namespace).Get(ctx, name, metav1.GetOptions{})
		},
		UpdateStatus: func(ctx context.Context, rs *appsv1.ReplicaSet) (*appsv1.ReplicaSet, error) {
			return cs.Apps.ReplicaSets(rs.Namespace).UpdateStatus(ctx, rs, metav1.UpdateOptions{})
		},
		EventObject:         func(rs *appsv1.ReplicaSet) runtime.Object { return rs },
		TerminatingReplicas: true,
	}
}

// cached is the owner namespace/name from the informer's cache.
func (c *Controller) cached(namespace, name string) (*appsv1.ReplicaSet, error) {
	obj, ok, err := c.rsInf.GetIndexer().GetByKey(namespace + "/" + name)
	if err != nil {
		return nil, err
	}
	if ok {
		if rs, ok := c.owners.AsReplicaSet(obj); ok {
			return rs, nil
		}
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: c.owners.Kind.Group, Resource: c.owners.Kind.Kind}, name)
}

// cachedIn are the owners of namespace in the informer's cache.
func (c *Controller) cachedIn(namespace string) []*appsv1.ReplicaSet {
	var out []*appsv1.ReplicaSet
	_ = cache.ListAllByNamespace(c.rsInf.GetIndexer(), namespace, labels.Everything(), func(obj any) {
		if rs, ok := c.owners.AsReplicaSet(obj); ok {
			out = append(out, rs)
		}
	})
	return out
}
