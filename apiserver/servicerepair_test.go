package apiserver

import (
	"fmt"
	"net/netip"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"bonsai.dev/bonsai/store"
)

// repairEvents lists "object reason" for the repair controllers' events.
func (e *allocEnv) repairEvents(t *testing.T) []string {
	t.Helper()
	list, err := e.cs.CoreV1().Events("").List(e.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range list.Items {
		if ev.ReportingController == ipRepairController || ev.ReportingController == portRepairController {
			if ev.Type != corev1.EventTypeWarning || ev.Source.Component != ev.ReportingController {
				t.Errorf("event %+v", ev)
			}
			out = append(out, ev.InvolvedObject.Kind+" "+ev.InvolvedObject.Name+" "+ev.Reason)
		}
	}
	sort.Strings(out)
	return out
}

func TestRepairFreesLeaksAfterTheGracePeriod(t *testing.T) {
	e := newAllocEnv(t, "10.96.0.0/24", PortRange{Base: 30000, Max: 30009})
	kept, err := e.cs.CoreV1().Services("default").Create(e.ctx, nodePortService("kept", 30001), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Two addresses kept's random cluster IP is not.
	var leaked []string
	for a := netip.MustParseAddr("10.96.0.50"); len(leaked) < 2; a = a.Next() {
		if a.String() != kept.Spec.ClusterIP {
			leaked = append(leaked, a.String())
		}
	}
	ipGone, ipStale := leaked[0], leaked[1]
	// Records whose Service is not there: leaks, or creates in flight.
	gone := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "gone", Namespace: "default", UID: types.UID("u1")}}
	if err := e.s.recordIP(e.ctx, netip.MustParseAddr(ipGone), gone); err != nil {
		t.Fatal(err)
	}
	if err := e.s.recordNodePort(e.ctx, 30002, gone, false); err != nil {
		t.Fatal(err)
	}
	// A record naming a Service that holds another IP (an update in flight,
	// or a stale one) gets the same grace.
	if err := e.s.recordIP(e.ctx, netip.MustParseAddr(ipStale), kept); err != nil {
		t.Fatal(err)
	}
	wantIPs := map[string]string{kept.Spec.ClusterIP: "default/kept", ipGone: "default/gone", ipStale: "default/kept"}
	wantPorts := map[int32]string{30001: "default/kept", 30002: "default/gone"}
	// Within the grace period they stay: the Service may be on its way.
	if err := e.s.repairServiceAllocations(e.ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantIPs, e.ipRecords(t)); diff != "" {
		t.Errorf("IP records within the grace period (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantPorts, e.portRecords(t)); diff != "" {
		t.Errorf("port records within the grace period (-want +got):\n%s", diff)
	}
	if err := e.s.repairServiceAllocations(e.ctx, time.Now().Add(allocationGracePeriod+time.Second)); err != nil {
		t.Fatal(err)
	}
	delete(wantIPs, ipGone)
	delete(wantIPs, ipStale)
	delete(wantPorts, 30002)
	if diff := cmp.Diff(wantIPs, e.ipRecords(t)); diff != "" {
		t.Errorf("IP records after the grace period (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantPorts, e.portRecords(t)); diff != "" {
		t.Errorf("port records after the grace period (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"IPAddress " + ipGone + " IPAddressNotAllocated", "IPAddress " + ipStale + " IPAddressWrongReference"}, e.repairEvents(t)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	// The freed IP and port can be taken again.
	svc := nodePortService("again", 30002)
	svc.Spec.ClusterIP = ipGone
	if _, err := e.cs.CoreV1().Services("default").Create(e.ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestRepairRecordsMissingAllocations(t *testing.T) {
	e := newAllocEnv(t, "10.96.0.0/24", PortRange{Base: 30000, Max: 30009})
	svc, err := e.cs.CoreV1().Services("default").Create(e.ctx, nodePortService("a", 30003), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The records go missing (an admin, a lost write).
	ipKey := e.s.reg.byGVR[gvr("networking.k8s.io", "v1", "ipaddresses")].key("", svc.Spec.ClusterIP)
	for _, key := range []string{ipKey, nodePortKey(30003)} {
		if _, err := e.st.Delete(e.ctx, key, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.s.repairServiceAllocations(e.ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{svc.Spec.ClusterIP: "default/a"}, e.ipRecords(t)); diff != "" {
		t.Errorf("IP records (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[int32]string{30003: "default/a"}, e.portRecords(t)); diff != "" {
		t.Errorf("port records (-want +got):\n%s", diff)
	}
	want := []string{"Service a ClusterIPNotAllocated", "Service a PortNotAllocated"}
	if diff := cmp.Diff(want, e.repairEvents(t)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	// Recorded again, they are taken again.
	if _, err := e.cs.CoreV1().Services("default").Create(e.ctx, nodePortService("b", 30003), metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("port of a repaired Service: %v", err)
	}
}

// TestRepairMigratesAStoreWithoutRecords starts a server on a store whose
// Services were written before allocations were recorded: the server
// records them before it allocates anything.
func TestRepairMigratesAStoreWithoutRecords(t *testing.T) {
	st, err := store.OpenBadger(store.BadgerOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	res := newRegistry(builtinResources()).byGVR[gvr("", "v1", "services")]
	old := func(name, ip string, nodePort int32) {
		t.Helper()
		svc := nodePortService(name, nodePort)
		svc.Namespace, svc.UID = "default", types.UID("uid-"+name)
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = ip, []string{ip}
		data, err := encodeForStore(res, svc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Create(t.Context(), res.key("default", name), data); err != nil {
			t.Fatal(err)
		}
	}
	// A /29 has six usable addresses; five are held by old Services, two
	// of which share one, as do their node ports; one port is outside
	// today's range.
	for i := 1; i <= 4; i++ {
		old(fmt.Sprintf("old%d", i), fmt.Sprintf("10.96.0.%d", i), int32(30000+i))
	}
	old("twin", "10.96.0.4", 30004)
	old("wide", "10.96.0.5", 31000)
	e := newAllocEnvOn(t, st, "10.96.0.0/29", PortRange{Base: 30000, Max: 30009})
	wantIPs := map[string]string{"10.96.0.1": "default/old1", "10.96.0.2": "default/old2", "10.96.0.3": "default/old3", "10.96.0.5": "default/wide"}
	got := e.ipRecords(t)
	if got["10.96.0.4"] != "default/old4" && got["10.96.0.4"] != "default/twin" {
		t.Errorf("shared IP recorded for %q", got["10.96.0.4"])
	}
	delete(got, "10.96.0.4")
	if diff := cmp.Diff(wantIPs, got); diff != "" {
		t.Errorf("IP records (-want +got):\n%s", diff)
	}
	events := e.repairEvents(t)
	for _, want := range []string{"ClusterIPAlreadyAllocated", "PortAlreadyAllocated", "PortOutOfRange"} {
		if !containsSuffix(events, " "+want) {
			t.Errorf("no %s event in %v", want, events)
		}
	}
	if !containsSuffix(events, "wide PortOutOfRange") {
		t.Errorf("out of range port reported for the wrong Service: %v", events)
	}
	// The one address left is the only one handed out.
	svc, err := e.cs.CoreV1().Services("default").Create(e.ctx, clusterIPService("new", ""), metav1.CreateOptions{})
	if err != nil || svc.Spec.ClusterIP != "10.96.0.6" {
		t.Fatalf("new service after migration: %v %+v", err, svc)
	}
	if _, err := e.cs.CoreV1().Services("default").Create(e.ctx, clusterIPService("full", ""), metav1.CreateOptions{}); !apierrors.IsInternalError(err) {
		t.Fatalf("range full after migration: %v", err)
	}
}

func containsSuffix(xs []string, suffix string) bool {
	for _, x := range xs {
		if len(x) >= len(suffix) && x[len(x)-len(suffix):] == suffix {
			return true
		}
	}
	return false
}
