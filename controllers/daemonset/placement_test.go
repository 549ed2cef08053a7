package daemonset

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/controllers/history"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

// Each DaemonSet runs one pod on exactly the nodes its selector, affinity
// and tolerations (with the daemon tolerations) allow, and follows nodes
// as they come and change.
func TestPlacement(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{Scheduler: true})
	addNode(e, "plain", nil)
	addNode(e, "ssd", map[string]string{"disk": "ssd"})
	addNode(e, "tainted", nil, corev1.Taint{Key: "dedicated", Value: "infra", Effect: corev1.TaintEffectNoSchedule})
	// Cordoned as kubectl cordon and the node lifecycle controller leave
	// it: daemon pods still go there.
	e.AddNode("cordoned", func(n *corev1.Node) {
		n.Spec.Unschedulable = true
		n.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}}
	})
	// Node problems daemon pods tolerate.
	addNode(e, "troubled", nil,
		corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoExecute},
		corev1.Taint{Key: corev1.TaintNodeMemoryPressure, Effect: corev1.TaintEffectNoSchedule},
		corev1.Taint{Key: corev1.TaintNodeDiskPressure, Effect: corev1.TaintEffectNoSchedule},
		corev1.Taint{Key: corev1.TaintNodePIDPressure, Effect: corev1.TaintEffectNoSchedule})
	// Only hostNetwork daemon pods tolerate a node without pod network.
	addNode(e, "netdown", nil, corev1.Taint{Key: corev1.TaintNodeNetworkUnavailable, Effect: corev1.TaintEffectNoSchedule})
	e.WaitNodesReady(6)
	start(t, e)

	for _, tc := range []struct {
		name  string
		mod   func(*appsv1.DaemonSet)
		nodes []string
	}{
		{"everywhere", nil, []string{"plain", "ssd", "cordoned", "troubled"}},
		{"selector", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.NodeSelector = map[string]string{"disk": "ssd"} }, []string{"ssd"}},
		{"affinity", func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
					{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{"plain", "tainted", "netdown"}},
				}}},
			}}}
		}, []string{"plain"}},
		{"tolerations", func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "infra", Effect: corev1.TaintEffectNoSchedule}}
		}, []string{"plain", "ssd", "tainted", "cordoned", "troubled"}},
		{"hostnetwork", func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.HostNetwork = true }, []string{"plain", "ssd", "cordoned", "troubled", "netdown"}},
	} {
		create(t, e, newDS(tc.name, tc.mod))
		defer func() {
			if t.Failed() {
				t.Logf("%s: pods %s", tc.name, names(pods(t, e, tc.name)))
			}
		}()
		t.Run(tc.name, func(t *testing.T) { waitPlaced(t, e, tc.name, tc.nodes...) })
	}
	n := int32(4)
	waitStatus(t, e, "everywhere", appsv1.DaemonSetStatus{DesiredNumberScheduled: n, CurrentNumberScheduled: n, NumberReady: n, NumberAvailable: n, UpdatedNumberScheduled: n})

	t.Run("a new node gets a pod", func(t *testing.T) {
		addNode(e, "ssd2", map[string]string{"disk": "ssd"})
		waitPlaced(t, e, "selector", "ssd", "ssd2")
	})
	t.Run("a node losing its label loses the pod", func(t *testing.T) {
		modifyNode(t, e, "ssd", func(n *corev1.Node) { delete(n.Labels, "disk") })
		waitPlaced(t, e, "selector", "ssd2")
	})
	t.Run("a new NoSchedule taint keeps the pod, misscheduled", func(t *testing.T) {
		modifyNode(t, e, "plain", func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}}
		})
		waitStatus(t, e, "everywhere", appsv1.DaemonSetStatus{DesiredNumberScheduled: 4, CurrentNumberScheduled: 4, NumberMisscheduled: 1, NumberReady: 4, NumberAvailable: 4, UpdatedNumberScheduled: 4})
		waitPlaced(t, e, "everywhere", "plain", "ssd", "ssd2", "cordoned", "troubled")
	})
	t.Run("a NoExecute taint evicts it", func(t *testing.T) {
		modifyNode(t, e, "plain", func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoExecute}}
		})
		waitPlaced(t, e, "everywhere", "ssd", "ssd2", "cordoned", "troubled")
		waitStatus(t, e, "everywhere", appsv1.DaemonSetStatus{DesiredNumberScheduled: 4, CurrentNumberScheduled: 4, NumberReady: 4, NumberAvailable: 4, UpdatedNumberScheduled: 4})
	})
}

