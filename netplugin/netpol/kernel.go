package netpol

import (
	"fmt"
	"maps"
	"slices"

	"github.com/google/nftables"
)

// kernelTables writes the two tables through one nftables netlink
// connection. Every write is one transaction, both tables in it: the
// kernel applies all of it or none, and packets see the tables before
// or after, never between.
type kernelTables struct {
	conn   *nftConn
	name   string
	tables map[family]*nftables.Table
	sets   map[family]map[string]*nftables.Set
}

func newKernelTables(conn *nftConn, name string) *kernelTables {
	ip := &nftables.Table{Name: name, Family: nftables.TableFamilyIPv4}
	br := &nftables.Table{Name: name, Family: nftables.TableFamilyBridge}
	return &kernelTables{conn: conn, name: name,
		tables: map[family]*nftables.Table{famIP: ip, famBridge: br}, sets: setDefs(ip, br)}
}

func (k *kernelTables) chain(fam family, name string) *nftables.Chain {
	return &nftables.Chain{Name: name, Table: k.tables[fam]}
}

func (k *kernelTables) addChain(c chainDef) {
	ch := k.chain(c.fam, c.name)
	if c.hook != nil {
		accept := nftables.ChainPolicyAccept
		ch.Type, ch.Hooknum, ch.Priority, ch.Policy = c.hook.typ, c.hook.num, c.hook.prio, &accept
	}
	k.conn.AddChain(ch)
}

func (k *kernelTables) addRules(c chainDef) {
	ch := k.chain(c.fam, c.name)
	for _, r := range c.rules {
		k.conn.AddRule(&nftables.Rule{Table: k.tables[c.fam], Chain: ch, Exprs: r.exprs})
	}
}

// setElems adds (or deletes) elements, in messages of their own (see
// elemsMessage): deletions first in the transaction, additions last,
// after the chains they go to.
func (k *kernelTables) setElems(elems []elem, add bool) {
	type setKey struct {
		fam family
		set string
	}
	bySet := map[setKey][]elem{}
	for _, e := range elems {
		sk := setKey{e.fam, e.set}
		bySet[sk] = append(bySet[sk], e)
	}
	keys := slices.SortedFunc(maps.Keys(bySet), func(a, b setKey) int {
		if a.fam != b.fam {
			return int(a.fam) - int(b.fam)
		}
		if a.set < b.set {
			return -1
		}
		if a.set > b.set {
			return 1
		}
		return 0
	})
	for _, sk := range keys {
		for chunk := range slices.Chunk(bySet[sk], elemsPerMessage) {
			m := elemsMessage(sk.fam, k.name, sk.set, chunk, add)
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
// silently keeps only what fits of a longer one.
const elemsPerMessage = 128

// replace builds both tables anew, deleting what was there, in one
// transaction.
func (k *kernelTables) replace(all []objects) error {
	c := k.conn
	for _, fam := range []family{famIP, famBridge} {
		c.AddTable(k.tables[fam]) // so that the delete cannot fail on a first start
		c.DelTable(k.tables[fam])
		c.AddTable(k.tables[fam])
		for _, name := range slices.Sorted(maps.Keys(k.sets[fam])) {
			if err := c.AddSet(k.sets[fam][name], nil); err != nil {
				c.Discard()
				return fmt.Errorf("add set %s: %w", name, err)
			}
		}
	}
	// Chains first: rules and map elements go to them.
	var elems []elem
	for _, o := range all {
		for _, ch := range o.chains {
			k.addChain(ch)
		}
		elems = append(elems, o.elems...)
	}
	for _, o := range all {
		for _, ch := range o.chains {
			k.addRules(ch)
		}
	}
	k.setElems(elems, true)
	return k.flush()
}

// update changes the tables from what old describes to what new does,
// per unit, touching only chains and elements that differ, in one
// transaction. The steps are ordered so that nothing is deleted while
// still referred to and nothing is referred to before it exists.
func (k *kernelTables) update(changes []change) error {
	var d objectDiff
	for _, ch := range changes {
		d.add(ch.old, ch.new)
	}
	k.setElems(d.delElems, false)
	for _, c := range d.flushChains {
		k.conn.FlushChain(k.chain(c.fam, c.name))
	}
	for _, c := range d.delChains {
		k.conn.DelChain(k.chain(c.fam, c.name))
	}
	for _, c := range d.addChains {
		k.addChain(c)
	}
	for _, c := range d.writeChains {
		k.addRules(c)
	}
	k.setElems(d.addElems, true)
	return k.flush()
}

func (k *kernelTables) flush() error {
	if err := k.conn.Commit(); err != nil {
		return fmt.Errorf("write nftables tables ip and bridge %s: %w", k.name, err)
	}
	return nil
}

// delete removes both tables; one that is not there is not an error.
func (k *kernelTables) delete() error {
	for _, fam := range []family{famIP, famBridge} {
		k.conn.AddTable(k.tables[fam])
		k.conn.DelTable(k.tables[fam])
	}
	if err := k.conn.Commit(); err != nil {
		return fmt.Errorf("delete nftables tables ip and bridge %s: %w", k.name, err)
	}
	return nil
}

// change is one unit's objects before and after.
type change struct{ old, new objects }

// objectDiff is what an incremental update does, step by step.
type objectDiff struct {
	delElems, addElems []elem
	flushChains        []chainDef // changed or removed
	delChains          []chainDef // removed
	addChains          []chainDef // new, still empty
	writeChains        []chainDef // new or changed: their rules
}

func (d *objectDiff) add(old, new objects) {
	oldElems := map[string]elem{}
	for _, e := range old.elems {
		oldElems[e.id()] = e
	}
	newElems := map[string]bool{}
	for _, e := range new.elems {
		id := e.id()
		newElems[id] = true
		o, ok := oldElems[id]
		if ok && o.String() == e.String() {
			continue
		}
		if ok {
			d.delElems = append(d.delElems, o)
		}
		d.addElems = append(d.addElems, e)
	}
	for id, e := range oldElems {
		if !newElems[id] {
			d.delElems = append(d.delElems, e)
		}
	}
	type chainKey struct {
		fam  family
		name string
	}
	oldChains := map[chainKey]chainDef{}
	for _, c := range old.chains {
		oldChains[chainKey{c.fam, c.name}] = c
	}
	newChains := map[chainKey]bool{}
	for _, c := range new.chains {
		ck := chainKey{c.fam, c.name}
		newChains[ck] = true
		o, ok := oldChains[ck]
		switch {
		case !ok:
			d.addChains = append(d.addChains, c)
			d.writeChains = append(d.writeChains, c)
		case chainText(o) != chainText(c):
			d.flushChains = append(d.flushChains, c)
			d.writeChains = append(d.writeChains, c)
		}
	}
	for _, c := range old.chains {
		if !newChains[chainKey{c.fam, c.name}] {
			d.flushChains = append(d.flushChains, c)
			d.delChains = append(d.delChains, c)
		}
	}
}
