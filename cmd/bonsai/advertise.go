package main

import (
	"bufio"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
)

// advertiseAddress is the address other nodes and pods reach the API
// server at (the kubernetes Service's endpoint): the bind address when it
// is a specific one, else an address of the interface holding the default
// route, which is what kube-apiserver picks too. It is read from the
// routing table rather than found by dialing out, so nothing leaves the
// host.
func advertiseAddress(bind netip.Addr) netip.Addr {
	if !bind.IsUnspecified() {
		return bind
	}
	ifname := ""
	if f, err := os.Open("/proc/net/route"); err == nil {
		ifname = defaultRouteInterface(f)
		f.Close()
	}
	var fallback netip.Addr
	ifaces, _ := net.Interfaces()
	for _, iface := range ifaces {
		if iface.Flags&net.FlagUp == 0 || iface.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := iface.Addrs()
		for _, a := range addrs {
			n, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(n.IP)
			if !ok || !ip.Unmap().Is4() || !ip.IsGlobalUnicast() {
				continue
			}
			if iface.Name == ifname {
				return ip.Unmap()
			}
			if !fallback.IsValid() {
				fallback = ip.Unmap()
			}
		}
	}
	if fallback.IsValid() {
		return fallback
	}
	return netip.MustParseAddr("127.0.0.1")
}

// defaultRouteInterface reads /proc/net/route (IPv4) and returns the
// interface of the default route with the lowest metric.
func defaultRouteInterface(r io.Reader) string {
	sc := bufio.NewScanner(r)
	best, bestMetric := "", -1
	first := true
	for sc.Scan() {
		if first { // header
			first = false
			continue
		}
		f := strings.Fields(sc.Text())
		// Iface Destination Gateway Flags RefCnt Use Metric Mask ...
		if len(f) < 8 || f[1] != "00000000" || f[7] != "00000000" {
			continue
		}
		metric := 0
		for _, c := range f[6] {
			if c < '0' || c > '9' {
				metric = -1
				break
			}
			metric = metric*10 + int(c-'0')
		}
		if metric < 0 {
			continue
		}
		if bestMetric < 0 || metric < bestMetric {
			best, bestMetric = f[0], metric
		}
	}
	return best
}
