package apiserver

import (
	"errors"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

type warnings struct {
	mu  sync.Mutex
	got []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, msg string) {
	w.mu.Lock()
	w.got = append(w.got, msg)
	w.mu.Unlock()
}

// kubectl get cs: the in-process components as they report themselves
// and the store as etcd-0, with kube-apiserver's deprecation warning.
func TestComponentStatuses(t *testing.T) {
	e := newTestEnv(t)
	stopScheduler := e.s.RunningComponent("scheduler")
	e.s.RunningComponent("controller-manager")
	cfg := rest.CopyConfig(e.cfg)
	w := &warnings{}
	cfg.WarningHandler = w
	cs := kubernetes.NewForConfigOrDie(cfg).CoreV1().ComponentStatuses()

	list, err := cs.List(e.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range list.Items {
		names = append(names, c.Name)
		if len(c.Conditions) != 1 || c.Conditions[0].Type != corev1.ComponentHealthy || c.Conditions[0].Status != corev1.ConditionTrue || c.Conditions[0].Message != "ok" {
			t.Errorf("%s: %+v", c.Name, c.Conditions)
		}
	}
	if strings.Join(names, ",") != "scheduler,controller-manager,etcd-0" {
		t.Errorf("components %v", names)
	}
	if len(w.got) == 0 || w.got[0] != "v1 ComponentStatus is deprecated in v1.19+" {
		t.Errorf("warnings %q", w.got)
	}

	stopScheduler(errors.New("lost its informers"))
	got, err := cs.Get(e.ctx, "scheduler", metav1.GetOptions{})
	if err != nil || got.Conditions[0].Status != corev1.ConditionFalse || got.Conditions[0].Error != "lost its informers" {
		t.Fatalf("stopped scheduler: %v %+v", err, got)
	}
	checkTable(t, getTable(t, e, "/api/v1/componentstatuses/scheduler"), []string{"NAME", "STATUS", "MESSAGE", "ERROR"},
		[]any{"scheduler", "Unhealthy", "", "lost its informers"})
	if _, err := cs.Get(e.ctx, "etcd-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("etcd-1: %v", err)
	}
	if err := cs.Delete(e.ctx, "etcd-0", metav1.DeleteOptions{}); !apierrors.IsMethodNotSupported(err) {
		t.Errorf("delete: %v", err)
	}
}
