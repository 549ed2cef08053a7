// Package client is how bonsai's in-process components (the kubelet, the
// node simulator, the controllers and the scheduler) reach the API server:
// plain REST clients that speak protobuf, and an event sink that lets
// client-go's event recorder write through them. client-go's typed
// clientset would link every API group's client into the binary for the
// few calls these components make. It holds no component logic.
package client

import (
	"context"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// REST is a client of one API group version (apiPath "/api" for the core
// group, "/apis" for the others) that sends and accepts protobuf.
func REST(cfg *rest.Config, apiPath string, gv schema.GroupVersion) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	c.APIPath, c.GroupVersion = apiPath, &gv
	c.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	c.ContentType = "application/vnd.kubernetes.protobuf"
	c.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientFor(c)
}

// Core is a client of the core group, v1.
func Core(cfg *rest.Config) (*rest.RESTClient, error) {
	return REST(cfg, "/api", corev1.SchemeGroupVersion)
}

// EventSink writes events for client-go's recorder (record.EventSink)
// through a core client.
type EventSink struct {
	Core rest.Interface
	Ctx  context.Context
}

func (s *EventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	return out, s.Core.Post().Namespace(e.Namespace).Resource("events").Body(e).Do(s.Ctx).Into(out)
}

func (s *EventSink) Update(e *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	return out, s.Core.Put().Namespace(e.Namespace).Resource("events").Name(e.Name).Body(e).Do(s.Ctx).Into(out)
}

func (s *EventSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	out := &corev1.Event{}
	return out, s.Core.Patch(types.StrategicMergePatchType).Namespace(e.Namespace).Resource("events").Name(e.Name).Body(data).Do(s.Ctx).Into(out)
}

// CoreAndCoordination are the two clients node components need: the core
// group (nodes, pods, events) and coordination.k8s.io (Leases).
func CoreAndCoordination(cfg *rest.Config) (core, coordination *rest.RESTClient, err error) {
	if core, err = Core(cfg); err != nil {
		return nil, nil, err
	}
	if coordination, err = REST(cfg, "/apis", coordinationv1.SchemeGroupVersion); err != nil {
		return nil, nil, err
	}
	return core, coordination, nil
}
