// Package events holds the kind of events.k8s.io: Events shown from the
// core group's, converted both ways, with their table columns.
package events

import (
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"bonsai.dev/bonsai/apiserver/registry"
	"bonsai.dev/bonsai/apiserver/registry/core"
)

// Kinds are the group's rows of the table of served kinds.
func Kinds() []registry.Kind {
	return []registry.Kind{
		// events.k8s.io/v1 shows the core Events.
		{GVR: registry.GVR("events.k8s.io", "v1", "events"), Kind: "Event", Namespaced: true, ShortNames: []string{"ev"},
			StoredAs: registry.GVR("", "v1", "events"), ToStorage: eventToCore, FromStorage: eventFromCore, Printer: &eventsV1Printer},
	}
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

var eventsV1Printer = registry.Printer{
	Columns: core.EventColumns,
	Cells: func(o runtime.Object) []any {
		e := o.(*eventsv1.Event)
		return core.EventCells(&corev1.Event{
			ObjectMeta:          e.ObjectMeta,
			InvolvedObject:      e.Regarding,
			Reason:              e.Reason,
			Message:             e.Note,
			Source:              e.DeprecatedSource,
			FirstTimestamp:      e.DeprecatedFirstTimestamp,
			LastTimestamp:       e.DeprecatedLastTimestamp,
			Count:               e.DeprecatedCount,
			Type:                e.Type,
			EventTime:           e.EventTime,
			Series:              eventSeries(e.Series),
			ReportingController: e.ReportingController,
			ReportingInstance:   e.ReportingInstance,
		})
	},
}

func eventSeries(s *eventsv1.EventSeries) *corev1.EventSeries {
	if s == nil {
		return nil
	}
	return &corev1.EventSeries{Count: s.Count, LastObservedTime: s.LastObservedTime}
}
