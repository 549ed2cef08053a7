package netpol

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
)

// scaleObjects are n pods and n policies over 10 namespaces: pod i has
// app=a<i%50> and tier=t<i%5>; policy i selects app=a<i%50> in its
// namespace and allows, on two ports, tier=t<i%5> pods of its namespace,
// pods of namespaces labelled team=<i%3>, and a CIDR with a hole.
func scaleObjects(n int) []any {
	var objs []any
	for ns := range 10 {
		objs = append(objs, newNamespace(fmt.Sprintf("ns-%d", ns), map[string]string{"team": fmt.Sprint(ns % 3)}))
	}
	for i := range n {
		ns := fmt.Sprintf("ns-%d", i%10)
		objs = append(objs, newPod(ns, fmt.Sprintf("pod-%d", i), fmt.Sprintf("10.42.%d.%d", 1+i/250, 1+i%250),
			map[string]string{"app": fmt.Sprintf("a%d", i%50), "tier": fmt.Sprintf("t%d", i%5)}, withPort("http", tcp, 8080)))
	}
	for i := range n {
		ns := fmt.Sprintf("ns-%d", i%10)
		objs = append(objs, newPolicy(ns, fmt.Sprintf("policy-%d", i), sel("app", fmt.Sprintf("a%d", i%50)),
			types_(tIngress, tEgress),
			ingressRules(
				ingressRule(ports(port(tcp, 80), namedPortRef(tcp, "http")), podPeer(sel("tier", fmt.Sprintf("t%d", i%5)))),
				ingressRule(ports(portRangeOf(udp, 5000, 5100)), nsPeer(sel("team", fmt.Sprint(i%3))), blockPeer("192.168.0.0/16", "192.168.1.0/24"))),
			egressRules(egressRule(ports(port(udp, 53))))))
	}
	return objs
}

// TestSyncTiming logs how long syncs of a large table take (targets: a
// full sync of 1,000 policies over 1,000 pods within a second, a
// change of one pod's labels or one policy within 10 ms) and the memory
// the enforcer holds. It asserts only that the syncs succeed, since
// timings on a shared machine vary.
func TestSyncTiming(t *testing.T) {
	requireRoot(t)
	const n = 1000
	ns := newNetns(t)
	conn, err := openConn(int(ns))
	must(t, "nftables connection", err)
	t.Cleanup(func() { conn.Close() })
	e := newTestEnforcer(t, newKernelTables(conn, TableName("br0")))
	t.Cleanup(func() { e.tables.delete() })
	objs := scaleObjects(n)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	feed(e, objs...)
	start := time.Now()
	must(t, "full sync", e.sync())
	full := time.Since(start)
	runtime.GC()
	runtime.ReadMemStats(&after)

	elems := 0
	for _, o := range e.programmed {
		elems += len(o.elems)
	}
	// One pod's labels.
	pod := newPod("ns-0", "pod-500", "10.42.3.1", map[string]string{"app": "a7", "tier": "t3"}, withPort("http", tcp, 8080))
	feed(e, pod)
	start = time.Now()
	must(t, "pod sync", e.sync())
	onePod := time.Since(start)

	// One policy's ports.
	np := objs[10+n+500].(*networkingv1.NetworkPolicy).DeepCopy()
	np.Spec.Ingress[0].Ports = ports(port(tcp, 81))
	feed(e, np)
	start = time.Now()
	must(t, "policy sync", e.sync())
	onePolicy := time.Since(start)

	t.Logf("full sync of %d policies over %d pods: %v (target 1s), %d units, %d elements, heap %d KiB more; one pod's labels: %v, one policy: %v (target 10ms)",
		n, n, full, len(e.programmed), elems, (int64(after.HeapAlloc)-int64(before.HeapAlloc))/1024, onePod, onePolicy)
}
