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

// Unit keys: each unit's objects are programmed, and diffed, apart. A
// shared set's unit key is the set's own key.
const (
	unitBase      = "base"
	unitPolicy    = "policy:"
	unitNamespace = "namespace:"
	unitPod       = "pod:"
)

// dirty is what a batch of changes may have changed.
type dirty struct {
	policies map[string]bool
	// sets are shared sets whose members may have changed; setUnits
	// the shared sets to write again (changed, new or gone).
	sets       map[string]bool
	setUnits   map[string]bool
	namespaces map[string]bool // dispatch chains
	ips        map[netip.Addr]bool
}

func newDirty() dirty {
	return dirty{policies: map[string]bool{}, sets: map[string]bool{}, setUnits: map[string]bool{},
		namespaces: map[string]bool{}, ips: map[netip.Addr]bool{}}
}

// resetSets forgets every compiled policy and shared set, for a full
// sync to build them all again.
func (e *Enforcer) resetSets() {
	e.compiled = map[string]*compiledPolicy{}
	e.byNS = map[string]map[string]*compiledPolicy{}
	e.sets = newSharedSets()
	e.portSets = map[string]portSet{}
	e.users = map[string]map[string]bool{}
	e.selTypes = map[string]*[2]int{}
	e.selsByNS = map[string]map[string]bool{}
	e.podUnits = map[netip.Addr]*pod{}
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
		e.log.Info(FullSyncLog, "tables", e.tables.name, "bridge", e.bridge, "policies", len(e.compiled),
			"localPods", len(e.podUnits), "bridgeMAC", e.programmedMAC, "took", took)
	} else if changed > 0 {
		e.log.Debug("synced network policy rules", "events", len(events), "units", changed, "took", took)
	}
	return nil
}

