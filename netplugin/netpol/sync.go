package netpol

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// FullSyncLog is the message logged after each full sync.
const FullSyncLog = "programmed the whole network policy tables"

// Unit keys: each unit's objects are programmed, and diffed, apart.
const (
	unitBase      = "base"
	unitPolicy    = "policy:"
	unitNamespace = "namespace:"
	unitPod       = "pod:"
)

// dirty is what a batch of events may have changed.
type dirty struct {
	policies   map[string]bool
	namespaces map[string]bool // dispatch chains
	ips        map[netip.Addr]bool
}

func newDirty() dirty {
	return dirty{policies: map[string]bool{}, namespaces: map[string]bool{}, ips: map[netip.Addr]bool{}}
}

// sync writes what changed since the last sync, or the whole tables when
// a full sync is due (the first, the hourly one, one after a failure).
func (e *Enforcer) sync() error {
	e.mu.Lock()
	events, full, upTo := e.events, e.needFull, e.queued
	e.events, e.needFull = nil, false
	e.mu.Unlock()

	start := time.Now()
	d := e.apply(events, full)
	mac := e.bridgeMAC()
	var err error
	var changed int
	if full {
		err = e.syncFull(mac)
	} else {
		changed, err = e.syncDirty(d, mac)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		// The kernel kept the tables as they were, which no longer
		// match what programmed says: start over whole.
		e.needFull = true
		e.lastErr = err
		return err
	}
	e.applied, e.lastErr = upTo, nil
	close(e.done)
	e.done = make(chan struct{})
	took := time.Since(start)
	if full {
		e.log.Info(FullSyncLog, "tables", TableName(e.bridge), "policies", len(e.compiled),
			"localPods", len(e.podUnits), "bridgeMAC", e.programmedMAC, "took", took)
	} else if changed > 0 {
		e.log.Debug("synced network policy rules", "events", len(events), "units", changed, "took", took)
	}
	return nil
}

// apply brings the model's view up to date with events and says what
// they may have changed (nothing, for a full sync, which redoes all).
func (e *Enforcer) apply(events []event, full bool) dirty {
	d := newDirty()
	for _, ev := range events {
		switch ev.kind {
		case podEvent:
			old := e.world.pod(ev.namespace, ev.name)
			if !full {
				nsl := e.world.namespaces[ev.namespace]
				for key, pp := range e.policies {
					if (old != nil && pp.concerns(old, nsl)) || (ev.pod != nil && pp.concerns(ev.pod, nsl)) {
						d.policies[key] = true
					}
				}
			}
			if old != nil {
				e.world.deletePod(ev.namespace, ev.name)
				if old.local {
					d.ips[old.ip] = true
					e.unindexLocal(old)
				}
			}
			if ev.pod != nil {
				e.world.setPod(ev.pod)
				if ev.pod.local {
					d.ips[ev.pod.ip] = true
					m := e.localByIP[ev.pod.ip]
					if m == nil {
						m = map[string]*pod{}
						e.localByIP[ev.pod.ip] = m
					}
					m[ev.pod.key()] = ev.pod
				}
			}
		case namespaceEvent:
			old, had := e.world.namespaces[ev.name]
			if !full {
				for key, pp := range e.policies {
					if (had && pp.concernsNamespace(old)) || (ev.labels != nil && pp.concernsNamespace(ev.labels)) {
						d.policies[key] = true
					}
				}
			}
			if ev.labels == nil {
				delete(e.world.namespaces, ev.name)
			} else {
				e.world.namespaces[ev.name] = ev.labels
			}
		case policyEvent:
			key := ev.namespace + "/" + ev.name
			if ev.policy == nil {
				delete(e.policies, key)
			} else {
				e.policies[key] = parsePolicy(ev.policy)
			}
			d.policies[key] = true
		}
	}
	return d
}

func (e *Enforcer) unindexLocal(p *pod) {
	if m := e.localByIP[p.ip]; m != nil {
		delete(m, p.key())
		if len(m) == 0 {
			delete(e.localByIP, p.ip)
		}
	}
}

// recompile compiles a policy anew (or drops it, gone) and notes the
// namespace and the local addresses whose treatment that may change.
func (e *Enforcer) recompile(key string, d dirty) {
	old := e.compiled[key]
	var c *compiledPolicy
	if pp := e.policies[key]; pp != nil {
		c = compile(pp, e.world)
		if len(c.problems) > 0 && (old == nil || !slices.Equal(old.problems, c.problems)) {
			e.log.Warn("NetworkPolicy partly unreadable: the parts named allow nothing", "policy", key, "problems", c.problems)
		}
	}
	for dir := ingress; dir <= egress; dir++ {
		if old != nil && old.types[dir] {
			for _, a := range old.selected {
				if e.isolated[dir][a]--; e.isolated[dir][a] <= 0 {
					delete(e.isolated[dir], a)
				}
				d.ips[a] = true
			}
		}
		if c != nil && c.types[dir] {
			for _, a := range c.selected {
				e.isolated[dir][a]++
				d.ips[a] = true
			}
		}
	}
	ns, _, _ := strings.Cut(key, "/")
	d.namespaces[ns] = true
	if c == nil {
		delete(e.compiled, key)
		if m := e.byNS[ns]; m != nil {
			delete(m, key)
			if len(m) == 0 {
				delete(e.byNS, ns)
			}
		}
		return
	}
	e.compiled[key] = c
	if e.byNS[ns] == nil {
		e.byNS[ns] = map[string]*compiledPolicy{}
	}
	e.byNS[ns][key] = c
}

