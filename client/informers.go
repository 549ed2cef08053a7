package client

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
)

// Informers shares one informer per kind among the controllers of a
// process, as client-go's SharedInformerFactory does, without linking
// every API group's generated informer into the binary. Each informer
// watches its kind in every namespace and is indexed by namespace.
type Informers struct {
	cfg *rest.Config

	mu       sync.Mutex
	clients  map[schema.GroupVersion]rest.Interface
	m        map[informerKey]cache.SharedIndexInformer
	startCtx context.Context // set once Start ran: later informers start at once
}

// informerKey is a kind and the field selector its informer watches
// with ("" for every object).
type informerKey struct {
	t        reflect.Type
	selector string
}

// NewInformers builds an empty set; For adds informers, Start runs them.
func NewInformers(cfg *rest.Config) *Informers {
	return &Informers{cfg: cfg, clients: map[schema.GroupVersion]rest.Interface{}, m: map[informerKey]cache.SharedIndexInformer{}}
}

// For is the shared informer of obj's kind (a pointer to a built-in type,
// such as &corev1.Pod{}). Add handlers and indexers before Start; an
// informer first asked for after Start starts at once.
func (f *Informers) For(obj runtime.Object) cache.SharedIndexInformer {
	return f.ForFields(obj, fields.Everything())
}

// ForFields is the shared informer of the objects of obj's kind that
// match a field selector, filtered by the API server: a controller that
// needs a few objects of a numerous kind (one ConfigMap name in every
// namespace) neither caches nor decodes the rest.
func (f *Informers) ForFields(obj runtime.Object, selector fields.Selector) cache.SharedIndexInformer {
	key := informerKey{t: reflect.TypeOf(obj), selector: selector.String()}
	f.mu.Lock()
	defer f.mu.Unlock()
	if inf, ok := f.m[key]; ok {
		return inf
	}
	gvks, _, err := scheme.Scheme.ObjectKinds(obj)
	if err != nil || len(gvks) == 0 {
		panic(fmt.Sprintf("client.Informers: %T is not a registered API type", obj))
	}
	gvk := gvks[0]
	rc := f.clients[gvk.GroupVersion()]
	if rc == nil {
		apiPath := "/apis"
		if gvk.Group == "" {
			apiPath = "/api"
		}
		if rc, err = REST(f.cfg, apiPath, gvk.GroupVersion()); err != nil {
			// Only a malformed rest.Config gets here, which every
			// earlier client of the process would have hit first.
			panic(fmt.Sprintf("client.Informers: %v", err))
		}
		f.clients[gvk.GroupVersion()] = rc
	}
	lw := cache.NewListWatchFromClient(rc, resourceOf(gvk), corev1.NamespaceAll, selector)
	if handsOverWatches(f.cfg) {
		resource := resourceOf(gvk)
		lw.WatchFuncWithContext = func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.Watch = true
			opts.FieldSelector = selector.String()
			req := func() *rest.Request {
				return rc.Get().Resource(resource).VersionedParams(&opts, metav1.ParameterCodec)
			}
			return WatchHandedOver(ctx, req(), cacheCopy, req().Watch)
		}
		lw.WatchFunc = func(opts metav1.ListOptions) (watch.Interface, error) {
			return lw.WatchFuncWithContext(context.Background(), opts)
		}
	}
	inf := cache.NewSharedIndexInformer(lw, obj, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	_ = inf.SetTransform(StripManagedFields) // fails only once started
	f.m[key] = inf
	if f.startCtx != nil {
		go inf.RunWithContext(f.startCtx)
	}
	return inf
}

// Watching lists the informers made so far, as "<Kind>" or
// "<Kind> <field selector>", sorted.
func (f *Informers) Watching() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.m))
	for k := range f.m {
		s := k.t.Elem().Name()
		if k.selector != "" {
			s += " " + k.selector
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// resourceOf is the plural resource name of a built-in kind.
func resourceOf(gvk schema.GroupVersionKind) string {
	if gvk.Kind == "Endpoints" {
		return "endpoints"
	}
	plural, _ := meta.UnsafeGuessKindToResource(gvk)
	return plural.Resource
}

// Start runs every informer asked for so far, and any asked for later,
// until ctx ends.
func (f *Informers) Start(ctx context.Context) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.startCtx != nil {
		return
	}
	f.startCtx = ctx
	for _, inf := range f.m {
		go inf.RunWithContext(ctx)
	}
}

// WaitForCacheSync waits until every informer started has listed once;
// false when ctx ended first.
func (f *Informers) WaitForCacheSync(ctx context.Context) bool {
	f.mu.Lock()
	synced := make([]cache.InformerSynced, 0, len(f.m))
	for _, inf := range f.m {
		synced = append(synced, inf.HasSynced)
	}
	f.mu.Unlock()
	return cache.WaitForCacheSync(ctx.Done(), synced...)
}

// NewRecorder is an event recorder for component that writes through
// core until ctx ends.
func NewRecorder(ctx context.Context, core rest.Interface, component string) record.EventRecorder {
	b := record.NewBroadcasterWithCorrelatorOptions(record.CorrelatorOptions{})
	w := b.StartRecordingToSink(&EventSink{Core: core, Ctx: ctx})
	go func() {
		<-ctx.Done()
		w.Stop()
		// Let events queued at shutdown go out, briefly.
		time.Sleep(10 * time.Millisecond)
		b.Shutdown()
	}()
	return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component})
}

