package proxy

import (
	"encoding/binary"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// kernelTable writes the proxy's table through one nftables netlink
// connection. Every write is one transaction: the kernel applies all of
// it or none.
type kernelTable struct {
	conn  *nftConn
	table *nftables.Table
	maps  map[string]*nftables.Set
	// batchSets are the affinity sets added in the transaction being
	// built; rules refer to them by ID, as they have no handle yet.
	batchSets map[string]*nftables.Set
	// hairpinRefs counts the Services whose rules use each endpoint
	// address: its hairpin element goes when the last one lets it go.
	hairpinRefs map[netip.Addr]int
}

func newKernelTable(conn *nftConn, name string) *kernelTable {
	t := &nftables.Table{Name: name, Family: nftables.TableFamilyIPv4}
	return &kernelTable{conn: conn, table: t, maps: namedSets(t), hairpinRefs: map[netip.Addr]int{}}
}

func (k *kernelTable) chain(name string) *nftables.Chain {
	return &nftables.Chain{Name: name, Table: k.table}
}

func (k *kernelTable) addChain(c chainDef) {
	ch := k.chain(c.name)
	if c.hook != nil {
		accept := nftables.ChainPolicyAccept
		ch.Type, ch.Hooknum, ch.Priority, ch.Policy = c.hook.typ, c.hook.num, c.hook.prio, &accept
	}
	k.conn.AddChain(ch)
}

// addSet adds an affinity set.
func (k *kernelTable) addSet(s setDef) error {
	set := &nftables.Set{Table: k.table, Name: s.name, KeyType: nftables.TypeIPAddr,
		HasTimeout: true, Timeout: s.timeout, Dynamic: true, Comment: s.comment}
	if err := k.conn.AddSet(set, nil); err != nil {
		return fmt.Errorf("add set %s: %w", s.name, err)
	}
	k.batchSets[s.name] = set
	return nil
}

func (k *kernelTable) delSet(name string) {
	k.conn.DelSet(&nftables.Set{Table: k.table, Name: name})
}

// addRules appends rules to a chain. Rules refer to sets made in the same
// transaction by ID as well as by name.
func (k *kernelTable) addRules(chain string, rules []*rule) {
	ch := k.chain(chain)
	for _, r := range rules {
		exprs := slices.Clone(r.exprs)
		for i, e := range exprs {
			switch e := e.(type) {
			case *expr.Lookup:
				if s := k.batchSets[e.SetName]; s != nil {
					lk := *e
					lk.SetID = s.ID
					exprs[i] = &lk
				}
			case *expr.Dynset:
				if s := k.batchSets[e.SetName]; s != nil {
					ds := *e
					ds.SetID = s.ID
					exprs[i] = &ds
				}
			}
		}
		k.conn.AddRule(&nftables.Rule{Table: k.table, Chain: ch, Exprs: exprs})
	}
}

// setElems adds (or deletes) elements of the table's shared sets and
// maps, in messages of their own (see elemsMessage): deletions first in
// the transaction, additions last, after the chains they go to.
func (k *kernelTable) setElems(elems []elem, add bool) {
	count := map[string]int{}
	for _, e := range elems {
		count[e.set]++
	}
	bySet := make(map[string][]elem, len(count))
	for name, n := range count {
		bySet[name] = make([]elem, 0, n)
	}
	for _, e := range elems {
		bySet[e.set] = append(bySet[e.set], e)
	}
	for _, name := range slices.Sorted(maps.Keys(bySet)) {
		for chunk := range slices.Chunk(bySet[name], elemsPerMessage) {
			m := elemsMessage(k.table.Name, name, chunk, add)
			if add {
				k.conn.Post = append(k.conn.Post, m)
			} else {
				k.conn.Pre = append(k.conn.Pre, m)
			}
		}
	}
}

// elemsPerMessage keeps a message's element list, one netlink attribute,
// within the 64 KiB an attribute's 16-bit length can say: the kernel
// silently keeps only what fits of a longer one. 128 elements of the
// longest keys and chain names fit.
const elemsPerMessage = 128

// replace builds the whole table anew, deleting what was there, in one
// transaction: packets see the old table or the new one.
func (k *kernelTable) replace(all []objects) error {
	k.batchSets = map[string]*nftables.Set{}
	c := k.conn
	c.AddTable(k.table) // so that the delete cannot fail on a first start
	c.DelTable(k.table)
	c.AddTable(k.table)
	for _, name := range slices.Sorted(maps.Keys(k.maps)) {
		if err := c.AddSet(k.maps[name], nil); err != nil {
			c.Discard()
			return fmt.Errorf("add map %s: %w", name, err)
		}
	}
	// Chains first: the endpoint maps' elements go to them.
	n := 0
	for _, o := range all {
		n += len(o.elems)
	}
	elems := make([]elem, 0, n)
	for _, o := range all {
		for _, ch := range o.chains {
			k.addChain(ch)
		}
		elems = append(elems, o.elems...)
	}
	for _, o := range all {
		for _, s := range o.sets {
			if err := k.addSet(s); err != nil {
				c.Discard()
				return err
			}
		}
	}
	for _, o := range all {
		for _, ch := range o.chains {
			k.addRules(ch.name, ch.rules)
		}
	}
	k.setElems(elems, true)
	refs := map[netip.Addr]int{}
	for _, o := range all {
		for _, a := range o.hairpin {
			refs[a]++
		}
	}
	k.hairpinElems(slices.Collect(maps.Keys(refs)), true)
	if err := k.flush(); err != nil {
		return err
	}
	k.hairpinRefs = refs
	return nil
}

// hairpinElems adds or deletes addresses' elements of the hairpin set.
func (k *kernelTable) hairpinElems(addrs []netip.Addr, add bool) {
	var elems []elem
	for _, a := range addrs {
		elems = append(elems, elem{set: setHairpin, key: hairpinKey(a)})
	}
	k.setElems(elems, add)
}

// update changes the table from what old describes to what new does, per
// service, touching only chains, sets and map elements that differ, in
// one transaction. The steps are ordered so that nothing is deleted while
// still referred to and nothing is referred to before it exists.
func (k *kernelTable) update(changes []change) error {
	k.batchSets = map[string]*nftables.Set{}
	var d objectDiff
	for _, ch := range changes {
		d.add(ch.old, ch.new)
	}
	k.setElems(d.delElems, false)
	for _, name := range d.flushChains {
		k.conn.FlushChain(k.chain(name))
	}
	for _, name := range d.delSets { // before the chains their maps go to
		k.delSet(name)
	}
	for _, name := range d.delChains {
		k.conn.DelChain(k.chain(name))
	}
	for _, ch := range d.addChains {
		k.addChain(ch)
	}
	for _, s := range d.addSets {
		if err := k.addSet(s); err != nil {
			k.conn.Discard()
			return err
		}
	}
	for _, ch := range d.writeChains {
		k.addRules(ch.name, ch.rules)
	}
	k.setElems(d.addElems, true)
	refs := map[netip.Addr]int{}
	for _, ch := range changes {
		for _, a := range ch.old.hairpin {
			refs[a]--
		}
		for _, a := range ch.new.hairpin {
			refs[a]++
		}
	}
	var gone, come []netip.Addr
	for a, delta := range refs {
		before := k.hairpinRefs[a]
		refs[a] = before + delta
		switch {
		case before > 0 && refs[a] <= 0:
			gone = append(gone, a)
		case before <= 0 && refs[a] > 0:
			come = append(come, a)
		}
	}
	k.hairpinElems(gone, false)
	k.hairpinElems(come, true)
	if err := k.flush(); err != nil {
		return err
	}
	for a, n := range refs {
		if n <= 0 {
			delete(k.hairpinRefs, a)
		} else {
			k.hairpinRefs[a] = n
		}
	}
	return nil
}

func (k *kernelTable) flush() error {
	if err := k.conn.Commit(); err != nil {
		return fmt.Errorf("write nftables table ip %s: %w", k.table.Name, err)
	}
	return nil
}

// delete removes the table; one that is not there is not an error.
func (k *kernelTable) delete() error {
	k.conn.AddTable(k.table)
	k.conn.DelTable(k.table)
	if err := k.conn.Commit(); err != nil {
		return fmt.Errorf("delete nftables table ip %s: %w", k.table.Name, err)
	}
	return nil
}

// change is one Service's objects before and after.
type change struct{ old, new objects }

// objectDiff is what an incremental update does, step by step.
type objectDiff struct {
	delElems, addElems []elem
	flushChains        []string   // changed or removed
	delChains          []string   // removed
	addChains          []chainDef // new, still empty
	writeChains        []chainDef // new or changed: their rules
	delSets            []string
	addSets            []setDef
}

func (d *objectDiff) add(old, new objects) {
	oldElems := map[string]elem{}
	for _, e := range old.elems {
		oldElems[e.set+" "+e.keyText] = e
	}
	newElems := map[string]bool{}
	for _, e := range new.elems {
		k := e.set + " " + e.keyText
		newElems[k] = true
		if o, ok := oldElems[k]; ok && o.String() == e.String() {
			continue
		}
		if _, ok := oldElems[k]; ok {
			d.delElems = append(d.delElems, e)
		}
		d.addElems = append(d.addElems, e)
	}
	for k, e := range oldElems {
		if !newElems[k] {
			d.delElems = append(d.delElems, e)
		}
	}

	setChanged := false
	oldSets := map[string]setDef{}
	for _, s := range old.sets {
		oldSets[s.name] = s
	}
	newSets := map[string]bool{}
	for _, s := range new.sets {
		newSets[s.name] = true
		if o, ok := oldSets[s.name]; ok && o == s {
			continue
		} else if ok {
			d.delSets = append(d.delSets, s.name)
			// The set is deleted and made again: every rule that
			// refers to it must go first and come back after.
			setChanged = true
		}
		d.addSets = append(d.addSets, s)
	}
	for _, s := range old.sets {
		if !newSets[s.name] {
			d.delSets = append(d.delSets, s.name)
		}
	}
	oldChains := map[string]chainDef{}
	for _, c := range old.chains {
		oldChains[c.name] = c
	}
	newChains := map[string]bool{}
	for _, c := range new.chains {
		newChains[c.name] = true
		o, ok := oldChains[c.name]
		switch {
		case !ok:
			d.addChains = append(d.addChains, c)
			d.writeChains = append(d.writeChains, c)
		case setChanged || chainText(o) != chainText(c):
			d.flushChains = append(d.flushChains, c.name)
			d.writeChains = append(d.writeChains, c)
		}
	}
	for _, c := range old.chains {
		if !newChains[c.name] {
			d.flushChains = append(d.flushChains, c.name)
			d.delChains = append(d.delChains, c.name)
		}
	}
}

// EndpointTargets reads back from the kernel, through c, the addresses
// and ports that the proxy's table for bridge DNATs a Service port to
// under the Cluster policy; port is namespace/name/protocol/port-name, as
// in chain names. It finds the port's chooser number and map in its
// chain's rule. A port with no chain (no endpoints) has none.
func EndpointTargets(c *nftables.Conn, bridge, port string) ([]netip.AddrPort, error) {
	return readTargets(c, TableName(bridge), "service-"+port)
}

func readTargets(c *nftables.Conn, table, chain string) ([]netip.AddrPort, error) {
	t := &nftables.Table{Name: table, Family: nftables.TableFamilyIPv4}
	rules, err := c.GetRules(t, &nftables.Chain{Name: chain, Table: t})
	if err != nil {
		return nil, fmt.Errorf("rules of chain %s: %w", chain, err)
	}
	var id []byte
	var set string
	for _, r := range rules {
		for _, e := range r.Exprs {
			switch e := e.(type) {
			// (The kernel reports register 8 as 1, of which it is the
			// first 32 bits.)
			case *expr.Immediate:
				if len(e.Data) == 4 {
					id = e.Data
				}
			case *expr.Lookup:
				if strings.HasPrefix(e.SetName, mapEndpointTargets+"-") {
					set = e.SetName
				}
			}
		}
	}
	if set == "" || len(id) != 4 {
		return nil, fmt.Errorf("chain %s has no endpoint choice", chain)
	}
	s, err := c.GetSetByName(t, set)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", set, err)
	}
	elems, err := c.GetSetElements(s)
	if err != nil {
		return nil, fmt.Errorf("elements of %s: %w", set, err)
	}
	out := make([]netip.AddrPort, 0, len(elems))
	for _, e := range elems {
		if len(e.Key) != 8 || string(e.Key[:4]) != string(id) || len(e.Val) != 8 {
			continue
		}
		a, _ := netip.AddrFromSlice(e.Val[:4])
		out = append(out, netip.AddrPortFrom(a, binary.BigEndian.Uint16(e.Val[4:6])))
	}
	return out, nil
}
