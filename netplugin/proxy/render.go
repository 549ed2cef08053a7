package proxy

import (
	"fmt"
	"slices"
	"strings"
)

// chainText is a chain in nft's syntax, rules one per line.
func chainText(c chainDef) string {
	var b strings.Builder
	fmt.Fprintf(&b, "chain %s {\n", c.name)
	if c.hook != nil {
		fmt.Fprintf(&b, "\ttype %s hook %s priority %s; policy accept;\n", c.hook.typ, c.hook.hookName, c.hook.prioName)
	}
	for _, r := range c.rules {
		fmt.Fprintf(&b, "\t%s\n", r)
	}
	b.WriteString("}\n")
	return b.String()
}

func setText(s setDef) string {
	return fmt.Sprintf("set %s { type ipv4_addr; flags dynamic,timeout; timeout %ds; comment %q; }\n", s.name, int(s.timeout.Seconds()), s.comment)
}

// renderTable is the table that all programs, in a stable text form
// close to `nft list table`: the fixed part, then each service port's
// sets and chains in the order given, then the maps' elements sorted.
func renderTable(name string, all []objects) string {
	var b strings.Builder
	fmt.Fprintf(&b, "table ip %s\n", name)
	var elems []string
	for _, o := range all {
		for _, s := range o.sets {
			b.WriteString(setText(s))
		}
		for _, c := range o.chains {
			b.WriteString(chainText(c))
		}
		for _, e := range o.elems {
			elems = append(elems, e.String())
		}
		for _, a := range o.hairpin {
			elems = append(elems, fmt.Sprintf("%s %s . %s", setHairpin, a, a))
		}
	}
	slices.Sort(elems)
	elems = slices.Compact(elems) // Services share hairpin elements
	for _, e := range elems {
		fmt.Fprintf(&b, "element %s\n", e)
	}
	return b.String()
}
