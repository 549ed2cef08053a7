package main

import (
	"context"
	"fmt"
	"sort"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
)

// crdParams size the crd suite; -quick: fewer CRDs and objects.
type crdParams struct{ crds, objects int }

func crdParamsFor(quick bool) crdParams {
	if quick {
		return crdParams{crds: 5, objects: 200}
	}
	return crdParams{crds: 20, objects: 1000}
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// benchCRD is CRD i of the group bench.example.com, with a CEL rule on its
// spec or without.
func benchCRD(i int, cel bool) *unstructured.Unstructured {
	plural := fmt.Sprintf("widgets%d", i)
	spec := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"replicas":    map[string]any{"type": "integer", "minimum": int64(0), "default": int64(1)},
			"minReplicas": map[string]any{"type": "integer", "default": int64(0)},
			"image":       map[string]any{"type": "string"},
		},
	}
	if cel {
		spec["x-kubernetes-validations"] = []any{map[string]any{"rule": "self.minReplicas <= self.replicas", "message": "replicas below minReplicas"}}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": plural + ".bench.example.com"},
		"spec": map[string]any{
			"group": "bench.example.com", "scope": "Namespaced",
			"names": map[string]any{"plural": plural, "kind": fmt.Sprintf("Widget%d", i)},
			"versions": []any{map[string]any{
				"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object", "properties": map[string]any{"spec": spec},
				}},
			}},
		},
	}}
}

// crdSuite measures how soon a new CRD's resource is served (create to
// listed in discovery, as a client waiting on it sees it) and the create
// latency of custom objects validated by a schema, with and without a CEL
// rule.
func crdSuite(ctx context.Context, b *bench) ([]Row, error) {
	p := crdParamsFor(b.quick)
	var served, plainP99, celP99, cmP99 *float64
	row := func(name, unit string, v *float64, t *Target) Row {
		return Row{Name: "crd: " + name, Unit: unit, Bonsai: v, Target: t}
	}
	rows := func() []Row {
		return []Row{
			row(fmt.Sprintf("CRD create → resource served (worst of %d)", p.crds), "ms", served, atMost(1000, "ms")),
			row(fmt.Sprintf("custom object create p99 (%s sequential, schema only)", fmtNum(float64(p.objects))), "ms", plainP99, nil),
			row(fmt.Sprintf("custom object create p99 (%s sequential, schema + CEL rule)", fmtNum(float64(p.objects))), "ms", celP99, nil),
			row(fmt.Sprintf("ConfigMap create p99 (%s sequential, same server, for scale)", fmtNum(float64(p.objects))), "ms", cmP99, nil),
		}
	}
	srv, stop, err := startSuiteServer(ctx, b, "crd")
	if err != nil {
		return rows(), err
	}
	defer stop()
	cfg, err := srv.restConfig("bonsai-bench")
	if err != nil {
		return rows(), err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return rows(), err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return rows(), err
	}
	var worst time.Duration
	for i := 0; i < p.crds; i++ {
		start := time.Now()
		if _, err := dyn.Resource(crdGVR).Create(ctx, benchCRD(i, i%2 == 1), metav1.CreateOptions{}); err != nil {
			return rows(), err
		}
		for {
			l, err := disc.ServerResourcesForGroupVersion("bench.example.com/v1")
			found := false
			if err == nil {
				for _, r := range l.APIResources {
					found = found || r.Name == fmt.Sprintf("widgets%d", i)
				}
			} else if !apierrors.IsNotFound(err) {
				return rows(), err
			}
			if found {
				break
			}
			if time.Since(start) > 10*time.Second {
				return rows(), fmt.Errorf("widgets%d not served after 10s", i)
			}
			time.Sleep(2 * time.Millisecond)
		}
		worst = max(worst, time.Since(start))
	}
	served = num(float64(worst.Microseconds()) / 1000)
	// CRD 0 has no CEL rule, CRD 1 has one; ConfigMaps, through the same
	// dynamic client, say what the disk and the write path cost alone.
	for i, out := range []**float64{&plainP99, &celP99, &cmP99} {
		gvr := schema.GroupVersionResource{Group: "bench.example.com", Version: "v1", Resource: fmt.Sprintf("widgets%d", i)}
		if i == 2 {
			gvr = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
		}
		res := dyn.Resource(gvr).Namespace("default")
		lat := make([]time.Duration, 0, p.objects)
		for j := 0; j < p.objects; j++ {
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "bench.example.com/v1", "kind": fmt.Sprintf("Widget%d", i),
				"metadata": map[string]any{"name": fmt.Sprintf("w-%d", j)},
				"spec":     map[string]any{"replicas": int64(2), "image": "busybox"},
			}}
			if i == 2 {
				obj.Object = map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
					"metadata": map[string]any{"name": fmt.Sprintf("w-%d", j)}, "data": map[string]any{"image": "busybox"}}
			}
			start := time.Now()
			if _, err := res.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
				return rows(), err
			}
			lat = append(lat, time.Since(start))
		}
		sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
		*out = num(float64(percentile(lat, 0.99).Microseconds()) / 1000)
	}
	return rows(), nil
}
