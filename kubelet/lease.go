package kubelet

import (
	"context"
	"log/slog"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
)

// Heartbeat timing, as the kubelet's defaults.
const (
	leaseRenewInterval = 10 * time.Second
	leaseDuration      = 40 * time.Second
	leaseRetryFirst    = 200 * time.Millisecond
	leaseRetryMax      = 7 * time.Second
)

// leaseRenewer keeps the node's Lease in kube-node-lease fresh: the
// heartbeat the node lifecycle controller watches. A failed renewal is
// retried with exponential back-off (200 ms doubling to 7 s).
type leaseRenewer struct {
	client   *Client
	nodeName string
	nodeUID  func() (string, bool) // for the Lease's owner reference
	clock    clock.Clock
	log      *slog.Logger
}

// run renews until ctx ends.
func (l *leaseRenewer) run(ctx context.Context) {
	delay := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.clock.After(delay):
		}
		if err := l.renew(ctx); err != nil {
			delay = nextRetry(delay)
			l.log.Warn("node lease renewal failed; retrying", "node", l.nodeName, "in", delay, "err", err)
			continue
		}
		delay = leaseRenewInterval
	}
}

// nextRetry is the back-off after a failure that followed a wait of prev.
func nextRetry(prev time.Duration) time.Duration {
	if prev < leaseRetryFirst || prev >= leaseRenewInterval {
		return leaseRetryFirst
	}
	return min(2*prev, leaseRetryMax)
}

func (l *leaseRenewer) renew(ctx context.Context) error {
	now := metav1.NewMicroTime(l.clock.Now())
	lease, err := l.client.getLease(ctx, l.nodeName)
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: l.nodeName, Namespace: corev1.NamespaceNodeLease},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       &l.nodeName,
				LeaseDurationSeconds: ptr(int32(leaseDuration / time.Second)),
				RenewTime:            &now,
			},
		}
		l.setOwner(lease)
		_, err = l.client.createLease(ctx, lease)
		return err
	}
	if err != nil {
		return err
	}
	lease.Spec.HolderIdentity = &l.nodeName
	lease.Spec.LeaseDurationSeconds = ptr(int32(leaseDuration / time.Second))
	lease.Spec.RenewTime = &now
	l.setOwner(lease)
	_, err = l.client.updateLease(ctx, lease)
	return err
}

// setOwner makes the Node own its Lease, so deleting the Node removes it.
func (l *leaseRenewer) setOwner(lease *coordinationv1.Lease) {
	uid, ok := l.nodeUID()
	if !ok {
		return
	}
	lease.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: l.nodeName, UID: typesUID(uid)}}
}

func ptr[T any](v T) *T { return &v }
