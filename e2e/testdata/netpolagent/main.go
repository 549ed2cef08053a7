// netpolagent is the network policy tests' pod: it serves TCP and UDP
// on the ports given, answering every connection and datagram with its
// name, and takes probe orders on a control port, which it carries out
// from inside its pod, as upstream's agnhost connect does.
//
//	netpolagent NAME CONTROL-PORT PORT...
//
// A probe order is one line on a TCP connection to the control port,
// "tcp|udp ADDRESS PORT TIMEOUT-MS"; the answer is one line: "ok NAME"
// with the name the server answered with, or "fail REASON". The order
// "dns NAME 0 TIMEOUT-MS" looks NAME up through the pod's resolv.conf
// and answers "ok ADDRESS".
package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: netpolagent NAME CONTROL-PORT PORT...")
		os.Exit(2)
	}
	name := os.Args[1]
	for _, p := range os.Args[3:] {
		l, err := net.Listen("tcp4", ":"+p)
		if err != nil {
			fail(err)
		}
		go serveTCP(l, name)
		pc, err := net.ListenPacket("udp4", ":"+p)
		if err != nil {
			fail(err)
		}
		go serveUDP(pc, name)
	}
	ctl, err := net.Listen("tcp4", ":"+os.Args[2])
	if err != nil {
		fail(err)
	}
	fmt.Println("serving", name)
	for {
		c, err := ctl.Accept()
		if err != nil {
			fail(err)
		}
		go control(c)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "netpolagent:", err)
	os.Exit(1)
}

func serveTCP(l net.Listener, name string) {
	for {
		c, err := l.Accept()
		if err != nil {
			fail(err)
		}
		fmt.Fprintln(c, name)
		c.Close()
	}
}

func serveUDP(pc net.PacketConn, name string) {
	buf := make([]byte, 512)
	for {
		_, from, err := pc.ReadFrom(buf)
		if err != nil {
			fail(err)
		}
		pc.WriteTo([]byte(name+"\n"), from)
	}
}

func control(c net.Conn) {
	defer c.Close()
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return
	}
	f := strings.Fields(line)
	if len(f) != 4 {
		fmt.Fprintln(c, "fail bad order")
		return
	}
	ms, err := strconv.Atoi(f[3])
	if err != nil {
		fmt.Fprintln(c, "fail bad timeout")
		return
	}
	answer, err := probe(f[0], net.JoinHostPort(f[1], f[2]), time.Duration(ms)*time.Millisecond)
	if err != nil {
		fmt.Fprintln(c, "fail", strings.ReplaceAll(err.Error(), "\n", " "))
		return
	}
	fmt.Fprintln(c, "ok", answer)
}

func probe(proto, addr string, timeout time.Duration) (string, error) {
	if proto == "dns" {
		host, _, _ := net.SplitHostPort(addr)
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		addrs, err := net.DefaultResolver.LookupHost(ctx, host)
		if err != nil {
			return "", err
		}
		return addrs[0], nil
	}
	c, err := net.DialTimeout(proto+"4", addr, timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	if proto == "udp" {
		if _, err := c.Write([]byte("?")); err != nil {
			return "", err
		}
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(line), nil
}
