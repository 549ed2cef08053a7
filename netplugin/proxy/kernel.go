package proxy

import (
	"encoding/binary"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
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

func (k *kernelTable) addSet(s setDef) error {
	set := &nftables.Set{Table: k.table, Name: s.name, KeyType: nftables.TypeIPAddr,
		HasTimeout: true, Timeout: s.timeout, Dynamic: true, Comment: s.comment}
	var elems []nftables.SetElement
	switch {
	case s.targets != nil:
		set = k.targetsMap(s.name)
		set.Comment = s.comment
		for i, a := range s.targets {
			elems = append(elems, targetElems(i, len(s.targets), a)...)
		}
	case s.endpoints != nil:
		set = &nftables.Set{Table: k.table, Name: s.name, IsMap: true, KeyType: nftables.TypeInteger, DataType: nftables.TypeVerdict, Comment: s.comment}
		for i, c := range s.endpoints {
			// numgen writes its number in host byte order.
			elems = append(elems, nftables.SetElement{Key: binaryutil.NativeEndian.PutUint32(uint32(i)),
				VerdictData: &expr.Verdict{Kind: expr.VerdictGoto, Chain: c}})
		}
	}
	if err := k.conn.AddSet(set, elems); err != nil {
		return fmt.Errorf("add set %s: %w", s.name, err)
	}
	k.batchSets[s.name] = set
	return nil
}

// targetElems are endpoint i of n's elements of an endpoints map: the
// start of its range of numgen's number (big-endian, so that the kernel's
// byte-wise order is the numbers'), with the address . port to DNAT to,
// and the range's end. The end of one range and the start of the next
// share a key, told apart by the end flag, as nft writes them.
func targetElems(i, n int, a netip.AddrPort) []nftables.SetElement {
	lo, hi := targetRange(i, n)
	val := make([]byte, 8) // address . port, each in a 4-byte register
	copy(val, a.Addr().AsSlice())
	binary.BigEndian.PutUint16(val[4:], a.Port())
	return []nftables.SetElement{
		{Key: binaryutil.BigEndian.PutUint32(lo), Val: val},
		{Key: binaryutil.BigEndian.PutUint32(hi), IntervalEnd: true},
	}
}

// targetsMap is an endpoints map: an interval map from numgen's number
// to address . port.
func (k *kernelTable) targetsMap(name string) *nftables.Set {
	return &nftables.Set{Table: k.table, Name: name, IsMap: true, Interval: true, KeyType: nftables.TypeInteger,
		KeyByteOrder: binaryutil.BigEndian, DataType: nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetService)}
}

// retarget writes the elements of endpoints maps that changed in place.
// Their data are addresses, not verdicts: unlike a rule or a chain, the
// kernel has nothing to revalidate for them.
func (k *kernelTable) retarget(edits []targetEdit, add bool) error {
	bySet := map[string][]nftables.SetElement{}
	var order []string
	for _, e := range edits {
		if e.add != add {
			continue
		}
		if _, ok := bySet[e.set]; !ok {
			order = append(order, e.set)
		}
		bySet[e.set] = append(bySet[e.set], e.elems...)
	}
	for _, name := range order {
		if err := k.writeElems(k.targetsMap(name), bySet[name], add); err != nil {
			return err
		}
	}
	return nil
}

