package eviction

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		hard, soft, grace, reclaim string
		want                       string
	}{
		{hard: "memory.avail<1Gi", want: "unsupported eviction signal memory.avail"},
		{hard: "memory.available<-1Gi", want: "eviction threshold memory.available must be positive: -1Gi"},
		{hard: "memory.available<0", want: "eviction threshold memory.available must be positive: 0"},
		{hard: "nodefs.available<110%", want: "eviction percentage threshold nodefs.available must be <= 100%: 110%"},
		{hard: "nodefs.available<-5%", want: "eviction percentage threshold nodefs.available must be >= 0%: -5%"},
		{hard: "memory.available<lots", want: "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"},
		{soft: "memory.available<1Gi", want: "grace period must be specified for the soft eviction threshold memory.available"},
		{soft: "memory.available<1Gi", grace: "memory.available=-1s", want: "invalid eviction grace period specified: -1s, must be a positive value"},
		{grace: "disk.available=1s", want: "unsupported eviction signal disk.available"},
		{reclaim: "memory.available=-1Mi", want: "negative eviction minimum reclaim specified for memory.available"},
		{reclaim: "nodefs.available=0%", want: "eviction percentage minimum reclaim nodefs.available must be positive: 0%"},
		{hard: "nodefs.available<NaN%", want: `strconv.ParseFloat: parsing "NaN": invalid syntax`},
	} {
		m := func(s, sep string) map[string]string {
			out, err := ParseMap(s, sep)
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		_, err := Parse(m(tc.hard, "<"), m(tc.soft, "<"), m(tc.grace, "="), m(tc.reclaim, "="))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%+v: got %v, want %q", tc, err, tc.want)
		}
	}
	if _, err := ParseMap("memory.available=1Gi", "<"); err == nil || err.Error() != "malformed pair, expect string<string" {
		t.Errorf("ParseMap: got %v", err)
	}
}

func TestParseAndAllocatable(t *testing.T) {
	ts, err := Parse(DefaultHard, map[string]string{"memory.available": "500Mi"}, map[string]string{"memory.available": "30s"}, map[string]string{"memory.available": "50Mi"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, th := range ts {
		s := th.key()
		if th.MinReclaim != nil {
			s += " min " + th.MinReclaim.String()
		}
		got = append(got, s)
	}
	want := []string{"imagefs.available<15%/0s", "memory.available<100Mi/0s min 50Mi", "nodefs.available<10%/0s", "nodefs.inodesFree<5%/0s", "memory.available<500Mi/30s min 50Mi"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("thresholds (-want +got):\n%s", d)
	}
	// 0% turns a threshold off.
	off, _ := Parse(map[string]string{"nodefs.available": "0%"}, nil, nil, nil)
	if len(off) != 0 {
		t.Errorf("0%% should turn the threshold off: %v", off)
	}
	capacity := corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("4Gi"), corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"), corev1.ResourceCPU: resource.MustParse("4")}
	alloc := Allocatable(capacity, corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("500Mi"), corev1.ResourceCPU: resource.MustParse("500m")},
		corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("400Mi")}, ts)
	for name, want := range map[corev1.ResourceName]string{corev1.ResourceMemory: "3096Mi", corev1.ResourceEphemeralStorage: "96636764000", corev1.ResourceCPU: "3500m"} {
		if q := alloc[name]; q.Cmp(resource.MustParse(want)) != 0 {
			t.Errorf("allocatable %s = %s, want %s", name, q.String(), want)
		}
	}
}

func summary(memAvail, memWS uint64, pods ...statsapi.PodStats) *statsapi.Summary {
	return summaryPids(memAvail, memWS, 100, pods...)
}

func summaryPids(memAvail, memWS uint64, procs int64, pods ...statsapi.PodStats) *statsapi.Summary {
	maxPID := int64(1000)
	return &statsapi.Summary{Node: statsapi.NodeStats{
		Memory: &statsapi.MemoryStats{AvailableBytes: &memAvail, WorkingSetBytes: &memWS},
		Rlimit: &statsapi.RlimitStats{MaxPID: &maxPID, NumOfRunningProcesses: &procs},
	}, Pods: pods}
}

