package proxy

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestFirewallFollowsAddress: a Service that loses a load-balancer
// address to an older one also goes without its firewall element for
// it, which would otherwise filter the older Service's clients.
func TestFirewallFollowsAddress(t *testing.T) {
	sp := &servicePort{namespace: "default", name: "x", portName: "http", proto: protoTCP, port: 80}
	lb := netip.MustParseAddr("192.0.2.1")
	older := objects{elems: []elem{addrElem(mapServiceIPs, lb, sp, gotoVerdict("external-older"))}}
	newer := objects{elems: []elem{
		addrElem(mapServiceIPs, lb, sp, gotoVerdict("external-newer")),
		addrElem(mapFirewallIPs, lb, sp, gotoVerdict("firewall-newer")),
		addrElem(mapServiceIPs, netip.MustParseAddr("10.43.0.2"), sp, gotoVerdict("service-newer")),
	}}
	c := newClaimer(nil, nil)
	if _, lost := c.claim("default/older", older); len(lost) > 0 {
		t.Fatalf("older lost %v", lost)
	}
	got, lost := c.claim("default/newer", newer)
	if len(lost) != 1 {
		t.Errorf("newer lost %v, want the load-balancer address", lost)
	}
	want := []string{newer.elems[2].String()}
	var have []string
	for _, e := range got.elems {
		have = append(have, e.String())
	}
	if diff := cmp.Diff(want, have); diff != "" {
		t.Errorf("newer's elements (-want +got):\n%s", diff)
	}
	if _, ok := c.taken[elemKey(newer.elems[1])]; ok {
		t.Error("the firewall key was taken for a Service without the address")
	}

	// With the address, the firewall element stays and is held.
	c = newClaimer(nil, nil)
	got, _ = c.claim("default/newer", newer)
	if len(got.elems) != 3 || c.taken[elemKey(newer.elems[1])] != "default/newer" {
		t.Errorf("elements %v, firewall key holder %q", got.elems, c.taken[elemKey(newer.elems[1])])
	}
}
