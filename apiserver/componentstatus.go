package apiserver

import (
	"context"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"bonsai.dev/bonsai/apiserver/registry"
)

// ComponentStatuses (kubectl get cs) are computed, as kube-apiserver
// computes them by probing its scheduler, controller manager and etcd
// members: here the components that run in this process, as they report
// themselves (RunningComponent), and the store as etcd-0 (whichever the
// backend), probed on each request.

// componentStatuses holds the in-process components: nil while one
// runs, the error it stopped with after.
type componentStatuses struct {
	mu sync.Mutex
	m  map[string]error
}

// RunningComponent records that the component name (scheduler,
// controller-manager) runs; done, called when it stops, records why.
func (s *Server) RunningComponent(name string) (done func(error)) {
	c := &s.components
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]error{}
	}
	c.m[name] = nil
	return func(err error) {
		if err == nil {
			err = errStopped
		}
		c.mu.Lock()
		c.m[name] = err
		c.mu.Unlock()
	}
}

type stoppedError struct{}

func (stoppedError) Error() string { return "stopped" }

var errStopped error = stoppedError{}

var componentStatusesGVR = gvr("", "v1", "componentstatuses")

func componentStatusKind(s *Server) registry.Kind {
	return registry.Kind{GVR: componentStatusesGVR, Kind: "ComponentStatus", ShortNames: []string{"cs"},
		Reader: componentReader{s}, Printer: &componentStatusPrinter, Warning: "v1 ComponentStatus is deprecated in v1.19+"}
}

type componentReader struct{ s *Server }

func componentStatus(name string, err error) *corev1.ComponentStatus {
	c := corev1.ComponentCondition{Type: corev1.ComponentHealthy, Status: corev1.ConditionTrue, Message: "ok"}
	if err != nil {
		c.Status, c.Message, c.Error = corev1.ConditionFalse, "", err.Error()
	}
	return &corev1.ComponentStatus{ObjectMeta: metav1.ObjectMeta{Name: name}, Conditions: []corev1.ComponentCondition{c}}
}

func (c componentReader) List(ctx context.Context, _ string) ([]runtime.Object, error) {
	cs := &c.s.components
	cs.mu.Lock()
	names := make([]string, 0, len(cs.m))
	for n := range cs.m {
		names = append(names, n)
	}
	// kubectl get cs lists scheduler, controller-manager, then etcd.
	sort.Sort(sort.Reverse(sort.StringSlice(names)))
	out := make([]runtime.Object, 0, len(names)+1)
	for _, n := range names {
		out = append(out, componentStatus(n, cs.m[n]))
	}
	cs.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := c.s.cfg.Store.CurrentRevision(ctx)
	return append(out, componentStatus("etcd-0", err)), nil
}

func (c componentReader) Get(ctx context.Context, _, name string) (runtime.Object, error) {
	all, _ := c.List(ctx, "")
	for _, o := range all {
		if o.(*corev1.ComponentStatus).Name == name {
			return o, nil
		}
	}
	return nil, apierrors.NewNotFound(componentStatusesGVR.GroupResource(), name)
}

var componentStatusPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Status", registry.TString, "Status of the component conditions"),
		registry.Col("Message", registry.TString, "Message of the component conditions"),
		registry.Col("Error", registry.TString, "Error of the component conditions"),
	),
	Cells: func(o runtime.Object) []any {
		cs := o.(*corev1.ComponentStatus)
		status, msg, errMsg := "Unknown", "", ""
		for _, c := range cs.Conditions {
			if c.Type == corev1.ComponentHealthy {
				status = "Unhealthy"
				if c.Status == corev1.ConditionTrue {
					status = "Healthy"
				}
				msg, errMsg = c.Message, c.Error
			}
		}
		return []any{cs.Name, status, msg, errMsg}
	},
}