func TestSynchronizeGraceTransitionAndMinReclaim(t *testing.T) {
	ts, err := Parse(map[string]string{"memory.available": "100Mi", "pid.available": "5%"}, map[string]string{"memory.available": "300Mi"},
		map[string]string{"memory.available": "30s"}, map[string]string{"memory.available": "50Mi"})
	if err != nil {
		t.Fatal(err)
	}
	m := NewManager(Config{Thresholds: ts, PressureTransitionPeriod: time.Minute})
	t0 := time.Unix(1000, 0)
	const mi = 1 << 20
	// 200Mi free: the soft threshold is met but its grace not over.
	d := m.Synchronize(t0, Observe(summary(200*mi, 800*mi)))
	if !d.Conditions[corev1.NodeMemoryPressure] || d.Reclaim != nil {
		t.Fatalf("soft threshold within its grace: %+v", d)
	}
	if d.Conditions[corev1.NodePIDPressure] {
		t.Errorf("pid.available: 900 of 1000 left is not below 5%%: %+v", d.Conditions)
	}
	d = m.Synchronize(t0.Add(31*time.Second), Observe(summary(200*mi, 800*mi)))
	if d.Reclaim == nil || d.Reclaim.Signal != SignalMemoryAvailable || d.Reclaim.Hard() {
		t.Fatalf("soft threshold past its grace should reclaim memory first: %+v", d.Reclaim)
	}
	// 320Mi free: above the soft threshold but not above it plus the
	// minimum reclaim, so it is held.
	d = m.Synchronize(t0.Add(32*time.Second), Observe(summary(320*mi, 680*mi)))
	if d.Reclaim == nil || d.Reclaim.Signal != SignalMemoryAvailable {
		t.Fatalf("minimum reclaim not freed yet: %+v", d.Reclaim)
	}
	d = m.Synchronize(t0.Add(33*time.Second), Observe(summary(400*mi, 600*mi)))
	if d.Reclaim != nil && d.Reclaim.Signal == SignalMemoryAvailable {
		t.Fatalf("minimum reclaim freed: %+v", d.Reclaim)
	}
	if !d.Conditions[corev1.NodeMemoryPressure] {
		t.Errorf("MemoryPressure must stay for the transition period")
	}
	d = m.Synchronize(t0.Add(94*time.Second), Observe(summary(400*mi, 600*mi)))
	if d.Conditions[corev1.NodeMemoryPressure] {
		t.Errorf("MemoryPressure must clear after the transition period")
	}
	// PID pressure: 10 left of 1000 is below 5%.
	d = m.Synchronize(t0.Add(94*time.Second), Observe(summaryPids(400*mi, 600*mi, 990)))
	if !d.Conditions[corev1.NodePIDPressure] || d.Reclaim == nil || d.Reclaim.Signal != SignalPIDAvailable {
		t.Errorf("pid.available: 10 of 1000 left is below 5%%: %+v", d)
	}
	// Hard threshold: at once.
	d = m.Synchronize(t0.Add(95*time.Second), Observe(summary(50*mi, 950*mi)))
	if d.Reclaim == nil || !d.Reclaim.Hard() {
		t.Fatalf("hard threshold must reclaim at once: %+v", d.Reclaim)
	}
}

func pod(name string, prio int32, memReq string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name)},
		Spec: corev1.PodSpec{Priority: &prio, Containers: []corev1.Container{{Name: "c"}}}}
	if memReq != "" {
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(memReq)}
	}
	return p
}

func podStats(name string, ws uint64) statsapi.PodStats {
	return statsapi.PodStats{PodRef: statsapi.PodReference{Name: name, UID: name}, Memory: &statsapi.MemoryStats{WorkingSetBytes: &ws},
		Containers: []statsapi.ContainerStats{{Name: "c", Memory: &statsapi.MemoryStats{WorkingSetBytes: &ws}}}}
}

func TestRankMemoryAndMessage(t *testing.T) {
	const mi = 1 << 20
	s := summary(50*mi, 950*mi,
		podStats("guaranteed", 200*mi), // within its 256Mi request
		podStats("besteffort-big", 300*mi),
		podStats("besteffort-small", 10*mi),
		podStats("high-prio", 400*mi),
		podStats("burstable", 600*mi), // 500Mi above its request
	)
	pods := []*corev1.Pod{pod("guaranteed", 0, "256Mi"), pod("besteffort-small", 0, ""), pod("high-prio", 1000, ""), pod("besteffort-big", 0, ""), pod("burstable", 0, "100Mi"), pod("nostats", 0, "")}
	stats := PodStats(s)
	Rank(SignalMemoryAvailable, pods, stats)
	var got []string
	for _, p := range pods {
		got = append(got, p.Name)
	}
	want := []string{"nostats", "burstable", "besteffort-big", "besteffort-small", "high-prio", "guaranteed"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("rank (-want +got):\n%s", d)
	}
	ts, _ := Parse(DefaultHard, nil, nil, nil)
	var mem Threshold
	for _, th := range ts {
		if th.Signal == SignalMemoryAvailable {
			mem = th
		}
	}
	msg, ann := Message(mem, Observe(s), pods[1], stats)
	wantMsg := "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. Container c was using 600Mi, request is 100Mi, has larger consumption of memory. "
	if msg != wantMsg {
		t.Errorf("message\n got %q\nwant %q", msg, wantMsg)
	}
	if d := cmp.Diff(map[string]string{OffendingContainersKey: "c", OffendingContainersUsageKey: "600Mi", StarvedResourceKey: "memory"}, ann); d != "" {
		t.Errorf("annotations (-want +got):\n%s", d)
	}
	// Within its request: no container named.
	msg, _ = Message(mem, Observe(s), pods[5], stats)
	if msg != "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. " {
		t.Errorf("message of a pod within its request: %q", msg)
	}
}

