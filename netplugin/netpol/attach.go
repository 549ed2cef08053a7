package netpol

import (
	"context"
	"fmt"
	"net/netip"
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
// netnsPath is the sandbox's network namespace, where a CNI pod's link
// to the node is found (see Config.NetnsDir).
func (e *Enforcer) Attach(ctx context.Context, namespace, name, uid string, ip netip.Addr, netnsPath string) error {
	if !ip.Is4() {
		return nil // the network carries IPv4 alone
	}
	if err := e.checkPort(uid); err != nil {
		return fmt.Errorf("network policies of pod %s/%s: %w", namespace, name, err)
	}
	if e.portName == nil && e.netnsDir != "" && netnsPath != "" && e.nl != nil {
		l, err := findLink(e.nl, netnsPath, ip)
		if err != nil {
			l = podLink{kind: linkUnpoliced, why: err.Error()}
		}
		e.noteLink(namespace+"/"+name, uid, l)
	}
	ctx, cancel := context.WithTimeout(ctx, attachTimeout)
	defer cancel()
	e.mu.Lock()
	e.attached[uid] = ip
	e.mu.Unlock()
	// The kubelet had the pod from the API server: the informer has it
	// too, or will in a moment.
	for {
		obj, exists, err := e.podsIdx.GetByKey(namespace + "/" + name)
		if err == nil && exists && string(obj.(*corev1.Pod).UID) == uid {
			e.podChanged(obj, false)
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("network policies of pod %s/%s: the pod is not in the enforcer's cache: %w", namespace, name, ctx.Err())
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
				return fmt.Errorf("network policies of pod %s/%s are not in place: %w", namespace, name, lastErr)
			}
			return fmt.Errorf("network policies of pod %s/%s are not in place: %w", namespace, name, ctx.Err())
		}
	}
}

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
	if err := g.e.Attach(ctx, pod.Namespace, pod.Name, pod.UID, att.IP, att.NetnsPath); err != nil {
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
