package main

import (
	"net/netip"
	"strings"
	"testing"
)

func TestDefaultRouteInterface(t *testing.T) {
	for _, tc := range []struct{ name, table, want string }{
		{"one default", `Iface	Destination	Gateway 	Flags	RefCnt	Use	Metric	Mask		MTU	Window	IRTT
eth0	00000000	010200C0	0003	0	0	0	00000000	0	0	0
eth0	000200C0	00000000	0001	0	0	0	00FFFFFF	0	0	0
`, "eth0"},
		{"lowest metric wins", `Iface	Destination	Gateway 	Flags	RefCnt	Use	Metric	Mask		MTU	Window	IRTT
wlan0	00000000	0101A8C0	0003	0	0	600	00000000	0	0	0
eth1	00000000	0100000A	0003	0	0	100	00000000	0	0	0
`, "eth1"},
		{"no default", `Iface	Destination	Gateway 	Flags	RefCnt	Use	Metric	Mask		MTU	Window	IRTT
eth0	000200C0	00000000	0001	0	0	0	00FFFFFF	0	0	0
`, ""},
		{"empty", "", ""},
	} {
		if got := defaultRouteInterface(strings.NewReader(tc.table)); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestAdvertiseAddress(t *testing.T) {
	if got := advertiseAddress(netip.MustParseAddr("127.0.0.1")); got != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("specific bind address not kept: %v", got)
	}
	got := advertiseAddress(netip.MustParseAddr("0.0.0.0"))
	if !got.IsValid() || !got.Is4() || got.IsUnspecified() {
		t.Errorf("advertise address for 0.0.0.0: %v", got)
	}
}