func TestCriticalAndGrace(t *testing.T) {
	p := pod("p", 0, "")
	if Critical(p) {
		t.Error("a plain pod is not critical")
	}
	p.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
	if !Critical(p) {
		t.Error("a static pod is critical")
	}
	crit := pod("c", systemCriticalPriority, "")
	if !Critical(crit) {
		t.Error("a system-critical pod is critical")
	}
	m := NewManager(Config{MaxPodGracePeriod: 20 * time.Second})
	sixty := int64(60)
	p.Spec.TerminationGracePeriodSeconds = &sixty
	if g := m.PodGracePeriod(Threshold{Signal: SignalMemoryAvailable}, p); g != 0 {
		t.Errorf("hard: grace %v, want 0", g)
	}
	if g := m.PodGracePeriod(Threshold{Signal: SignalMemoryAvailable, GracePeriod: time.Second}, p); g != 20*time.Second {
		t.Errorf("soft: grace %v, want the 20s cap", g)
	}
	if g := NewManager(Config{}).PodGracePeriod(Threshold{Signal: SignalMemoryAvailable, GracePeriod: time.Second}, p); g != 0 {
		t.Errorf("soft with the default max pod grace period 0: grace %v, want 0", g)
	}
	if g := NewManager(Config{MaxPodGracePeriod: -1}).PodGracePeriod(Threshold{Signal: SignalMemoryAvailable, GracePeriod: time.Second}, p); g != time.Minute {
		t.Errorf("soft with a negative max pod grace period: grace %v, want the pod's 1m", g)
	}
}

func TestAdmit(t *testing.T) {
	be := pod("be", 0, "")
	burstable := pod("burstable", 0, "64Mi")
	tolerating := pod("tolerating", 0, "")
	tolerating.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	mem := map[corev1.NodeConditionType]bool{corev1.NodeMemoryPressure: true}
	disk := map[corev1.NodeConditionType]bool{corev1.NodeDiskPressure: true, corev1.NodeMemoryPressure: true}
	for _, tc := range []struct {
		pod    *corev1.Pod
		conds  map[corev1.NodeConditionType]bool
		reject string
	}{
		{be, nil, ""},
		{be, mem, "The node had condition: [MemoryPressure]. "},
		{burstable, mem, ""},
		{tolerating, mem, ""},
		{burstable, disk, "The node had condition: [MemoryPressure DiskPressure]. "},
	} {
		msg, reject := AdmitMessage(tc.pod, tc.conds)
		if reject != (tc.reject != "") || msg != tc.reject {
			t.Errorf("%s under %v: reject %v %q, want %q", tc.pod.Name, tc.conds, reject, msg, tc.reject)
		}
	}
}

// Whatever the flags say, parsing never panics, and what it accepts is
// well formed: known signals, soft ones with a grace period.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"memory.available<100Mi", "nodefs.available<10%,imagefs.available<15%", "pid.available<1e3", "memory.available<-1", "x<y", "nodefs.available<0%", "memory.available<1.5Gi"} {
		f.Add(s, "memory.available<1Gi", "memory.available=1m", "memory.available=5%")
	}
	f.Fuzz(func(t *testing.T, hard, soft, grace, reclaim string) {
		var ms [4]map[string]string
		for i, in := range []struct{ s, sep string }{{hard, "<"}, {soft, "<"}, {grace, "="}, {reclaim, "="}} {
			m, err := ParseMap(in.s, in.sep)
			if err != nil {
				return
			}
			ms[i] = m
		}
		ts, err := Parse(ms[0], ms[1], ms[2], ms[3])
		if err != nil {
			return
		}
		for _, th := range ts {
			if th.Signal.Resource() == "" || th.GracePeriod < 0 {
				t.Errorf("accepted %+v", th)
			}
			if th.Value.Quantity == nil && !(th.Value.Percentage >= 0 && th.Value.Percentage <= 1) {
				t.Errorf("accepted percentage %v", th.Value.Percentage)
			}
		}
	})
}
