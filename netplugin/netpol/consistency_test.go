package netpol

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/nftables"
	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kernelView reads back the enforcer's tables from the kernel: each
// chain's rule count, and every set element as "family set key-hex".
func kernelView(ns netns.NsHandle, name string) (map[string]int, []string, error) {
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		return nil, nil, err
	}
	chains := map[string]int{}
	var elems []string
	for _, fam := range []family{famIP, famBridge} {
		t := &nftables.Table{Name: name, Family: fam.nft()}
		chs, err := c.ListChainsOfTableFamily(fam.nft())
		if err != nil {
			return nil, nil, err
		}
		for _, ch := range chs {
			if ch.Table.Name != name {
				continue
			}
			rules, err := c.GetRules(t, ch)
			if err != nil {
				return nil, nil, err
			}
			chains[fam.String()+" "+ch.Name] = len(rules)
		}
		sets, err := c.GetSets(t)
		if err != nil {
			return nil, nil, err
		}
		for _, s := range sets {
			es, err := c.GetSetElements(s)
			if err != nil {
				return nil, nil, err
			}
			for _, e := range es {
				if e.IntervalEnd {
					continue
				}
				elems = append(elems, fmt.Sprintf("%s %s %x", fam, s.Name, e.Key))
			}
		}
	}
	slices.Sort(elems)
	return chains, elems, nil
}

// wantView is what the enforcer believes the kernel holds, in
// kernelView's form.
func wantView(e *Enforcer) (map[string]int, []string) {
	chains := map[string]int{}
	var elems []string
	for _, o := range e.programmed {
		for _, c := range o.chains {
			chains[c.fam.String()+" "+c.name] = len(c.rules)
		}
		for _, el := range o.elems {
			elems = append(elems, fmt.Sprintf("%s %s %x", el.fam, el.set, el.key))
		}
	}
	slices.Sort(elems)
	return chains, elems
}

func checkKernelView(t *testing.T, ns netns.NsHandle, e *Enforcer) {
	t.Helper()
	chains, elems, err := kernelView(ns, e.tables.name)
	if err != nil {
		t.Fatal(err)
	}
	wantChains, wantElems := wantView(e)
	if diff := cmp.Diff(wantChains, chains); diff != "" {
		t.Errorf("chains in the kernel (-programmed +kernel):\n%s", diff)
	}
	if diff := cmp.Diff(wantElems, elems); diff != "" {
		t.Errorf("elements in the kernel (-programmed +kernel):\n%s", diff)
	}
}

var idToken = regexp.MustCompile(`(^|[ \t])(\d+) \. `)

// normalized is what e programmed, as text, with the shared sets'
// numbers replaced by their keys: two enforcers that number their sets
// in different orders program the same thing.
func normalized(e *Enforcer) string {
	names := map[string]string{}
	for k, id := range e.ids.byKey {
		names[fmt.Sprint(id)] = "<" + k + ">"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(e.programmed)) {
		text := idToken.ReplaceAllStringFunc(unitText(e.programmed[k]), func(m string) string {
			sub := idToken.FindStringSubmatch(m)
			return sub[1] + names[sub[2]] + " . "
		})
		lines := strings.Split(text, "\n")
		slices.Sort(lines) // elements of a shared set may be listed in any unit order
		parts = append(parts, strings.Join(lines, "\n"))
	}
	return strings.Join(parts, "\n")
}

