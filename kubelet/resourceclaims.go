package kubelet

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/kubelet/cri"
	"bonsai.dev/bonsai/kubelet/dra"
)

// reasonFailedPrepare is the kubelet's event reason for a pod whose
// ResourceClaims could not be prepared.
const reasonFailedPrepare = "FailedPrepareDynamicResources"

// ClaimGetter reads ResourceClaims through the node's identity, for the
// DRA manager (kubelet/dra).
func ClaimGetter(cfg *rest.Config) (dra.ClaimGetter, error) {
	rc, err := client.REST(cfg, "/apis", resourceapi.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, ns, name string) (*resourceapi.ResourceClaim, error) {
		out := &resourceapi.ResourceClaim{}
		return out, rc.Get().Namespace(ns).Resource("resourceclaims").Name(name).VersionedParams(&metav1.GetOptions{}, metav1.ParameterCodec).Do(ctx).Into(out)
	}, nil
}

// prepareClaims has the pod's ResourceClaims prepared by their DRA
// drivers before its sandbox is made, as the kubelet does before a pod's
// containers start. A failure (driver not registered, prepare error) is a
// FailedPrepareDynamicResources event and the pod waits; the next sync
// tries again. Claims prepared before a restart are not prepared again:
// the manager's checkpoint has them, and a pod whose containers already
// exist and that the checkpoint has is not held back by the API or a
// driver that has not registered again yet.
func (w *podWorker) prepareClaims(ctx context.Context, pod *corev1.Pod, inst map[string][]cri.ContainerStatus) bool {
	dm := w.m.cfg.DRA
	if dm == nil || w.claimsPrepared || len(pod.Spec.ResourceClaims) == 0 {
		return true
	}
	if len(inst) > 0 && slices.Contains(dm.Pods(), pod.UID) {
		w.claimsPrepared = true
		return true
	}
	if err := dm.Prepare(ctx, pod); err != nil {
		msg := "Failed to prepare dynamic resources: " + err.Error()
		w.m.log.Warn("preparing resource claims", "pod", podKey(pod), "err", err)
		w.event(ctx, pod, "", corev1.EventTypeWarning, reasonFailedPrepare, msg)
		return false
	}
	w.claimsPrepared = true
	return true
}

// claimRetry is how soon a pod whose claims could not be prepared tries
// again.
const claimRetry = time.Second

// unprepareClaims has the drivers unprepare the claims no pod of the node
// uses once this one is done.
func (w *podWorker) unprepareClaims(ctx context.Context) error {
	dm := w.m.cfg.DRA
	if dm == nil {
		return nil
	}
	w.claimsPrepared = false
	return dm.Unprepare(ctx, w.uid)
}

// applyClaimDevices adds the CDI devices of the claims the container
// names in resources.claims.
func (w *podWorker) applyClaimDevices(pod *corev1.Pod, c *corev1.Container) []string {
	if dm := w.m.cfg.DRA; dm != nil {
		return dm.CDIDevices(pod, c)
	}
	return nil
}

// retainClaims unprepares the claims of pods this node no longer runs
// (deleted while bonsai was down) and retries failed unprepares.
func (m *podManager) retainClaims(ctx context.Context) {
	if dm := m.cfg.DRA; dm != nil {
		if err := dm.Retain(ctx, func(uid types.UID) bool { return m.known(string(uid)) }); err != nil {
			m.log.Warn("unpreparing resource claims of gone pods", "err", err)
		}
	}
}
