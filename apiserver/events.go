package apiserver

import (
	"time"

	"bonsai.dev/bonsai/store"
)

// Events exist once, stored as core/v1 Events; events.k8s.io/v1 is another
// view of the same objects, converted field by field as Kubernetes'
// conversion does. An event written through either API shows in both.

// DefaultEventTTL is how long an Event lives after its last write unless
// told otherwise: kube-apiserver's --event-ttl default.
const DefaultEventTTL = time.Hour

// EventExpiry is the store rule that makes Events (of both APIs: they are
// stored once) expire ttl after their last write, as kube-apiserver's
// --event-ttl does with an etcd lease on every Event write. The store
// deletes an expired Event as any delete: watchers of either API see it
// go. The store is opened with it (cmd/bonsai: --event-ttl).
func EventExpiry(ttl time.Duration) store.ExpiryRule {
	return store.ExpiryRule{Prefix: store.ObjectKey{Resource: "events"}.ResourcePrefix(), TTL: ttl}
}
