package nodeipam

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// startDual runs a controller over two cluster CIDRs, the primary first.
func (a *testAPI) startDual(t *testing.T, cidrs []string, masks []int) {
	t.Helper()
	var ps []netip.Prefix
	for _, c := range cidrs {
		ps = append(ps, netip.MustParsePrefix(c))
	}
	c, err := New(Config{RESTConfig: a.cfg, ClusterCIDRs: ps, NodeMaskSizes: masks, RetryMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && err != context.Canceled {
			t.Errorf("controller: %v", err)
		}
	})
}

// waitDualCIDRs waits until the named nodes have two pod CIDRs and
// returns each node's.
func (a *testAPI) waitDualCIDRs(t *testing.T, names ...string) map[string][]string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := map[string][]string{}
		list, err := a.cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range list.Items {
			if len(n.Spec.PodCIDRs) > 0 {
				if n.Spec.PodCIDR != n.Spec.PodCIDRs[0] {
					t.Fatalf("node %s: podCIDR %q is not podCIDRs[0] of %v", n.Name, n.Spec.PodCIDR, n.Spec.PodCIDRs)
				}
				got[n.Name] = n.Spec.PodCIDRs
			}
		}
		all := true
		for _, n := range names {
			all = all && len(got[n]) == 2
		}
		if all {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("nodes without two pod CIDRs after 20s; have %v", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDualStackNodesGetACIDRPerFamily: each node gets one pod CIDR of
// each cluster CIDR, in the cluster CIDRs' order, distinct per family.
func TestDualStackNodesGetACIDRPerFamily(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cidrs []string
		masks []int
	}{
		{"IPv4 primary", []string{"10.42.0.0/16", "fd42::/56"}, []int{24, 64}},
		{"IPv6 primary", []string{"fd42::/56", "10.42.0.0/16"}, []int{64, 24}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newTestAPI(t)
			a.createNodes(t, "early")
			a.startDual(t, tc.cidrs, tc.masks)
			a.createNodes(t, "late-1", "late-2")
			got := a.waitDualCIDRs(t, "early", "late-1", "late-2")
			for i := range tc.cidrs {
				fam := map[string]string{}
				for n, cs := range got {
					fam[n] = cs[i]
				}
				distinct(t, fam, tc.cidrs[i], tc.masks[i])
			}
		})
	}
}

// TestDualStackExhaustionIsAllOrNothing: when one family's range is full
// a node gets no CIDR of the other either (as upstream's range allocator),
// and a deleted node's pair goes to the waiting node.
func TestDualStackExhaustionIsAllOrNothing(t *testing.T) {
	a := newTestAPI(t)
	// Two IPv6 node CIDRs, 256 IPv4 ones: the IPv6 range runs out first.
	a.startDual(t, []string{"10.42.0.0/16", "fd42::/63"}, []int{24, 64})
	a.createNodes(t, "a", "b")
	first := a.waitDualCIDRs(t, "a", "b")
	a.createNodes(t, "c")
	// c waits with no CIDR at all, and the warning says why.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ev, err := a.cs.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, e := range ev.Items {
			found = found || (e.InvolvedObject.Name == "c" && e.Reason == "CIDRNotAvailable" && strings.Contains(e.Message, "fd42::/63"))
		}
		if found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no CIDRNotAvailable event for c")
		}
		time.Sleep(20 * time.Millisecond)
	}
	c, err := a.cs.CoreV1().Nodes().Get(context.Background(), "c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Spec.PodCIDR != "" || len(c.Spec.PodCIDRs) != 0 {
		t.Fatalf("c got %v with the IPv6 range full", c.Spec.PodCIDRs)
	}
	if err := a.cs.CoreV1().Nodes().Delete(context.Background(), "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	got := a.waitDualCIDRs(t, "c")
	if got["c"][1] != first["a"][1] {
		t.Errorf("c got %v; a's IPv6 CIDR was %s", got["c"], first["a"][1])
	}
	if got["c"][1] == got["b"][1] || got["c"][0] == got["b"][0] {
		t.Errorf("c %v and b %v share a CIDR", got["c"], got["b"])
	}
}

// TestDualStackNodeKeepsWhatItHas: a node that has pod CIDRs keeps them,
// and they are not handed out again.
func TestDualStackNodeKeepsWhatItHas(t *testing.T) {
	a := newTestAPI(t)
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "set"}, Spec: corev1.NodeSpec{PodCIDR: "10.42.0.0/24", PodCIDRs: []string{"10.42.0.0/24", "fd42::/64"}}}
	if _, err := a.cs.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.startDual(t, []string{"10.42.0.0/23", "fd42::/63"}, []int{24, 64})
	a.createNodes(t, "new")
	got := a.waitDualCIDRs(t, "set", "new")
	if got["set"][0] != "10.42.0.0/24" || got["set"][1] != "fd42::/64" {
		t.Errorf("set changed to %v", got["set"])
	}
	if got["new"][0] != "10.42.1.0/24" || got["new"][1] != "fd42:0:0:1::/64" {
		t.Errorf("new got %v", got["new"])
	}
}

func TestDualStackConfigRefused(t *testing.T) {
	a := newTestAPI(t)
	for _, cfg := range []Config{
		{RESTConfig: a.cfg, ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.42.0.0/16"), netip.MustParsePrefix("10.43.0.0/16")}, NodeMaskSizes: []int{24, 24}},
		{RESTConfig: a.cfg, ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.42.0.0/16"), netip.MustParsePrefix("fd42::/56")}, NodeMaskSizes: []int{24}},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%v %v accepted", cfg.ClusterCIDRs, cfg.NodeMaskSizes)
		}
	}
}
