package apiserver

import (
	"context"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"bonsai.dev/bonsai/apiserver/admission/podsecurity"
	"bonsai.dev/bonsai/store"
)

// namespaceCache knows which namespaces exist and which are terminating,
// so a namespaced create need not read and decode its Namespace from the
// store (a third of a create's CPU). kube-apiserver's NamespaceLifecycle
// admission reads an informer for the same reason.
//
// It is fed by a store watch, and kept exact for writes through this
// server: every namespace write raises a floor for that name to its
// revision, and an entry older than its floor is not used, so a create
// right after `kubectl delete namespace` still sees the namespace
// terminating. Lookups that miss go to the store.
type namespaceCache struct {
	mu      sync.RWMutex
	entries map[string]nsEntry
	floor   map[string]uint64
}

type nsEntry struct {
	rev         uint64
	terminating bool
	// podSecurity holds the namespace's pod-security.kubernetes.io/
	// labels, all that PodSecurity admission reads of it (nil for most
	// namespaces).
	podSecurity map[string]string
}

func newNamespaceCache() *namespaceCache {
	return &namespaceCache{entries: map[string]nsEntry{}, floor: map[string]uint64{}}
}

// lookup says whether name is known to exist and if it is terminating.
func (c *namespaceCache) lookup(name string) (terminating, ok bool) {
	e, ok := c.entry(name)
	return e.terminating, ok
}

// entry is what the cache knows of name, if it is current.
func (c *namespaceCache) entry(name string) (nsEntry, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.entries[name]
	if !ok || e.rev < c.floor[name] {
		return nsEntry{}, false
	}
	return e, true
}

// podSecurityLabels picks a namespace's pod-security.kubernetes.io/
// labels.
func podSecurityLabels(labels map[string]string) map[string]string {
	var out map[string]string
	for k, v := range labels {
		if strings.HasPrefix(k, podsecurity.LabelPrefix) {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

func (c *namespaceCache) set(name string, e nsEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.rev >= c.floor[name] {
		c.entries[name] = e
	}
}

func (c *namespaceCache) remove(name string, rev uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rev >= c.floor[name] {
		delete(c.entries, name)
	}
}

// wrote records a write of name at rev made through this server.
func (c *namespaceCache) wrote(name string, rev uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rev > c.floor[name] {
		c.floor[name] = rev
	}
}

func (c *namespaceCache) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries = map[string]nsEntry{}
}

// runNamespaceCache lists and then watches the namespaces until ctx ends,
// re-listing whenever the watch ends.
func (s *Server) runNamespaceCache(ctx context.Context) {
	res := s.reg.byGVR[gvr("", "v1", "namespaces")]
	prefix := res.prefix("")
	decode := func(kv store.KeyValue) (nsEntry, bool) {
		obj, err := decodeStored(res, kv)
		if err != nil {
			return nsEntry{}, false
		}
		ns := obj.(*corev1.Namespace)
		return nsEntry{rev: kv.Revision, terminating: ns.DeletionTimestamp != nil || ns.Status.Phase == corev1.NamespaceTerminating,
			podSecurity: podSecurityLabels(ns.Labels)}, true
	}
	name := func(key string) string { return strings.TrimPrefix(key, prefix) }
	for ctx.Err() == nil {
		l, err := s.cfg.Store.List(ctx, prefix, store.ListOptions{})
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		s.nsCache.reset()
		for _, kv := range l.Items {
			if e, ok := decode(kv); ok {
				s.nsCache.set(name(kv.Key), e)
			}
		}
		w, err := s.cfg.Store.Watch(ctx, prefix, l.Revision)
		if err != nil {
			s.nsCache.reset()
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for ev := range w.Events() {
			if ev.Type == store.Deleted {
				s.nsCache.remove(name(ev.Key), ev.Revision)
				continue
			}
			if e, ok := decode(store.KeyValue{Key: ev.Key, Value: ev.Value, Revision: ev.Revision}); ok {
				s.nsCache.set(name(ev.Key), e)
			}
		}
		w.Stop()
		// Until the re-list, lookups go to the store.
		s.nsCache.reset()
	}
}

// note is what the namespace cache needs to hear of this server's writes
// under prefix, the namespaces' store prefix.
func (c *namespaceCache) note(prefix string) writeNote {
	return writeNote{prefix: prefix, wrote: func(key string, rev uint64) {
		c.wrote(strings.TrimPrefix(key, prefix), rev)
	}}
}

// namespaceLabels reads namespace name's labels from the store, for the
// strategies that need more of a namespace than the cache keeps (a
// claim's admin access to devices).
func (s *Server) namespaceLabels(name string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	ns, _, err := s.getObject(ctx, s.reg.byGVR[gvr("", "v1", "namespaces")], "", name)
	if err != nil {
		return nil, err
	}
	return ns.(*corev1.Namespace).Labels, nil
}
