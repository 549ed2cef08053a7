// Package replication is the ReplicationController manager, as
// kube-controller-manager's: the ReplicaSet controller
// (controllers/replicaset) run over ReplicationControllers converted to
// ReplicaSets, their equality selectors read as matchLabels. Pods get a
// v1 ReplicationController as their controller; events come from
// "replication-controller".
//
// It owns the conversion only: what is kept, adopted, released and
// reported is the ReplicaSet controller's. Like it, it must not touch a
// ReplicationController's spec.
package replication

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"bonsai.dev/bonsai/controllers/replicaset"
)

// Config is the ReplicaSet controller's; Owners is set here.
type Config = replicaset.Config

// New builds the manager over cfg's shared informers; Run starts it.
func New(cfg Config) (*replicaset.Controller, error) {
	if cfg.Client != nil && cfg.Informers != nil {
		rcs := cfg.Client.Core.ReplicationControllers
		cfg.Owners = &replicaset.Owners{
			Kind:      corev1.SchemeGroupVersion.WithKind("ReplicationController"),
			Component: "replication-controller",
			Informer:  cfg.Informers.For(&corev1.ReplicationController{}),
			AsReplicaSet: func(obj any) (*appsv1.ReplicaSet, bool) {
				rc, ok := obj.(*corev1.ReplicationController)
				if !ok {
					return nil, false
				}
				return toReplicaSet(rc), true
			},
			Get: func(ctx context.Context, namespace, name string) (*appsv1.ReplicaSet, error) {
				rc, err := rcs(namespace).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return nil, err
				}
				return toReplicaSet(rc), nil
			},
			UpdateStatus: func(ctx context.Context, rs *appsv1.ReplicaSet) (*appsv1.ReplicaSet, error) {
				rc, err := rcs(rs.Namespace).UpdateStatus(ctx, fromReplicaSet(rs), metav1.UpdateOptions{})
				if err != nil {
					return nil, err
				}
				return toReplicaSet(rc), nil
			},
			EventObject: func(rs *appsv1.ReplicaSet) runtime.Object { return fromReplicaSet(rs) },
		}
	}
	return replicaset.New(cfg)
}

// toReplicaSet is rc as a ReplicaSet, as upstream's conversion makes it.
// It shares rc's maps and template: read only.
func toReplicaSet(rc *corev1.ReplicationController) *appsv1.ReplicaSet {
	rs := &appsv1.ReplicaSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"},
		ObjectMeta: rc.ObjectMeta,
		Spec: appsv1.ReplicaSetSpec{
			Replicas:        rc.Spec.Replicas,
			MinReadySeconds: rc.Spec.MinReadySeconds,
		},
		Status: appsv1.ReplicaSetStatus{
			Replicas:             rc.Status.Replicas,
			FullyLabeledReplicas: rc.Status.FullyLabeledReplicas,
			ReadyReplicas:        rc.Status.ReadyReplicas,
			AvailableReplicas:    rc.Status.AvailableReplicas,
			ObservedGeneration:   rc.Status.ObservedGeneration,
		},
	}
	// An empty selector would select every pod; validation refuses it,
	// and a nil one selects none.
	if len(rc.Spec.Selector) > 0 {
		rs.Spec.Selector = &metav1.LabelSelector{MatchLabels: rc.Spec.Selector}
	}
	if rc.Spec.Template != nil {
		rs.Spec.Template = *rc.Spec.Template
	}
	for _, c := range rc.Status.Conditions {
		rs.Status.Conditions = append(rs.Status.Conditions, appsv1.ReplicaSetCondition{Type: appsv1.ReplicaSetConditionType(c.Type),
			Status: c.Status, LastTransitionTime: c.LastTransitionTime, Reason: c.Reason, Message: c.Message})
	}
	return rs
}

// fromReplicaSet is the ReplicationController rs was converted from,
// with rs's status.
func fromReplicaSet(rs *appsv1.ReplicaSet) *corev1.ReplicationController {
	rc := &corev1.ReplicationController{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ReplicationController"},
		ObjectMeta: rs.ObjectMeta,
		Spec: corev1.ReplicationControllerSpec{
			Replicas:        rs.Spec.Replicas,
			MinReadySeconds: rs.Spec.MinReadySeconds,
			Template:        &rs.Spec.Template,
		},
		Status: corev1.ReplicationControllerStatus{
			Replicas:             rs.Status.Replicas,
			FullyLabeledReplicas: rs.Status.FullyLabeledReplicas,
			ReadyReplicas:        rs.Status.ReadyReplicas,
			AvailableReplicas:    rs.Status.AvailableReplicas,
			ObservedGeneration:   rs.Status.ObservedGeneration,
		},
	}
	if rs.Spec.Selector != nil {
		rc.Spec.Selector = rs.Spec.Selector.MatchLabels
	}
	for _, c := range rs.Status.Conditions {
		rc.Status.Conditions = append(rc.Status.Conditions, corev1.ReplicationControllerCondition{Type: corev1.ReplicationControllerConditionType(c.Type),
			Status: c.Status, LastTransitionTime: c.LastTransitionTime, Reason: c.Reason, Message: c.Message})
	}
	return rc
}
