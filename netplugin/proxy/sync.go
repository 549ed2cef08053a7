package proxy

import (
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"bonsai.dev/bonsai/client"
)

// FullSyncLog is the message logged after each full sync.
const FullSyncLog = "programmed the whole service proxy table"

// sync writes what changed since the last sync, or the whole table when
// a full sync is due (the first, the hourly one, one after a failure).
func (p *Proxier) sync() error {
	p.mu.Lock()
	dirty, full, triggers, pending := p.dirty, p.needFull, p.triggers, p.pendingSince
	p.dirty, p.needFull, p.triggers, p.pendingSince = map[string]bool{}, false, nil, time.Time{}
	p.syncZone = p.zone
	p.mu.Unlock()

	start := time.Now()
	var err error
	if full {
		err = p.syncFull()
	} else {
		err = p.syncDirty(dirty)
	}
	if err != nil {
		// The kernel kept the table as it was; what it has is no
		// longer certain to match programmed, so start over whole.
		p.mu.Lock()
		p.needFull = true
		p.triggers = append(p.triggers, triggers...)
		if pending.IsZero() {
			pending = start
		}
		if p.pendingSince.IsZero() || pending.Before(p.pendingSince) {
			p.pendingSince = pending
		}
		p.mu.Unlock()
		return err
	}
	took := time.Since(start)
	p.metrics.synced(full, took, triggers)
	if full {
		// Rare (a start, the hourly repair, a failed write): worth a line.
		p.log.Info(FullSyncLog, "table", "ip "+p.table.table.Name, "services", len(p.programmed), "took", took)
	} else {
		p.log.Debug("synced service rules", "services", len(dirty), "took", took)
	}
	return nil
}

func (p *Proxier) syncFull() error {
	keys := p.services.ListKeys()
	p.byAge(keys)
	owners := newClaimer(nil, nil)
	conflicted := map[string]bool{}
	want := map[string]objects{}
	checks := map[string]healthCheck{}
	all := []objects{baseObjects(p.rc)}
	for _, k := range keys {
		o, hc, ok := p.serviceObjects(k)
		if hc.port != 0 {
			checks[k] = hc
		}
		if !ok {
			continue
		}
		o, lost := owners.claim(k, o)
		if len(lost) > 0 {
			conflicted[k] = true
			p.log.Warn("Service left without addresses another Service holds", "service", k, "keys", lost)
		}
		want[k] = o
		all = append(all, o)
	}
	if err := p.table.replace(all); err != nil {
		return err
	}
	var stale []netip.Addr
	for k, old := range p.programmed {
		stale = append(stale, staleUDP(old, want[k])...)
	}
	p.programmed, p.conflicted, p.owners = want, conflicted, owners.taken
	p.choosers.keepOnly(want)
	p.clearUDPFlows(stale)
	p.health.update(checks, true)
	return nil
}

func (p *Proxier) syncDirty(dirty map[string]bool) error {
	keys := make([]string, 0, len(dirty))
	for k := range dirty {
		keys = append(keys, k)
	}
	p.byAge(keys)
	owners := newClaimer(p.owners, dirty)
	var changes []change
	next := map[string]objects{}
	conflicted := map[string]bool{}
	checks := make(map[string]healthCheck, len(keys))
	freed := false
	for _, k := range keys {
		o, hc, _ := p.serviceObjects(k)
		checks[k] = hc
		o, lost := owners.claim(k, o)
		if len(lost) > 0 {
			conflicted[k] = true
			p.log.Warn("Service left without addresses another Service holds", "service", k, "keys", lost)
		}
		old := p.programmed[k]
		if renderTable("", []objects{old}) == renderTable("", []objects{o}) {
			continue
		}
		freed = freed || released(old, o)
		changes = append(changes, change{old: old, new: o})
		next[k] = o
	}
	if len(changes) > 0 {
		if err := p.table.update(changes); err != nil {
			return err
		}
	}
	var stale []netip.Addr
	for _, ch := range changes {
		stale = append(stale, staleUDP(ch.old, ch.new)...)
		p.choosers.release(ch.old, ch.new)
	}
	p.clearUDPFlows(stale)
	p.health.update(checks, false)
	was := make(map[string]objects, len(next))
	for k := range next {
		was[k] = p.programmed[k]
	}
	p.owners.moveKeys(was, next)
	for k, o := range next {
		if len(o.chains) == 0 && len(o.elems) == 0 {
			delete(p.programmed, k)
		} else {
			p.programmed[k] = o
		}
	}
	for _, k := range keys {
		delete(p.conflicted, k)
	}
	for k := range conflicted {
		p.conflicted[k] = true
	}
	// A key given up may be one a Service went without: let those try
	// again.
	if freed {
		for k := range p.conflicted {
			if !dirty[k] {
				p.markDirty(k)
			}
		}
	}
	return nil
}

// serviceObjects is what the Service key needs in the table now, and
// of the health server; false when it needs nothing in the table (gone,
// headless, ExternalName).
func (p *Proxier) serviceObjects(key string) (objects, healthCheck, bool) {
	obj, exists, err := p.services.GetByKey(key)
	if err != nil || !exists {
		return objects{}, healthCheck{}, false
	}
	svc := obj.(*corev1.Service)
	sliceObjs, err := p.slices.ByIndex(client.SliceServiceIndex, key)
	if err != nil {
		p.log.Error("list EndpointSlices of a Service", "service", key, "err", err)
	}
	eps := make([]*discoveryv1.EndpointSlice, 0, len(sliceObjs))
	for _, o := range sliceObjs {
		eps = append(eps, o.(*discoveryv1.EndpointSlice))
	}
	ports := servicePorts(svc, eps, p.nodeName, p.syncZone)
	if len(ports) == 0 {
		return objects{}, healthCheck{}, false
	}
	out := objects{elems: []elem{clusterIPElem(ports[0].clusterIP)}}
	for i := range ports {
		serviceObjects(&out, &ports[i], p.rc, p.choosers)
	}
	var hc healthCheck
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		hc = serviceHealthCheck(svc.Spec.HealthCheckNodePort, ports)
	}
	return out, hc, true
}
