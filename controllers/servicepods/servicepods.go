// Package servicepods holds what the Endpoints and EndpointSlice
// controllers share about the pods behind a Service: indexes that find a
// Service's pods and a pod's Services without scanning a namespace, the
// rules that say whether and how a pod is an endpoint (upstream's
// pkg/controller/util/endpoint), and the tracker of the
// endpoints.kubernetes.io/last-change-trigger-time annotation.
//
// It owns no API object and writes nothing.
package servicepods

import (
	"fmt"
	"log/slog"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"

	"bonsai.dev/bonsai/controllers/kit"
)

// Index names, shared by every controller on the same informers.
const (
	// podLabelIndex files a pod under "<namespace>/<key>=<value>" for each
	// of its labels.
	podLabelIndex = "servicepods/label"
	// serviceSelectorIndex files a Service under "<namespace>/<key>=<value>"
	// of the smallest pair of its selector (every pod it selects has that
	// label, so looking a pod's labels up finds it), or "<namespace>/"
	// for an empty selector, which selects every pod.
	serviceSelectorIndex = "servicepods/selector"
)

// AddIndexes adds the indexes to the shared pod and Service informers,
// once however many controllers ask. Call it before the informers start.
func AddIndexes(pods, services cache.SharedIndexInformer) error {
	if _, ok := pods.GetIndexer().GetIndexers()[podLabelIndex]; !ok {
		if err := pods.AddIndexers(cache.Indexers{podLabelIndex: podLabelKeys}); err != nil {
			return fmt.Errorf("pod label index: %w", err)
		}
	}
	if _, ok := services.GetIndexer().GetIndexers()[serviceSelectorIndex]; !ok {
		if err := services.AddIndexers(cache.Indexers{serviceSelectorIndex: serviceSelectorKeys}); err != nil {
			return fmt.Errorf("service selector index: %w", err)
		}
	}
	return nil
}

func pairKey(ns, k, v string) string { return ns + "/" + k + "=" + v }

func podLabelKeys(obj any) ([]string, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	keys := make([]string, 0, len(p.Labels))
	for k, v := range p.Labels {
		keys = append(keys, pairKey(p.Namespace, k, v))
	}
	return keys, nil
}

func serviceSelectorKeys(obj any) ([]string, error) {
	s, ok := obj.(*corev1.Service)
	if !ok || s.Spec.Selector == nil {
		// A nil selector selects nothing: the Service's endpoints are
		// managed by someone else.
		return nil, nil
	}
	if len(s.Spec.Selector) == 0 {
		return []string{s.Namespace + "/"}, nil
	}
	first := ""
	for k := range s.Spec.Selector {
		if first == "" || k < first {
			first = k
		}
	}
	return []string{pairKey(s.Namespace, first, s.Spec.Selector[first])}, nil
}

// PodsForService lists the pods svc selects, from the smallest bucket of
// the label index its selector names. A Service without a selector has
// none.
func PodsForService(pods cache.Indexer, svc *corev1.Service) ([]*corev1.Pod, error) {
	if svc.Spec.Selector == nil {
		return nil, nil
	}
	var candidates []any
	var err error
	if len(svc.Spec.Selector) == 0 {
		candidates, err = pods.ByIndex(cache.NamespaceIndex, svc.Namespace)
	} else {
		first := true
		for k, v := range svc.Spec.Selector {
			bucket, e := pods.ByIndex(podLabelIndex, pairKey(svc.Namespace, k, v))
			if e != nil {
				return nil, e
			}
			if first || len(bucket) < len(candidates) {
				candidates, first = bucket, false
			}
			if len(candidates) == 0 {
				break
			}
		}
	}
	if err != nil {
		return nil, err
	}
	sel := labels.SelectorFromValidatedSet(svc.Spec.Selector)
	out := make([]*corev1.Pod, 0, len(candidates))
	for _, o := range candidates {
		if p := o.(*corev1.Pod); sel.Matches(labels.Set(p.Labels)) {
			out = append(out, p)
		}
	}
	return out, nil
}

