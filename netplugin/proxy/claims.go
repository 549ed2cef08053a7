package proxy

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// A map key (address, protocol, port) can be asked for by two Services:
// two LoadBalancer Services on the same port get the same node address,
// and externalIPs are whatever users write, another Service's cluster IP
// included. The kernel refuses a second element with the same key and
// the whole transaction with it, so one such Service would stop every
// update. Instead the older Service keeps the key and the other goes
// without it until the key is free, as the first rule of a chain wins in
// kube-proxy's iptables mode.

// keyOwners maps an element's map and key to the Service that holds it.
type keyOwners map[string]string

func elemKey(e elem) string { return e.set + " " + e.keyText }

// claimable says whether e's key could be asked for by two Services: the
// endpoint maps' keys hold a chooser's own number, so no other Service
// has them.
func claimable(e elem) bool { return !isChoiceMap(e.set) }

// claimer hands out keys in one sync. held is who holds which key in the
// table (Proxier.owners); what it says of the Services in skip, those
// being recomputed, no longer counts. taken is what this sync gave out.
type claimer struct {
	held  keyOwners
	skip  map[string]bool
	taken keyOwners
}

func newClaimer(held keyOwners, skip map[string]bool) *claimer {
	return &claimer{held: held, skip: skip, taken: keyOwners{}}
}

func (c *claimer) owner(k string) (string, bool) {
	if o, ok := c.taken[k]; ok {
		return o, true
	}
	if o, ok := c.held[k]; ok && !c.skip[o] {
		return o, true
	}
	return "", false
}

// claim takes for svc the keys of o's elements that nobody else holds,
// and drops the others from o; it reports the keys it could not take.
// A firewall element goes with the address it guards: a Service that
// lost an address to another does not filter that one's clients.
func (c *claimer) claim(svc string, o objects) (objects, []string) {
	var lost []string
	var lostAddrs map[string]bool // keyText of the address keys lost
	var kept []elem               // nil until an element is dropped
	drop := func(i int) {
		if kept == nil {
			kept = append(make([]elem, 0, len(o.elems)), o.elems[:i]...)
		}
	}
	for i, e := range o.elems {
		if claimable(e) && e.set != mapFirewallIPs {
			k := elemKey(e)
			owner, ok := c.owner(k)
			if !ok {
				c.taken[k] = svc
			} else {
				if owner != svc { // (svc's own duplicate: an external IP equal to its cluster IP)
					lost = append(lost, k+" (held by "+owner+")")
					if lostAddrs == nil {
						lostAddrs = map[string]bool{}
					}
					lostAddrs[e.keyText] = true
				}
				drop(i)
				continue
			}
		}
		if kept != nil {
			kept = append(kept, e)
		}
	}
	if kept != nil {
		o.elems = kept
		kept = nil
	}
	for i, e := range o.elems {
		if e.set == mapFirewallIPs {
			k := elemKey(e)
			if owner, ok := c.owner(k); lostAddrs[e.keyText] || ok && owner != svc {
				drop(i)
				continue
			}
			c.taken[k] = svc
		}
		if kept != nil {
			kept = append(kept, e)
		}
	}
	if kept != nil {
		o.elems = kept
	}
	return o, lost
}

// moveKeys updates held for Services whose objects went from old to new.
// Every release comes before any take: two Services may swap a key.
func (ow keyOwners) moveKeys(old, new map[string]objects) {
	for svc, o := range old {
		for _, e := range o.elems {
			if !claimable(e) {
				continue
			}
			if k := elemKey(e); ow[k] == svc {
				delete(ow, k)
			}
		}
	}
	for svc, o := range new {
		for _, e := range o.elems {
			if claimable(e) {
				ow[elemKey(e)] = svc
			}
		}
	}
}

// byAge sorts Service keys oldest first (then by key), the order in
// which they claim keys.
func (p *Proxier) byAge(keys []string) {
	created := func(key string) int64 {
		obj, ok, _ := p.services.GetByKey(key)
		if !ok {
			return 0
		}
		return obj.(*corev1.Service).CreationTimestamp.UnixNano()
	}
	slices.SortFunc(keys, func(a, b string) int {
		if ca, cb := created(a), created(b); ca != cb {
			if ca < cb {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
}

// released reports whether new lacks a key old had.
func released(old, new objects) bool {
	have := map[string]bool{}
	for _, e := range new.elems {
		have[elemKey(e)] = true
	}
	for _, e := range old.elems {
		if claimable(e) && !have[elemKey(e)] {
			return true
		}
	}
	return false
}