// A daemon pod is pinned to its node by required node affinity on the
// node's name, is controlled by its DaemonSet, carries the revision hash
// and template generation, and tolerates node problems.
func TestPodShape(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{Nodes: 1})
	start(t, e)
	ds := create(t, e, newDS("agent", func(ds *appsv1.DaemonSet) {
		// A user's not-ready toleration with a timeout is replaced: a
		// daemon pod is never evicted for it.
		sec := int64(30)
		ds.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &sec}}
		ds.Spec.Template.Spec.HostNetwork = true
	}))
	p := waitPlaced(t, e, "agent", "sim-0")[0]

	var revs *appsv1.ControllerRevisionList
	clustertest.Eventually(t, timeout, func() error {
		var err error
		revs, err = e.Client.Apps.ControllerRevisions("default").List(e.Ctx, metav1.ListOptions{LabelSelector: "app=agent"})
		if err == nil && len(revs.Items) != 1 {
			err = fmt.Errorf("%d revisions", len(revs.Items))
		}
		return err
	})
	hash := revs.Items[0].Labels[history.HashLabel]
	if revs.Items[0].Name != "agent-"+hash {
		t.Errorf("revision %s, want agent-%s", revs.Items[0].Name, hash)
	}
	if diff := cmp.Diff(map[string]string{"app": "agent", "controller-revision-hash": hash, "pod-template-generation": "1"}, p.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	wantRefs := []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: ds.UID, Controller: ptr(true), BlockOwnerDeletion: ptr(true)}}
	if diff := cmp.Diff(wantRefs, p.OwnerReferences); diff != "" {
		t.Errorf("ownerReferences (-want +got):\n%s", diff)
	}
	wantAffinity := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"sim-0"}}}}},
	}}}
	if diff := cmp.Diff(wantAffinity, p.Spec.Affinity); diff != "" {
		t.Errorf("affinity (-want +got):\n%s", diff)
	}
	exists := corev1.TolerationOpExists
	wantTolerations := []corev1.Toleration{
		{Key: corev1.TaintNodeNotReady, Operator: exists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeUnreachable, Operator: exists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeDiskPressure, Operator: exists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeMemoryPressure, Operator: exists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodePIDPressure, Operator: exists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeUnschedulable, Operator: exists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeNetworkUnavailable, Operator: exists, Effect: corev1.TaintEffectNoSchedule},
	}
	if diff := cmp.Diff(wantTolerations, p.Spec.Tolerations); diff != "" {
		t.Errorf("tolerations (-want +got):\n%s", diff)
	}
	if p.GenerateName != "agent-" {
		t.Errorf("generateName %q, want agent-", p.GenerateName)
	}
}

// A failed daemon pod is deleted and replaced on its node.
func TestFailedPodReplaced(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{Nodes: 1})
	start(t, e)
	create(t, e, newDS("agent", nil))
	p := waitPlaced(t, e, "agent", "sim-0")[0]
	p.Status.Phase = corev1.PodFailed
	if _, err := e.Client.Core.Pods("default").UpdateStatus(e.Ctx, &p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, timeout, func() error {
		for _, q := range pods(t, e, "agent") {
			if q.UID == p.UID {
				return fmt.Errorf("failed pod %s still there", p.Name)
			}
		}
		return nil
	})
	waitPlaced(t, e, "agent", "sim-0")
	clustertest.Eventually(t, timeout, func() error {
		evs, err := e.Client.Core.Events("default").List(e.Ctx, metav1.ListOptions{FieldSelector: "reason=FailedDaemonPod"})
		if err == nil && len(evs.Items) == 0 {
			err = fmt.Errorf("no FailedDaemonPod event")
		}
		return err
	})
}

// A pod that is not Ready counts as unavailable; a Ready one becomes
// available only minReadySeconds later.
func TestStatusAvailability(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{Nodes: 2})
	start(t, e)
	create(t, e, newDS("slow", readyDelay("1h")))
	waitStatus(t, e, "slow", appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, CurrentNumberScheduled: 2, NumberUnavailable: 2, UpdatedNumberScheduled: 2})

	create(t, e, newDS("agent", func(ds *appsv1.DaemonSet) { ds.Spec.MinReadySeconds = 5 }))
	waitStatus(t, e, "agent", appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, CurrentNumberScheduled: 2, NumberReady: 2, NumberUnavailable: 2, UpdatedNumberScheduled: 2})
	waitStatus(t, e, "agent", appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, CurrentNumberScheduled: 2, NumberReady: 2, NumberAvailable: 2, UpdatedNumberScheduled: 2})
}