// MetadataListWatch lists and watches the metadata of a resource in
// every namespace, for informers of metav1.PartialObjectMetadata; meta
// is a metadata client of cfg.
func MetadataListWatch(cfg *rest.Config, meta metadata.Interface, gvr schema.GroupVersionResource) *cache.ListWatch {
	res := meta.Resource(gvr)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return res.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return res.Watch(ctx, opts)
		},
	}
	if !handsOverWatches(cfg) {
		return lw
	}
	apiPath := "/apis"
	if gvr.Group == "" {
		apiPath = "/api"
	}
	rc, err := REST(cfg, apiPath, gvr.GroupVersion())
	if err != nil {
		return lw
	}
	lw.WatchFuncWithContext = func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		fallback := func(ctx context.Context) (watch.Interface, error) { return res.Watch(ctx, opts) }
		opts.Watch = true
		req := rc.Get().Resource(gvr.Resource).VersionedParams(&opts, metav1.ParameterCodec).SetHeader("Accept", AcceptPartialMetadata)
		return WatchHandedOver(ctx, req, exactCopy, fallback)
	}
	return lw
}

// AcceptPartialMetadata asks for the PartialObjectMetadata of objects, as
// client-go's metadata client does (custom resources have no protobuf).
// The API server answers writes in it too: a client that needs nothing
// of the written object back but its metadata spares the server
// encoding the rest.
const AcceptPartialMetadata = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"

// StripManagedFields is an informer transform that drops what no
// controller reads and a cache of thousands of objects would otherwise
// hold (and the garbage collector scan). Updates sent from a cached copy
// keep the stored managedFields: the API server takes them from the live
// object when a request brings none.
func StripManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// PodNodeIndex indexes pods by the node they are bound to; unbound pods
// are in no bucket. See IndexPodsByNode.
const PodNodeIndex = "pod-node"

// IndexPodsByNode adds PodNodeIndex to a pod informer, once: the
// components sharing the informer (the node lifecycle controller, the
// node simulator) each ask for it.
func IndexPodsByNode(inf cache.SharedIndexInformer) error {
	return addIndexOnce(inf, PodNodeIndex, PodNodeKeys)
}

// PodNodeKeys is PodNodeIndex's index function: the pod's node, none
// for a pod not bound yet.
func PodNodeKeys(obj any) ([]string, error) {
	if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
		return []string{p.Spec.NodeName}, nil
	}
	return nil, nil
}

// SliceServiceIndex indexes EndpointSlices by the Service they belong to,
// "namespace/name" from their kubernetes.io/service-name label; see
// IndexSlicesByService.
const SliceServiceIndex = "endpointslice-service"

// IndexSlicesByService adds SliceServiceIndex to an EndpointSlice
// informer, once: the components sharing the informer (the service
// proxy, the cluster DNS) each ask for it.
func IndexSlicesByService(inf cache.SharedIndexInformer) error {
	return addIndexOnce(inf, SliceServiceIndex, SliceServiceKeys)
}

// addIndexOnce adds the index name to a shared informer unless one of
// the components sharing it already did.
func addIndexOnce(inf cache.SharedIndexInformer, name string, fn cache.IndexFunc) error {
	if _, ok := inf.GetIndexer().GetIndexers()[name]; ok {
		return nil
	}
	return inf.AddIndexers(cache.Indexers{name: fn})
}

// SliceServiceKeys is SliceServiceIndex's index function: the key of
// the EndpointSlice's Service, none for a slice without one.
func SliceServiceKeys(obj any) ([]string, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, nil
	}
	name := s.Labels[discoveryv1.LabelServiceName]
	if name == "" {
		return nil, nil
	}
	return []string{s.Namespace + "/" + name}, nil
}
