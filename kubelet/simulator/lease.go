package simulator

import (
	"context"
	"hash/fnv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// leaseState is what the simulator keeps of a node's Lease between
// renewals: enough to write the next renewal blind (one PUT, no GET), as
// it is the Lease's only writer. A conflict means someone else wrote it;
// the renewal then reads it first.
type leaseState struct {
	resourceVersion string
	nodeUID         types.UID
	// scheduled is set once the node's renewals are under way this run.
	scheduled bool
}

type leaseStore struct {
	mu sync.Mutex
	m  map[string]leaseState
}

func (l *leaseStore) get(name string) (leaseState, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st, ok := l.m[name]
	return st, ok
}

func (l *leaseStore) set(name string, st leaseState) {
	l.mu.Lock()
	l.m[name] = st
	l.mu.Unlock()
}

// wrote records the version of the node's Lease the simulator just wrote.
func (l *leaseStore) wrote(name, resourceVersion string, nodeUID types.UID) {
	l.set(name, leaseState{resourceVersion: resourceVersion, nodeUID: nodeUID, scheduled: true})
}

func (l *leaseStore) forget(name string) {
	l.mu.Lock()
	delete(l.m, name)
	l.mu.Unlock()
}

// syncLease renews one node's Lease and schedules the next renewal. The
// delaying queue is the renewal timer of every node at once: one heap and
// a pool of workers, not a goroutine and a timer per node.
func (s *Simulator) syncLease(ctx context.Context, name string) error {
	node, ok := s.simulatedNode(name)
	if !ok || !s.heartbeat(node) {
		// Not (or no longer) ours, or heartbeats stopped: no renewal and
		// no next one; nodeChanged queues one when heartbeats restart.
		s.leases.forget(name)
		return nil
	}
	if st, ok := s.leases.get(name); !ok || !st.scheduled {
		// The first renewal this run waits for the node's phase: 10,000
		// nodes registered at once create their Leases over one interval,
		// not all at once while their status is being posted.
		st.scheduled = true
		s.leases.set(name, st)
		if wait := s.untilPhase(name, s.clock.Now()); wait > 0 {
			s.leaseQ.AddAfter(name, wait)
			return nil
		}
	}
	if err := s.renewLease(ctx, node); err != nil {
		return err
	}
	s.leaseQ.AddAfter(name, s.nextRenewal(name, s.clock.Now()))
	return nil
}

// nextRenewal spreads renewals evenly over the interval: each node renews
// at its own phase of it (a hash of its name), so 10,000 nodes registered
// in the same second do not all write in the same second ten seconds
// later. The wait is between half and one and a half intervals, far inside
// the 40 s lease.
func (s *Simulator) nextRenewal(name string, now time.Time) time.Duration {
	half := s.cfg.LeaseInterval / 2
	return half + s.untilPhase(name, now.Add(half))
}

// untilPhase is the wait from t to the node's next phase, less than an
// interval.
func (s *Simulator) untilPhase(name string, t time.Time) time.Duration {
	interval := int64(s.cfg.LeaseInterval)
	h := fnv.New64a()
	h.Write([]byte(name))
	phase := int64(h.Sum64() % uint64(interval))
	return time.Duration(((phase-t.UnixNano())%interval + interval) % interval)
}

// adoptLeases starts the renewals of the simulated nodes' Leases from
// what a previous run left, read in one list: after a restart each
// node's first renewal is one blind PUT, as later ones are, where it was a
// create refused, a read and an update (three requests per node, a
// thousand nodes renewing in the first seconds of the restart). A Lease
// another holder took, or of a Node since replaced, is read first, never
// created. Without the list (an error), every renewal finds its Lease as
// before.
func (s *Simulator) adoptLeases(ctx context.Context) {
	leases, err := s.api.listLeases(ctx)
	if err != nil {
		s.log.Warn("listing node leases; each node reads its own", "err", err)
		return
	}
	for _, l := range leases {
		node, ok := s.simulatedNode(l.Name)
		if !ok {
			continue
		}
		if _, seen := s.leases.get(l.Name); seen {
			continue
		}
		// Known to exist: a Lease that is not the node's own (no
		// owner UID to match) is read before it is written, never
		// created.
		st := leaseState{resourceVersion: l.ResourceVersion}
		if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == node.Name {
			for _, o := range l.OwnerReferences {
				if o.Kind == "Node" && o.UID == node.UID {
					st.nodeUID = node.UID
				}
			}
		}
		s.leases.set(l.Name, st)
	}
}

// renewLease writes the node's Lease: one blind PUT over the version the
// simulator last wrote (or adopted), else a create (a node new to this
// run), else a read and an update (someone else wrote it).
func (s *Simulator) renewLease(ctx context.Context, node *nodeView) error {
	now := metav1.NewMicroTime(s.clock.Now())
	st, _ := s.leases.get(node.Name)
	switch {
	case st.resourceVersion != "" && st.nodeUID == node.UID:
		lease := s.lease(node, now)
		lease.ResourceVersion = st.resourceVersion
		out, err := s.api.updateLease(ctx, lease)
		if err == nil {
			s.leases.wrote(node.Name, out.ResourceVersion, node.UID)
			return nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return err
		}
	case st.resourceVersion == "":
		out, err := s.api.createLease(ctx, s.lease(node, now))
		if err == nil {
			s.leases.wrote(node.Name, out.ResourceVersion, node.UID)
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	cur, err := s.api.getLease(ctx, node.Name)
	if apierrors.IsNotFound(err) {
		out, err := s.api.createLease(ctx, s.lease(node, now))
		if err != nil {
			return err
		}
		s.leases.wrote(node.Name, out.ResourceVersion, node.UID)
		return nil
	}
	if err != nil {
		return err
	}
	want := s.lease(node, now)
	cur.Spec = want.Spec
	cur.OwnerReferences = want.OwnerReferences
	out, err := s.api.updateLease(ctx, cur)
	if err != nil {
		return err
	}
	s.leases.wrote(node.Name, out.ResourceVersion, node.UID)
	return nil
}

// lease is the Lease a kubelet keeps for its node, owned by the Node so
// that deleting the Node removes it.
func (s *Simulator) lease(node *nodeView, now metav1.MicroTime) *coordinationv1.Lease {
	holder := node.Name
	seconds := max(int32(s.cfg.LeaseDuration/time.Second), 1)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: node.Name, Namespace: corev1.NamespaceNodeLease,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}},
		},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &seconds, RenewTime: &now},
	}
}
