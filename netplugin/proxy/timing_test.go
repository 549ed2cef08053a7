package proxy

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// TestSyncTiming logs how long syncs of a large table take (targets: a
// full sync of 1,000 Services × 10 endpoints within 200 ms, a
// one-endpoint update within 5 ms). It asserts only that the table is
// right, since timings on a shared machine vary.
//
// Where the time goes, measured with perf: about half in the kernel
// (new rules, each expression's type found by name; map elements; the
// commit), half building the objects and the netlink messages. The
// library's one ack per message used to double that (see nftConn). A
// change of endpoints, of who or how many, edits elements of its
// Service's endpoint map alone (see choiceRange).
func TestSyncTiming(t *testing.T) {
	requireRoot(t)
	const services, endpoints = 1000, 10
	p := newTestProxier(t, newNetns(t))
	slice := func(i, n int) any {
		var eps []ep
		for j := range n {
			eps = append(eps, readyEP(fmt.Sprintf("10.200.%d.%d", i/100, (i%100)*2+j+1), testNode))
		}
		return newSlice(fmt.Sprintf("svc-%d", i), fmt.Sprintf("svc-%d-1", i), 8080, eps...)
	}
	for i := range services {
		mustAdd(t, p.services, newService(fmt.Sprintf("svc-%d", i), fmt.Sprintf("10.96.%d.%d", i/250, i%250+1), 80,
			nodePort(int32(30000+i), corev1.ServiceExternalTrafficPolicyCluster)))
		mustAdd(t, p.slices, slice(i, endpoints))
	}

	start := time.Now()
	if err := p.sync(); err != nil { // the first sync is full
		t.Fatal(err)
	}
	full := time.Since(start)
	// One ack for the whole transaction, nothing echoed: the library
	// asks for every rule back, which would make the kernel dump each
	// one onto the socket.
	if n := p.table.conn.Replies(); n != 1 {
		t.Errorf("the full sync's transaction was answered with %d messages, want 1 (its ack)", n)
	}
	chains, _ := mustKernelView(t, p.ns, testTable)
	if want := len(baseObjects(p.rc).chains) + services*2; len(chains) != want {
		t.Errorf("%d chains in the kernel, want %d", len(chains), want)
	}

	// One endpoint goes from one Service: its ranges change.
	mustUpdate(t, p.slices, slice(500, endpoints-1))
	p.markDirty("default/svc-500")
	start = time.Now()
	if err := p.sync(); err != nil {
		t.Fatal(err)
	}
	one := time.Since(start)
	checkKernelView(t, p)

	// One endpoint of another Service replaced by a new one: the count
	// stays, and only its map's element changes.
	moved := slice(501, endpoints).(*discoveryv1.EndpointSlice)
	moved.Endpoints[0].Addresses = []string{"10.200.250.1"}
	mustUpdate(t, p.slices, moved)
	p.markDirty("default/svc-501")
	start = time.Now()
	if err := p.sync(); err != nil {
		t.Fatal(err)
	}
	replaced := time.Since(start)
	checkKernelView(t, p)
	t.Logf("full sync of %d Services × %d endpoints: %v (target 200ms); one endpoint gone: %v, one endpoint replaced: %v (target 5ms)",
		services, endpoints, full, one, replaced)
}
