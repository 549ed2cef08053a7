package apiserver

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/runtime"

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

func eventToCore(in runtime.Object) runtime.Object {
	e := in.(*eventsv1.Event)
	out := &corev1.Event{
		ObjectMeta:          e.ObjectMeta,
		InvolvedObject:      e.Regarding,
		Related:             e.Related,
		Reason:              e.Reason,
		Message:             e.Note,
		Type:                e.Type,
		Action:              e.Action,
		EventTime:           e.EventTime,
		ReportingController: e.ReportingController,
		ReportingInstance:   e.ReportingInstance,
		Source:              e.DeprecatedSource,
		FirstTimestamp:      e.DeprecatedFirstTimestamp,
		LastTimestamp:       e.DeprecatedLastTimestamp,
		Count:               e.DeprecatedCount,
	}
	if s := e.Series; s != nil {
		out.Series = &corev1.EventSeries{Count: s.Count, LastObservedTime: s.LastObservedTime}
	}
	return out
}

func eventFromCore(in runtime.Object) runtime.Object {
	e := in.(*corev1.Event)
	out := &eventsv1.Event{
		ObjectMeta:               e.ObjectMeta,
		Regarding:                e.InvolvedObject,
		Related:                  e.Related,
		Reason:                   e.Reason,
		Note:                     e.Message,
		Type:                     e.Type,
		Action:                   e.Action,
		EventTime:                e.EventTime,
		ReportingController:      e.ReportingController,
		ReportingInstance:        e.ReportingInstance,
		DeprecatedSource:         e.Source,
		DeprecatedFirstTimestamp: e.FirstTimestamp,
		DeprecatedLastTimestamp:  e.LastTimestamp,
		DeprecatedCount:          e.Count,
	}
	if s := e.Series; s != nil {
		out.Series = &eventsv1.EventSeries{Count: s.Count, LastObservedTime: s.LastObservedTime}
	}
	return out
}
