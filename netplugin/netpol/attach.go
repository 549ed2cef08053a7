package netpol

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"bonsai.dev/bonsai/netplugin"
)

// Attach tells the enforcer the address the pod network gave a new
// sandbox of a local pod, and returns once the tables treat that address
// as the policies selecting the pod say: called between the sandbox's
// network setup and its first container, it leaves no moment when the
// pod runs unpoliced. (The pod's status shows the address only later,
// when the kubelet writes it; until then no other component knows it.)
// A static pod is policed as its mirror in the API is; one with no
// mirror is selected by no policy, and Attach does not wait for one.
func (e *Enforcer) Attach(ctx context.Context, pod netplugin.Pod, att netplugin.Attachment) error {
	ip, who, uid := att.IP, pod.Namespace+"/"+pod.Name, pod.UID
	if !ip.Is4() {
		return nil // the network carries IPv4 alone
	}
	if err := e.checkPort(uid); err != nil {
		return fmt.Errorf("network policies of pod %s: %w", who, err)
	}
	if e.portName == nil && e.netnsDir != "" && att.NetnsPath != "" && e.nl != nil {
		l, err := findLink(e.nl, att.NetnsPath, ip)
		if err != nil {
			l = podLink{kind: linkUnpoliced, why: err.Error()}
		}
		e.noteLink(who, uid, l)
	}
	ctx, cancel := context.WithTimeout(ctx, attachTimeout)
	defer cancel()
	e.mu.Lock()
	e.attached[uid] = ip
	e.mu.Unlock()
	// The kubelet had the pod from the API server: the informer has it
	// too, or will in a moment.
	static := pod.Annotations[mirrorAnnotation] != ""
	start := time.Now()
	for {
		obj, exists, err := e.podsIdx.GetByKey(pod.Namespace + "/" + pod.Name)
		if err == nil && exists && sandboxUID(obj.(*corev1.Pod)) == uid {
			e.mu.Lock()
			e.urgent = true
			e.mu.Unlock()
			e.podChanged(obj, false)
			break
		}
		if static && time.Since(start) > staticMirrorWait {
			e.log.Debug("static pod with no mirror in the API: no policy selects it", "pod", who)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("network policies of pod %s: the pod is not in the enforcer's cache: %w", who, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	e.mu.Lock()
	target := e.queued
	e.mu.Unlock()
	for {
		e.mu.Lock()
		applied, done, lastErr := e.applied, e.done, e.lastErr
		e.mu.Unlock()
		if applied >= target {
			return nil
		}
		select {
		case <-done:
		case <-ctx.Done():
			if lastErr != nil {
				return fmt.Errorf("network policies of pod %s are not in place: %w", who, lastErr)
			}
			return fmt.Errorf("network policies of pod %s are not in place: %w", who, ctx.Err())
		}
	}
}

// staticMirrorWait is how long Attach looks for a static pod's mirror,
// which the kubelet makes before the pod's sandbox, in the enforcer's
// cache.
const staticMirrorWait = 2 * time.Second

// checkPort makes sure the pod's bridge port is where PortName says: the
// bridge table knows the bridge's ports by name alone, and a pod whose
// port it does not know would exchange bridged frames unpoliced.
func (e *Enforcer) checkPort(uid string) error {
	if e.portName == nil || e.nl == nil {
		return nil
	}
	name := e.portName(uid)
	l, err := e.nl.LinkByName(name)
	if err != nil {
		return fmt.Errorf("its bridge port %s: %w", name, err)
	}
	br, err := e.nl.LinkByName(e.bridge)
	if err != nil {
		return fmt.Errorf("bridge %s: %w", e.bridge, err)
	}
	if l.Attrs().MasterIndex != br.Attrs().Index {
		return fmt.Errorf("its port %s is not on bridge %s", name, e.bridge)
	}
	return nil
}

// Detach forgets a sandbox's address and link.
func (e *Enforcer) Detach(uid string) {
	e.mu.Lock()
	delete(e.attached, uid)
	delete(e.links, uid)
	e.mu.Unlock()
}

// Guard wraps a pod network so that every sandbox it sets up is
// policed (Attach) before Setup returns, and so before the kubelet runs
// any container in it; a sandbox that cannot be is torn down, and Setup
// fails.
func (e *Enforcer) Guard(n netplugin.PodNetwork) netplugin.PodNetwork {
	return &guarded{PodNetwork: n, e: e}
}

type guarded struct {
	netplugin.PodNetwork
	e *Enforcer
}

func (g *guarded) Setup(ctx context.Context, pod netplugin.Pod) (netplugin.Attachment, error) {
	att, err := g.PodNetwork.Setup(ctx, pod)
	if err != nil {
		return att, err
	}
	if err := g.e.Attach(ctx, pod, att); err != nil {
		if terr := g.PodNetwork.Teardown(ctx, pod.ID); terr != nil {
			g.e.log.Warn("tear down an unpoliced sandbox's network", "pod", pod.Namespace+"/"+pod.Name, "err", terr)
		}
		g.e.Detach(pod.UID)
		return netplugin.Attachment{}, err
	}
	return att, nil
}

// Teardown forgets the sandbox's link before the network removes it: a
// new sandbox of the pod may meet the node elsewhere.
func (g *guarded) Teardown(ctx context.Context, id string) error {
	g.e.mu.Lock()
	delete(g.e.links, id)
	g.e.mu.Unlock()
	return g.PodNetwork.Teardown(ctx, id)
}