// policyUnit is a policy's objects, and keeps its numbers to those it
// uses.
func (e *Enforcer) policyUnit(key string) objects {
	c := e.compiled[key]
	var o objects
	var keys []string
	if c != nil {
		o, keys = policyObjects(c, e.ids)
	}
	for _, k := range e.idKeys[key] {
		if !slices.Contains(keys, k) {
			e.ids.release(k)
		}
	}
	if len(keys) == 0 {
		delete(e.idKeys, key)
	} else {
		e.idKeys[key] = keys
	}
	return o
}

func (e *Enforcer) namespaceUnit(ns string) objects {
	m := e.byNS[ns]
	policies := make([]*compiledPolicy, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		policies = append(policies, m[k])
	}
	return namespaceObjects(ns, policies, e.ids)
}

// podUnit is the objects of the local pod at address a. Two pods with
// one address (one leaving as the other comes) cannot both have it: the
// first by namespace and name does.
func (e *Enforcer) podUnit(a netip.Addr) objects {
	m := e.localByIP[a]
	if len(m) == 0 {
		delete(e.podUnits, a)
		return objects{}
	}
	p := m[slices.Min(slices.Collect(maps.Keys(m)))]
	e.podUnits[a] = p
	lp := localPod{namespace: p.namespace, ip: a,
		isolated: [2]bool{e.isolated[ingress][a] > 0, e.isolated[egress][a] > 0}}
	if e.portName != nil && p.uid != "" {
		lp.port = e.portName(p.uid)
	}
	return podObjects(lp)
}

func (e *Enforcer) baseUnit(mac net.HardwareAddr) objects {
	return baseObjects(baseConfig{bridge: e.bridge, mac: mac})
}

// syncFull compiles every policy again and replaces the tables whole.
func (e *Enforcer) syncFull(mac net.HardwareAddr) error {
	units := e.rebuild(mac)
	all := make([]objects, 0, len(units))
	for _, k := range slices.Sorted(maps.Keys(units)) {
		all = append(all, units[k])
	}
	if err := e.tables.replace(all); err != nil {
		return err
	}
	for k, o := range units {
		if o.empty() {
			delete(units, k)
		}
	}
	e.programmed, e.programmedMAC = units, mac.String()
	return nil
}

// rebuild compiles every policy again and returns every unit's objects.
func (e *Enforcer) rebuild(mac net.HardwareAddr) map[string]objects {
	e.compiled, e.byNS = map[string]*compiledPolicy{}, map[string]map[string]*compiledPolicy{}
	e.isolated = [2]map[netip.Addr]int{{}, {}}
	e.podUnits = map[netip.Addr]*pod{}
	d := newDirty()
	keys := slices.Sorted(maps.Keys(e.policies))
	for _, k := range keys {
		e.recompile(k, d)
	}
	for k := range e.idKeys {
		if e.policies[k] == nil {
			for _, id := range e.idKeys[k] {
				e.ids.release(id)
			}
			delete(e.idKeys, k)
		}
	}
	units := map[string]objects{unitBase: e.baseUnit(mac)}
	for _, k := range keys {
		units[unitPolicy+k] = e.policyUnit(k)
	}
	for ns := range e.byNS {
		units[unitNamespace+ns] = e.namespaceUnit(ns)
	}
	for a := range e.localByIP {
		units[unitPod+a.String()] = e.podUnit(a)
	}
	return units
}

// syncDirty recomputes what d names and writes what differs from what
// the tables hold, in one transaction.
func (e *Enforcer) syncDirty(d dirty, mac net.HardwareAddr) (int, error) {
	for k := range d.policies {
		e.recompile(k, d)
	}
	units := map[string]objects{unitBase: e.baseUnit(mac)}
	for k := range d.policies {
		units[unitPolicy+k] = e.policyUnit(k)
	}
	for ns := range d.namespaces {
		units[unitNamespace+ns] = e.namespaceUnit(ns)
	}
	for a := range d.ips {
		units[unitPod+a.String()] = e.podUnit(a)
	}
	var changes []change
	next := map[string]objects{}
	for _, k := range slices.Sorted(maps.Keys(units)) {
		o, old := units[k], e.programmed[k]
		if unitText(old) == unitText(o) {
			continue
		}
		changes = append(changes, change{old: old, new: o})
		next[k] = o
	}
	if len(changes) == 0 {
		return 0, nil
	}
	if err := e.tables.update(changes); err != nil {
		return 0, err
	}
	for k, o := range next {
		if o.empty() {
			delete(e.programmed, k)
		} else {
			e.programmed[k] = o
		}
	}
	e.programmedMAC = mac.String()
	return len(changes), nil
}

// unitText is a unit's objects in the text form, to compare.
func unitText(o objects) string {
	var b strings.Builder
	for _, c := range o.chains {
		b.WriteString(chainText(c))
	}
	elems := make([]string, 0, len(o.elems))
	for _, e := range o.elems {
		elems = append(elems, e.String())
	}
	slices.Sort(elems)
	for _, e := range elems {
		fmt.Fprintln(&b, e)
	}
	return b.String()
}
