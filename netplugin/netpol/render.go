package netpol

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// chainText is a chain in nft's syntax, rules one per line.
func chainText(c chainDef) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s chain %s {\n", c.fam, c.name)
	if c.hook != nil {
		fmt.Fprintf(&b, "\ttype %s hook %s priority %d; policy accept;\n", c.hook.typ, c.hook.hookName, c.hook.prio0)
	}
	for _, r := range c.rules {
		fmt.Fprintf(&b, "\t%s\n", r)
	}
	b.WriteString("}\n")
	return b.String()
}

// renderTables is what all puts in the two tables, in a stable text form
// close to `nft list table`: the fixed sets, the chains in the order
// given, then the sets' elements sorted.
func renderTables(name string, all []objects) string {
	var b strings.Builder
	fmt.Fprintf(&b, "tables ip %s, bridge %s\n", name, name)
	defs := setDefs(nil, nil)
	for _, fam := range []family{famIP, famBridge} {
		for _, n := range slices.Sorted(maps.Keys(defs[fam])) {
			b.WriteString(setText(fam, defs[fam][n]))
		}
	}
	var elems []string
	for _, o := range all {
		for _, c := range o.chains {
			b.WriteString(chainText(c))
		}
		for _, e := range o.elems {
			elems = append(elems, e.String())
		}
	}
	slices.Sort(elems)
	for _, e := range elems {
		fmt.Fprintf(&b, "element %s\n", e)
	}
	return b.String()
}