// writeElems adds or deletes elements of set, elemsPerMessage to a
// message.
func (k *kernelTable) writeElems(set *nftables.Set, elems []nftables.SetElement, add bool) error {
	for chunk := range slices.Chunk(elems, elemsPerMessage) {
		var err error
		if add {
			err = k.conn.SetAddElements(set, chunk)
		} else {
			err = k.conn.SetDeleteElements(set, chunk)
		}
		if err != nil {
			return fmt.Errorf("map %s: %w", set.Name, err)
		}
	}
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

func (k *kernelTable) setElems(elems []elem, add bool) error {
	bySet := map[string][]nftables.SetElement{}
	for _, e := range elems {
		se := nftables.SetElement{Key: e.key}
		if add {
			se.VerdictData = e.verdict
		}
		bySet[e.set] = append(bySet[e.set], se)
	}
	for name, se := range bySet {
		if err := k.writeElems(k.maps[name], se, add); err != nil {
			return err
		}
	}
	return nil
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
	for _, name := range []string{mapServiceIPs, mapServiceNodePorts, mapNoEndpointServices, mapNoEndpointNodePorts, setClusterIPs, setHairpin} {
		if err := c.AddSet(k.maps[name], nil); err != nil {
			return fmt.Errorf("add map %s: %w", name, err)
		}
	}
	// Chains first: the endpoint maps' elements go to them.
	var elems []elem
	for _, o := range all {
		for _, ch := range o.chains {
			k.addChain(ch)
		}
		elems = append(elems, o.elems...)
	}
	for _, o := range all {
		for _, s := range o.sets {
			if err := k.addSet(s); err != nil {
				return err
			}
		}
	}
	for _, o := range all {
		for _, ch := range o.chains {
			k.addRules(ch.name, ch.rules)
		}
	}
	if err := k.setElems(elems, true); err != nil {
		return err
	}
	refs := map[netip.Addr]int{}
	for _, o := range all {
		for _, a := range o.hairpin {
			refs[a]++
		}
	}
	if err := k.hairpinElems(slices.Collect(maps.Keys(refs)), true); err != nil {
		return err
	}
	if err := k.flush(); err != nil {
		return err
	}
	k.hairpinRefs = refs
	return nil
}

// hairpinElems adds or deletes addresses' elements of the hairpin set.
func (k *kernelTable) hairpinElems(addrs []netip.Addr, add bool) error {
	var elems []elem
	for _, a := range addrs {
		elems = append(elems, elem{set: setHairpin, key: hairpinKey(a)})
	}
	return k.setElems(elems, add)
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
	if err := k.setElems(d.delElems, false); err != nil {
		return err
	}
	if err := k.retarget(d.retarget, false); err != nil {
		return err
	}
	if err := k.retarget(d.retarget, true); err != nil {
		return err
	}
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
			return err
		}
	}
	for _, ch := range d.writeChains {
		k.addRules(ch.name, ch.rules)
	}
	if err := k.setElems(d.addElems, true); err != nil {
		return err
	}
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
	if err := k.hairpinElems(gone, false); err != nil {
		return err
	}
	if err := k.hairpinElems(come, true); err != nil {
		return err
	}
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
	if err := k.conn.flush(); err != nil {
		return fmt.Errorf("write nftables table ip %s: %w", k.table.Name, err)
	}
	return nil
}

// delete removes the table; one that is not there is not an error.
func (k *kernelTable) delete() error {
	k.conn.AddTable(k.table)
	k.conn.DelTable(k.table)
	if err := k.conn.flush(); err != nil {
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
	// retarget changes endpoints maps' elements in place: deletions
	// first, then additions.
	retarget []targetEdit
}

// targetEdit adds or deletes elements of an endpoints map.
type targetEdit struct {
	set   string
	elems []nftables.SetElement
	add   bool
}

// retargetMap edits an endpoints map from old's targets to new's. With
// the same count the ranges stay and only the changed ones' start
// elements (which carry the target) are written again; a different count
// moves every range.
func (d *objectDiff) retargetMap(name string, old, new []netip.AddrPort) {
	if len(old) == len(new) {
		for i := range old {
			if old[i] != new[i] {
				d.retarget = append(d.retarget,
					targetEdit{set: name, elems: targetElems(i, len(old), old[i])[:1]},
					targetEdit{set: name, elems: targetElems(i, len(new), new[i])[:1], add: true})
			}
		}
		return
	}
	for i, a := range old {
		d.retarget = append(d.retarget, targetEdit{set: name, elems: targetElems(i, len(old), a)})
	}
	for i, a := range new {
		d.retarget = append(d.retarget, targetEdit{set: name, elems: targetElems(i, len(new), a), add: true})
	}
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
		if o, ok := oldSets[s.name]; ok && o.equal(s) {
			continue
		} else if ok && o.targets != nil && s.targets != nil && o.timeout == s.timeout {
			// An endpoints map keeps its name and its rule: only
			// elements change.
			d.retargetMap(s.name, o.targets, s.targets)
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
