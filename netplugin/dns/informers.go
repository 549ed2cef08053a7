package dns

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"

	"bonsai.dev/bonsai/client"
)

// indexBuilder keeps the zone index in step with the informers: any event
// on a Service or on one of its EndpointSlices rebuilds that Service's
// records from the informers' current state (level-triggered, so the
// order in which Service and slice events arrive does not matter).
type indexBuilder struct {
	index    *zoneIndex
	zone     string
	log      *slog.Logger
	services cache.Indexer
	slices   cache.Indexer
	regs     []cache.ResourceEventHandlerRegistration

	// mu serialises rebuilds: handlers of different informers run
	// concurrently.
	mu sync.Mutex
}

func newIndexBuilder(inf *client.Informers, index *zoneIndex, zone string, log *slog.Logger) (*indexBuilder, error) {
	svcInf := inf.For(&corev1.Service{})
	sliceInf := inf.For(&discoveryv1.EndpointSlice{})
	nsInf := inf.For(&corev1.Namespace{})
	if err := client.IndexSlicesByService(sliceInf); err != nil {
		return nil, fmt.Errorf("dns: index EndpointSlices by Service: %w", err)
	}
	b := &indexBuilder{index: index, zone: zone, log: log, services: svcInf.GetIndexer(), slices: sliceInf.GetIndexer()}
	onService := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			b.sync(key)
		}
	}
	onSlice := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			return
		}
		if name := s.Labels[discoveryv1.LabelServiceName]; name != "" {
			b.sync(s.Namespace + "/" + name)
		}
	}
	onNamespace := func(obj any, exists bool) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if ns, ok := obj.(*corev1.Namespace); ok {
			index.setNamespace(ns.Name, exists)
		}
	}
	for _, h := range []struct {
		inf     cache.SharedIndexInformer
		handler cache.ResourceEventHandlerFuncs
	}{
		{svcInf, cache.ResourceEventHandlerFuncs{AddFunc: onService, UpdateFunc: func(_, o any) { onService(o) }, DeleteFunc: onService}},
		{sliceInf, cache.ResourceEventHandlerFuncs{
			AddFunc: onSlice, DeleteFunc: onSlice,
			// A slice can move to another Service by relabelling: rebuild both.
			UpdateFunc: func(old, o any) { onSlice(old); onSlice(o) },
		}},
		{nsInf, cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { onNamespace(o, true) },
			UpdateFunc: func(_, o any) { onNamespace(o, true) },
			DeleteFunc: func(o any) { onNamespace(o, false) },
		}},
	} {
		reg, err := h.inf.AddEventHandler(h.handler)
		if err != nil {
			return nil, fmt.Errorf("dns: informer handler: %w", err)
		}
		b.regs = append(b.regs, reg)
	}
	return b, nil
}

// sync rebuilds the records of the Service key (namespace/name).
func (b *indexBuilder) sync(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	obj, exists, err := b.services.GetByKey(key)
	if err != nil || !exists {
		b.index.setService(key, nil)
		return
	}
	svc := obj.(*corev1.Service)
	objs, err := b.slices.ByIndex(client.SliceServiceIndex, key)
	if err != nil {
		b.log.Error("cluster DNS: listing EndpointSlices", "service", key, "err", err)
		return
	}
	mine := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		mine = append(mine, o.(*discoveryv1.EndpointSlice))
	}
	b.index.setService(key, buildService(svc, mine, b.zone, b.index.ttl))
}

// waitSynced waits until every handler has seen its informer's initial
// list; false if ctx ended first.
func (b *indexBuilder) waitSynced(ctx context.Context) bool {
	synced := make([]cache.InformerSynced, len(b.regs))
	for i, r := range b.regs {
		synced[i] = r.HasSynced
	}
	return cache.WaitForCacheSync(ctx.Done(), synced...)
}
