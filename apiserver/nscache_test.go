package apiserver

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNamespaceCacheFloor(t *testing.T) {
	c := newNamespaceCache()
	if _, ok := c.lookup("a"); ok {
		t.Fatal("empty cache knows a")
	}
	c.set("a", nsEntry{rev: 5})
	if term, ok := c.lookup("a"); !ok || term {
		t.Fatalf("lookup = %v %v", term, ok)
	}
	// A write through the server at 7: the entry at 5 is stale until the
	// watch brings 7 or later.
	c.wrote("a", 7)
	if _, ok := c.lookup("a"); ok {
		t.Fatal("stale entry used after a write")
	}
	c.set("a", nsEntry{rev: 6}) // a late watch event
	if _, ok := c.lookup("a"); ok {
		t.Fatal("an event older than the write was used")
	}
	c.set("a", nsEntry{rev: 7, terminating: true})
	if term, ok := c.lookup("a"); !ok || !term {
		t.Fatalf("lookup after the write's event = %v %v", term, ok)
	}
	c.remove("a", 6)
	if _, ok := c.lookup("a"); !ok {
		t.Fatal("an old delete event removed a newer entry")
	}
	c.remove("a", 8)
	if _, ok := c.lookup("a"); ok {
		t.Fatal("deleted namespace still known")
	}
}

// TestNamespaceCacheNeverAdmitsIntoTerminating: with the cache warm, a
// create right after the namespace's delete is refused every time, and a
// create into a namespace that does not exist is a 404.
func TestNamespaceCacheNeverAdmitsIntoTerminating(t *testing.T) {
	e := newTestEnv(t)
	for i := 0; i < 30; i++ {
		name := fmt.Sprintf("ns-%d", i)
		if _, err := e.cs.CoreV1().Namespaces().Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		cms := e.cs.CoreV1().ConfigMaps(name)
		if _, err := cms.Create(e.ctx, cm("warm", nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Let the watch bring the namespace into the cache.
		time.Sleep(5 * time.Millisecond)
		if err := e.cs.CoreV1().Namespaces().Delete(e.ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err := cms.Create(e.ctx, cm("late", nil), metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "being terminated") {
			t.Fatalf("round %d: create right after the delete: %v", i, err)
		}
	}
	if _, err := e.cs.CoreV1().ConfigMaps("nowhere").Create(e.ctx, cm("x", nil), metav1.CreateOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("create in a missing namespace: %v", err)
	}
}
