package proxy

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestBridgeNetfilterEitherWay sends pods' traffic to Services whose
// endpoints sit on the same bridge, with the node's
// bridge-nf-call-iptables at 0 (a host that never loaded br_netfilter)
// and at 1. At 0 the bridge hands a pod's packets to IP only when they
// are addressed to the node: an endpoint's reply to a pod on its bridge
// would go straight back, past the conntrack entry that holds the DNAT,
// unless the connection was masqueraded.
func TestBridgeNetfilterEitherWay(t *testing.T) {
	for _, brnf := range []string{"0", "1"} {
		t.Run("bridge-nf-call-iptables="+brnf, func(t *testing.T) {
			n := newTestNetwork(t, 2)
			sysctlIn(t, n.node, "net/bridge/bridge-nf-call-iptables", brnf)
			n.serve(t, 0, 8080, "ep0")
			n.serve(t, 1, 8080, "ep1")
			n.serveUDP(t, 1, 8080, "ep1")
			ep0, ep1 := n.endpointIPs[0].String(), n.endpointIPs[1].String()
			p := newTestProxier(t, n.node)
			udp := newService("dns", "10.96.0.13", 53)
			udp.Spec.Ports[0].Protocol = corev1.ProtocolUDP
			udpSlice := newSlice("dns", "dns-1", 8080, readyEP(ep1, testNode))
			udpSlice.Ports[0].Protocol = ptr(corev1.ProtocolUDP)
			p.set(t,
				newService("both", "10.96.0.10", 80, nodePort(30080, corev1.ServiceExternalTrafficPolicyCluster)),
				newSlice("both", "both-1", 8080, readyEP(ep0, testNode), readyEP(ep1, testNode)),
				newService("other", "10.96.0.11", 80, nodePort(30081, corev1.ServiceExternalTrafficPolicyLocal)),
				newSlice("other", "other-1", 8080, readyEP(ep1, testNode)),
				newService("self", "10.96.0.12", 80),
				newSlice("self", "self-1", 8080, readyEP(ep0, testNode)),
				udp, udpSlice)

			// Where br_netfilter shows the bridged reply to conntrack,
			// the endpoint sees the pod, as under kube-proxy; where it
			// does not, the connection is masqueraded to the node's
			// bridge address so that the reply comes back through it.
			podSeenAs := ep0
			if brnf == "0" {
				podSeenAs = nodeBridgeIP
			}
			expect := func(t *testing.T, addr, wantName, wantFrom string) {
				t.Helper()
				name, from, err := dial(n.endpoints[0], addr)
				if err != nil {
					t.Fatalf("ep0 to %s: %v", addr, err)
				}
				if name != wantName || from != wantFrom {
					t.Errorf("ep0 to %s: %s answered, seeing the client as %s; want %s seeing %s", addr, name, from, wantName, wantFrom)
				}
			}

			t.Run("pod to ClusterIP to another pod of the node", func(t *testing.T) {
				expect(t, "10.96.0.11:80", "ep1", podSeenAs)
			})
			t.Run("hairpin: pod to its own Service", func(t *testing.T) {
				expect(t, "10.96.0.12:80", "ep0", nodeBridgeIP)
			})
			t.Run("pod to a ClusterIP of both pods", func(t *testing.T) {
				got := hits(t, n.endpoints[0], "10.96.0.10:80", 40)
				if got["ep0"] == 0 || got["ep1"] == 0 {
					t.Errorf("answers by endpoint = %v, want both", got)
				}
			})
			t.Run("pod to NodePort, Cluster policy", func(t *testing.T) {
				// Masqueraded whatever the bridge: external traffic
				// under the Cluster policy always is.
				got := map[string]int{}
				for range 40 {
					name, from, err := dial(n.endpoints[0], nodeBridgeIP+":30080")
					if err != nil {
						t.Fatalf("ep0 to the NodePort: %v", err)
					}
					got[name]++
					if from != nodeBridgeIP {
						t.Errorf("%s saw ep0 as %s, want %s", name, from, nodeBridgeIP)
					}
				}
				if got["ep0"] == 0 || got["ep1"] == 0 {
					t.Errorf("answers by endpoint = %v, want both", got)
				}
			})
			t.Run("pod to NodePort, Local policy", func(t *testing.T) {
				// A pod is no external client: the Local policy keeps
				// its address, as for a ClusterIP.
				expect(t, nodeBridgeIP+":30081", "ep1", podSeenAs)
			})
			t.Run("pod to UDP ClusterIP of another pod", func(t *testing.T) {
				c := newUDPClient(t, n.endpoints[0])
				for range 3 { // the same flow, reply after reply
					// A reply from the pod's own address would reach
					// this unconnected socket too, but no client that
					// asked the Service takes it.
					got, from, err := c.askFrom("10.96.0.13:53")
					if err != nil || got != "ep1" || from != "10.96.0.13:53" {
						t.Fatalf("answer %q from %s, err %v; want ep1 from 10.96.0.13:53", got, from, err)
					}
				}
			})
			t.Run("client off the node still reaches both", func(t *testing.T) {
				for _, addr := range []string{"10.96.0.10:80", nodeClientIP + ":30080"} {
					got := hits(t, n.client, addr, 40)
					if got["ep0"] == 0 || got["ep1"] == 0 {
						t.Errorf("%s: answers by endpoint = %v, want both", addr, got)
					}
				}
			})
			checkKernelView(t, p)
		})
	}
}