// TestIncrementalMatchesFull makes random changes to pods, namespaces
// and policies, syncing after each few, and checks that what the
// incremental syncs leave in the kernel is what the enforcer believes,
// and what a full sync from scratch programs.
func TestIncrementalMatchesFull(t *testing.T) {
	requireRoot(t)
	ns := newNetns(t)
	conn, err := openConn(int(ns))
	must(t, "nftables connection", err)
	t.Cleanup(func() { conn.Close() })
	e := newTestEnforcer(t, newKernelTables(conn, TableName("br0")))
	t.Cleanup(func() { e.tables.delete() })

	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	namespaces := []string{"a", "b", "c"}
	objs := map[string]any{}
	randomPod := func(i int) *corev1.Pod {
		node := testNodeName
		if rng.IntN(4) == 0 {
			node = "node-b"
		}
		p := newPod(pick(namespaces...), fmt.Sprintf("pod-%d", i), fmt.Sprintf("10.42.0.%d", 10+i),
			map[string]string{"app": pick("web", "db", "cache"), "tier": pick("front", "back")}, onNode(node),
			withPort(pick("http", "web"), tcp, int32(80+rng.IntN(3))), withPort("dns", udp, 53))
		return p
	}
	randomPeer := func() networkingv1.NetworkPolicyPeer {
		switch rng.IntN(5) {
		case 0:
			return podPeer(sel("app", pick("web", "db", "cache")))
		case 1:
			return nsPeer(sel("team", pick("x", "y")))
		case 2:
			return bothPeer(sel("team", pick("x", "y")), sel("tier", pick("front", "back")))
		case 3:
			return blockPeer("10.42.0.0/24", fmt.Sprintf("10.42.0.%d/30", 8+4*rng.IntN(8)))
		default:
			return nsPeer(sel())
		}
	}
	randomPorts := func() []networkingv1.NetworkPolicyPort {
		switch rng.IntN(4) {
		case 0:
			return nil
		case 1:
			return ports(port(tcp, 80), portRangeOf(udp, 50, 60))
		case 2:
			return ports(namedPortRef(tcp, pick("http", "web")))
		default:
			return ports(namedPortRef(udp, "dns"), port(tcp, 81))
		}
	}
	randomPolicy := func(i int) *networkingv1.NetworkPolicy {
		var opts []policyOpt
		switch rng.IntN(3) {
		case 0:
			opts = append(opts, types_(tIngress))
		case 1:
			opts = append(opts, types_(tEgress))
		default:
			opts = append(opts, types_(tIngress, tEgress))
		}
		for range rng.IntN(3) {
			opts = append(opts, ingressRules(ingressRule(randomPorts(), randomPeers(rng, randomPeer)...)))
		}
		for range rng.IntN(3) {
			opts = append(opts, egressRules(egressRule(randomPorts(), randomPeers(rng, randomPeer)...)))
		}
		podSel := sel("app", pick("web", "db", "cache"))
		if rng.IntN(4) == 0 {
			podSel = sel()
		}
		return newPolicy(pick(namespaces...), fmt.Sprintf("policy-%d", i), podSel, opts...)
	}
	set := func(o any) {
		objs[objKey(o)] = o
		feed(e, o)
	}
	remove := func(o any) {
		delete(objs, objKey(o))
		m := o.(metav1.Object)
		switch o.(type) {
		case *corev1.Pod:
			e.push(event{kind: podEvent, namespace: m.GetNamespace(), name: m.GetName()})
		case *networkingv1.NetworkPolicy:
			e.push(event{kind: policyEvent, namespace: m.GetNamespace(), name: m.GetName()})
		}
	}
	for _, n := range namespaces {
		set(newNamespace(n, map[string]string{"team": pick("x", "y")}))
	}
	must(t, "first sync", e.sync())
	for step := range 300 {
		i := rng.IntN(12)
		switch rng.IntN(6) {
		case 0, 1:
			set(randomPod(i))
		case 2:
			remove(newPod("a", fmt.Sprintf("pod-%d", i), "", nil))
		case 3:
			set(randomPolicy(i))
		case 4:
			remove(newPolicy(pick(namespaces...), fmt.Sprintf("policy-%d", i), nil))
		case 5:
			set(newNamespace(pick(namespaces...), map[string]string{"team": pick("x", "y")}))
		}
		if rng.IntN(3) > 0 {
			continue
		}
		must(t, "sync", e.sync())
		checkKernelView(t, ns, e)
		fresh := newTestEnforcer(t, nil)
		for _, o := range objs {
			feed(fresh, o)
		}
		fresh.mu.Lock()
		events := fresh.events
		fresh.events = nil
		fresh.mu.Unlock()
		fresh.apply(events, true)
		fresh.programmed = fresh.rebuild(e.bridgeMAC())
		for k, o := range fresh.programmed {
			if o.empty() {
				delete(fresh.programmed, k)
			}
		}
		if diff := cmp.Diff(normalized(fresh), normalized(e)); diff != "" {
			t.Fatalf("step %d: incremental syncs programmed other than a full one (-full +incremental):\n%s", step, diff)
		}
	}
}

func randomPeers(rng *rand.Rand, peer func() networkingv1.NetworkPolicyPeer) []networkingv1.NetworkPolicyPeer {
	var out []networkingv1.NetworkPolicyPeer
	for range rng.IntN(3) {
		out = append(out, peer())
	}
	return out
}