// apply brings the model's view up to date with events and says which
// policies and shared sets they may have changed (nothing, for a full
// sync, which redoes all).
func (e *Enforcer) apply(events []event, full bool) dirty {
	d := newDirty()
	for _, ev := range events {
		switch ev.kind {
		case podEvent:
			old := e.world.pod(ev.namespace, ev.name)
			if !full {
				e.podConcerns(old, ev.pod, d)
			}
			if old != nil {
				e.world.deletePod(ev.namespace, ev.name)
				if old.local {
					d.ips[old.ip] = true
					e.unindexLocal(old)
				}
			}
			if p := ev.pod; p != nil {
				e.world.setPod(p)
				if p.local {
					d.ips[p.ip] = true
					m := e.localByIP[p.ip]
					if m == nil {
						m = map[string]*pod{}
						e.localByIP[p.ip] = m
					}
					m[p.key()] = p
				}
			}
		case namespaceEvent:
			old, had := e.world.namespaces[ev.name]
			if !full {
				for key, ps := range e.sets.peers {
					if (had && ps.concernsNamespace(old)) || (ev.labels != nil && ps.concernsNamespace(ev.labels)) {
						d.sets[key] = true
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

// podConcerns notes the shared sets a pod's change (from old to new,
// either nil) may change.
func (e *Enforcer) podConcerns(old, new *pod, d dirty) {
	for _, p := range []*pod{old, new} {
		if p == nil {
			continue
		}
		nsl := e.world.namespaces[p.namespace]
		for key, s := range e.sets.selections {
			if s.concerns(p) {
				d.sets[key] = true
			}
		}
		for key, s := range e.sets.peers {
			if s.concerns(p, nsl) {
				d.sets[key] = true
			}
		}
	}
	for key, pp := range e.policies {
		if pp.anyPod {
			d.policies[key] = true
		}
	}
}

func (e *Enforcer) unindexLocal(p *pod) {
	if m := e.localByIP[p.ip]; m != nil {
		delete(m, p.key())
		if len(m) == 0 {
			delete(e.localByIP, p.ip)
		}
	}
}

// refreshSets computes the shared sets d names again. A selection's
// pods that come or go change how their addresses are treated; and a
// policy with named ports resolves them on the pods of its sets.
func (e *Enforcer) refreshSets(d dirty) {
	for key := range d.sets {
		if s := e.sets.selections[key]; s != nil {
			for _, a := range s.ips {
				d.ips[a] = true
			}
			s.compute(e.world)
			for _, a := range s.ips {
				d.ips[a] = true
			}
		} else if s := e.sets.peers[key]; s != nil {
			s.compute(e.world)
		} else {
			continue
		}
		d.setUnits[key] = true
		for policy := range e.users[key] {
			if c := e.compiled[policy]; c != nil && namedOn(c, key) {
				d.policies[policy] = true
			}
		}
	}
}

// namedOn says whether a policy resolves named ports on the pods of the
// shared set key: its selection, for ingress rules; a rule's peers, for
// egress.
func namedOn(c *compiledPolicy, key string) bool {
	for _, r := range c.rules[ingress] {
		if r.hasNamed && c.selection.key == key {
			return true
		}
	}
	for _, r := range c.rules[egress] {
		if r.hasNamed && !r.allPeers && r.peers.key == key {
			return true
		}
	}
	return false
}

// recompile compiles a policy anew (or drops it, gone), keeps the
// shared sets' users up to date, and notes what that may change.
func (e *Enforcer) recompile(key string, d dirty) {
	old := e.compiled[key]
	var c *compiledPolicy
	if pp := e.policies[key]; pp != nil {
		c = compile(pp, e.world, e.sets)
		if len(c.problems) > 0 && (old == nil || !slices.Equal(old.problems, c.problems)) {
			e.log.Warn("NetworkPolicy partly unreadable: the parts named allow nothing", "policy", key, "problems", c.problems)
		}
	}
	var oldKeys, newKeys []string
	if old != nil {
		oldKeys = setKeys(old)
		e.countSelection(old, -1, d)
	}
	if c != nil {
		newKeys = setKeys(c)
		for dir := ingress; dir <= egress; dir++ {
			for _, r := range c.rules[dir] {
				if !r.allPorts && len(r.ports.ports) > 0 {
					e.portSets[r.ports.key] = r.ports
				}
			}
		}
	}
	for _, k := range newKeys {
		if e.users[k] == nil {
			e.users[k] = map[string]bool{}
			d.setUnits[k] = true
		}
		e.users[k][key] = true
	}
	for _, k := range oldKeys {
		if slices.Contains(newKeys, k) {
			continue
		}
		delete(e.users[k], key)
		if len(e.users[k]) == 0 {
			delete(e.users, k)
			delete(e.sets.selections, k)
			delete(e.sets.peers, k)
			delete(e.portSets, k)
			d.setUnits[k] = true
		}
	}
	if c != nil {
		e.countSelection(c, 1, d)
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

// countSelection adds (delta 1) or takes away (-1) a policy's use of
// its selection, by the directions it isolates in; the selected pods'
// treatment may change.
func (e *Enforcer) countSelection(c *compiledPolicy, delta int, d dirty) {
	s := c.selection
	t := e.selTypes[s.key]
	if t == nil {
		t = &[2]int{}
		e.selTypes[s.key] = t
	}
	for dir := ingress; dir <= egress; dir++ {
		if c.types[dir] {
			t[dir] += delta
		}
	}
	if t[ingress] <= 0 && t[egress] <= 0 {
		delete(e.selTypes, s.key)
		if delete(e.selsByNS[s.namespace], s.key); len(e.selsByNS[s.namespace]) == 0 {
			delete(e.selsByNS, s.namespace)
		}
	} else {
		if e.selsByNS[s.namespace] == nil {
			e.selsByNS[s.namespace] = map[string]bool{}
		}
		e.selsByNS[s.namespace][s.key] = true
	}
	for _, a := range s.ips {
		d.ips[a] = true
	}
}

// policyUnit is a policy's objects, and keeps its named ports' numbers
// to those it uses.
func (e *Enforcer) policyUnit(key string) objects {
	c := e.compiled[key]
	var o objects
	var keys []string
	if c != nil {
		o, keys = policyObjects(c, e.ids)
	}
	for _, k := range e.namedKeys[key] {
		if !slices.Contains(keys, k) {
			e.ids.release(k)
		}
	}
	if len(keys) == 0 {
		delete(e.namedKeys, key)
	} else {
		e.namedKeys[key] = keys
	}
	return o
}

// setUnit is a shared set's elements; nothing, and its number freed,
// once no policy uses it.
func (e *Enforcer) setUnit(key string) objects {
	if len(e.users[key]) == 0 {
		e.ids.release(key)
		return objects{}
	}
	if s := e.sets.selections[key]; s != nil {
		return selectionObjects(s, e.ids.get(key))
	}
	if s := e.sets.peers[key]; s != nil {
		return peerSetObjects(s, e.ids.get(key))
	}
	if s, ok := e.portSets[key]; ok {
		return portSetObjects(s, e.ids.get(key))
	}
	return objects{}
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
	lp := localPod{namespace: p.namespace, ip: a}
	for key := range e.selsByNS[p.namespace] {
		t := e.selTypes[key]
		s := e.sets.selections[key]
		if t == nil || s == nil || !s.has(a) {
			continue
		}
		for dir := ingress; dir <= egress; dir++ {
			lp.isolated[dir] = lp.isolated[dir] || t[dir] > 0
		}
	}
	switch l := e.linkOf(p); l.kind {
	case linkBridged:
		if e.bridge == "" {
			e.bridge = l.bridge // the first pod on a bridge names it
		}
		if l.bridge == e.bridge {
			lp.port = l.port
		} else {
			e.noteLink(p.key(), p.uid, podLink{kind: linkUnpoliced,
				why: fmt.Sprintf("its veth %s is on bridge %s, not %s, the one policed", l.port, l.bridge, e.bridge)})
		}
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
	for _, k := range slices.Collect(maps.Keys(e.users)) {
		e.ids.release(k)
	}
	e.resetSets()
	d := newDirty()
	keys := slices.Sorted(maps.Keys(e.policies))
	for _, k := range keys {
		e.recompile(k, d)
	}
	for k, named := range e.namedKeys {
		if e.policies[k] == nil {
			for _, id := range named {
				e.ids.release(id)
			}
			delete(e.namedKeys, k)
		}
	}
	units := map[string]objects{unitBase: e.baseUnit(mac)}
	for _, k := range slices.Sorted(maps.Keys(e.users)) {
		units[k] = e.setUnit(k)
	}
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
	e.refreshSets(d)
	for _, k := range slices.Sorted(maps.Keys(d.policies)) {
		e.recompile(k, d)
	}
	units := map[string]objects{unitBase: e.baseUnit(mac)}
	// Sets first: a set given up frees its number, which a policy's
	// chain may take.
	for k := range d.setUnits {
		units[k] = e.setUnit(k)
	}
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