// ServicesForPod is the set of keys ("namespace/name") of the Services
// whose selector selects pod.
func ServicesForPod(services cache.Indexer, pod *corev1.Pod) (sets.Set[string], error) {
	keys := make([]string, 0, len(pod.Labels)+1)
	keys = append(keys, pod.Namespace+"/")
	for k, v := range pod.Labels {
		keys = append(keys, pairKey(pod.Namespace, k, v))
	}
	out := sets.New[string]()
	for _, key := range keys {
		objs, err := services.ByIndex(serviceSelectorIndex, key)
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			s := o.(*corev1.Service)
			if labels.SelectorFromValidatedSet(s.Spec.Selector).Matches(labels.Set(pod.Labels)) {
				out.Insert(s.Namespace + "/" + s.Name)
			}
		}
	}
	return out, nil
}

// ServicesToUpdateOnPodChange is the set of Services whose endpoints a
// change from old to cur may change: none when nothing an endpoint shows
// changed; the Services of both when the labels (membership) changed and
// the endpoint too; only those joined or left when just the labels did.
func ServicesToUpdateOnPodChange(services cache.Indexer, old, cur *corev1.Pod) (sets.Set[string], error) {
	if old.ResourceVersion == cur.ResourceVersion {
		return nil, nil // a resync: nothing changed
	}
	podChanged, labelsChanged := podEndpointsChanged(old, cur)
	if !podChanged && !labelsChanged {
		return nil, nil
	}
	now, err := ServicesForPod(services, cur)
	if err != nil || !labelsChanged {
		return now, err
	}
	before, err := ServicesForPod(services, old)
	if err != nil {
		return nil, err
	}
	if podChanged {
		return now.Union(before), nil
	}
	return now.Difference(before).Union(before.Difference(now)), nil
}

// podEndpointsChanged says whether the endpoint made from the pod changed
// and whether its Service membership (labels, or hostname and subdomain
// which decide the endpoint's identity) may have.
func podEndpointsChanged(old, cur *corev1.Pod) (podChanged, labelsChanged bool) {
	labelsChanged = !labels.Equals(old.Labels, cur.Labels) ||
		old.Spec.Hostname != cur.Spec.Hostname || old.Spec.Subdomain != cur.Spec.Subdomain
	podChanged = !old.DeletionTimestamp.Equal(cur.DeletionTimestamp) ||
		kit.IsPodReady(old) != kit.IsPodReady(cur) ||
		isTerminal(old) != isTerminal(cur) ||
		old.Status.PodIP != cur.Status.PodIP ||
		!slices.Equal(old.Status.PodIPs, cur.Status.PodIPs) ||
		old.Spec.NodeName != cur.Spec.NodeName
	return podChanged, labelsChanged
}

// PodHandler is the pod informer's handler of a controller that keeps
// something per Service (Endpoints, EndpointSlices): it passes enqueue
// the keys of the Services a pod's addition, change or deletion may
// concern; a change that touches no endpoint passes none.
func PodHandler(services cache.Indexer, log *slog.Logger, enqueue func(keys sets.Set[string])) cache.ResourceEventHandlerFuncs {
	failed := func(p *corev1.Pod, err error) {
		log.Error("finding the Services of a pod", "pod", p.Namespace+"/"+p.Name, "err", err)
	}
	onPod := func(obj any) {
		p := podOf(obj)
		if p == nil {
			return
		}
		if keys, err := ServicesForPod(services, p); err != nil {
			failed(p, err)
		} else {
			enqueue(keys)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: onPod,
		UpdateFunc: func(old, cur any) {
			o, n := podOf(old), podOf(cur)
			if o == nil || n == nil {
				return
			}
			if keys, err := ServicesToUpdateOnPodChange(services, o, n); err != nil {
				failed(n, err)
			} else {
				enqueue(keys)
			}
		},
		DeleteFunc: onPod,
	}
}

func podOf(obj any) *corev1.Pod {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	p, _ := obj.(*corev1.Pod)
	return p
}
