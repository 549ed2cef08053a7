package deployment

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
)

// Annotations the controller writes on ReplicaSets (and the revision on
// the Deployment), as upstream; kubectl rollout reads them.
const (
	RevisionAnnotation        = "deployment.kubernetes.io/revision"
	RevisionHistoryAnnotation = "deployment.kubernetes.io/revision-history"
	DesiredReplicasAnnotation = "deployment.kubernetes.io/desired-replicas"
	MaxReplicasAnnotation     = "deployment.kubernetes.io/max-replicas"
	lastAppliedAnnotation     = "kubectl.kubernetes.io/last-applied-configuration"
	// maxRevisionHistoryChars bounds the revision-history annotation.
	maxRevisionHistoryChars = 2000
)

// Condition reasons, as upstream.
const (
	reasonReplicaSetUpdated  = "ReplicaSetUpdated"
	reasonFailedRSCreate     = "ReplicaSetCreateError"
	reasonNewReplicaSet      = "NewReplicaSetCreated"
	reasonFoundNewRS         = "FoundNewReplicaSet"
	reasonNewRSAvailable     = "NewReplicaSetAvailable"
	reasonTimedOut           = "ProgressDeadlineExceeded"
	reasonPaused             = "DeploymentPaused"
	reasonResumed            = "DeploymentResumed"
	reasonMinimumAvailable   = "MinimumReplicasAvailable"
	reasonMinimumUnavailable = "MinimumReplicasUnavailable"
	reasonScalingReplicaSet  = "ScalingReplicaSet"
	reasonSelectingAll       = "SelectingAll"
)

// skipCopy are the Deployment annotations not copied to its ReplicaSets:
// the controller's own, and kubectl's record of the last apply.
var skipCopy = map[string]bool{
	lastAppliedAnnotation:       true,
	RevisionAnnotation:          true,
	RevisionHistoryAnnotation:   true,
	DesiredReplicasAnnotation:   true,
	MaxReplicasAnnotation:       true,
	appsv1.DeprecatedRollbackTo: true,
}

// templateHash names a pod template: the pod-template-hash label value
// and the suffix of its ReplicaSet's name. collisionCount changes it when
// a ReplicaSet of that name exists with another template.
func templateHash(t *corev1.PodTemplateSpec, collisionCount *int32) string {
	h := fnv.New32a()
	// JSON of a struct is deterministic (fields in order, map keys
	// sorted), which is all a name needs.
	b, _ := json.Marshal(t)
	h.Write(b)
	if collisionCount != nil {
		fmt.Fprintf(h, "%d", *collisionCount)
	}
	return rand.SafeEncodeString(fmt.Sprint(h.Sum32()))
}

// equalIgnoreHash compares two templates but for their pod-template-hash
// label: how a Deployment finds the ReplicaSet of its current template,
// a rolled-back one included.
func equalIgnoreHash(a, b *corev1.PodTemplateSpec) bool {
	a, b = a.DeepCopy(), b.DeepCopy()
	delete(a.Labels, appsv1.DefaultDeploymentUniqueLabelKey)
	delete(b.Labels, appsv1.DefaultDeploymentUniqueLabelKey)
	return apiequality.Semantic.DeepEqual(a, b)
}

func isRollingUpdate(d *appsv1.Deployment) bool {
	return d.Spec.Strategy.Type == appsv1.RollingUpdateDeploymentStrategyType
}

// resolveFenceposts turns maxSurge and maxUnavailable into counts for
// desired replicas: surge rounds up, unavailable down; if both come to 0,
// unavailable is 1 so that a rollout can move at all.
func resolveFenceposts(maxSurge, maxUnavailable *intstr.IntOrString, desired int32) (int32, int32, error) {
	zero := intstr.FromInt32(0)
	surge, err := intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(maxSurge, zero), int(desired), true)
	if err != nil {
		return 0, 0, err
	}
	unavailable, err := intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(maxUnavailable, zero), int(desired), false)
	if err != nil {
		return 0, 0, err
	}
	if surge == 0 && unavailable == 0 {
		unavailable = 1
	}
	return int32(surge), int32(unavailable), nil
}

func maxSurge(d *appsv1.Deployment) int32 {
	if !isRollingUpdate(d) || d.Spec.Strategy.RollingUpdate == nil {
		return 0
	}
	s, _, _ := resolveFenceposts(d.Spec.Strategy.RollingUpdate.MaxSurge, d.Spec.Strategy.RollingUpdate.MaxUnavailable, *d.Spec.Replicas)
	return s
}

func maxUnavailable(d *appsv1.Deployment) int32 {
	if !isRollingUpdate(d) || d.Spec.Strategy.RollingUpdate == nil || *d.Spec.Replicas == 0 {
		return 0
	}
	_, u, _ := resolveFenceposts(d.Spec.Strategy.RollingUpdate.MaxSurge, d.Spec.Strategy.RollingUpdate.MaxUnavailable, *d.Spec.Replicas)
	return min(u, *d.Spec.Replicas)
}

func hasProgressDeadline(d *appsv1.Deployment) bool {
	return d.Spec.ProgressDeadlineSeconds != nil && *d.Spec.ProgressDeadlineSeconds != math.MaxInt32
}

func hasRevisionHistoryLimit(d *appsv1.Deployment) bool {
	return d.Spec.RevisionHistoryLimit != nil && *d.Spec.RevisionHistoryLimit != math.MaxInt32
}

// revision is a ReplicaSet's revision annotation, 0 when it has none.
func revision(rs *appsv1.ReplicaSet) int64 {
	n, _ := strconv.ParseInt(rs.Annotations[RevisionAnnotation], 10, 64)
	return n
}

func maxRevision(rss []*appsv1.ReplicaSet) int64 {
	var m int64
	for _, rs := range rss {
		m = max(m, revision(rs))
	}
	return m
}

func replicas(rs *appsv1.ReplicaSet) int32 {
	if rs == nil || rs.Spec.Replicas == nil {
		return 0
	}
	return *rs.Spec.Replicas
}

// sum adds f over the ReplicaSets that are not nil.
func sum(rss []*appsv1.ReplicaSet, f func(*appsv1.ReplicaSet) int32) int32 {
	var n int32
	for _, rs := range rss {
		if rs != nil {
			n += f(rs)
		}
	}
	return n
}

func specReplicas(rs *appsv1.ReplicaSet) int32      { return replicas(rs) }
func statusReplicas(rs *appsv1.ReplicaSet) int32    { return rs.Status.Replicas }
func readyReplicas(rs *appsv1.ReplicaSet) int32     { return rs.Status.ReadyReplicas }
func availableReplicas(rs *appsv1.ReplicaSet) int32 { return rs.Status.AvailableReplicas }

// activeReplicaSets are those with replicas to run.
func activeReplicaSets(rss []*appsv1.ReplicaSet) []*appsv1.ReplicaSet {
	var out []*appsv1.ReplicaSet
	for _, rs := range rss {
		if replicas(rs) > 0 {
			out = append(out, rs)
		}
	}
	return out
}

// olderFirst orders by creation, then name.
func olderFirst(a, b *appsv1.ReplicaSet) bool {
	if a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.Name < b.Name
	}
	return a.CreationTimestamp.Before(&b.CreationTimestamp)
}

func sortOlderFirst(rss []*appsv1.ReplicaSet) {
	sort.SliceStable(rss, func(i, j int) bool { return olderFirst(rss[i], rss[j]) })
}

// sortBySize orders larger first; among equals, newer first when
// newerFirst (scaling up), older first otherwise (scaling down).
func sortBySize(rss []*appsv1.ReplicaSet, newerFirst bool) {
	sort.SliceStable(rss, func(i, j int) bool {
		if replicas(rss[i]) != replicas(rss[j]) {
			return replicas(rss[i]) > replicas(rss[j])
		}
		if newerFirst {
			return olderFirst(rss[j], rss[i])
		}
		return olderFirst(rss[i], rss[j])
	})
}

// sortByRevision orders by revision, then creation.
func sortByRevision(rss []*appsv1.ReplicaSet) {
	sort.SliceStable(rss, func(i, j int) bool {
		if ri, rj := revision(rss[i]), revision(rss[j]); ri != rj {
			return ri < rj
		}
		return olderFirst(rss[i], rss[j])
	})
}

// findNewReplicaSet is the oldest ReplicaSet whose template is d's: the
// one the rollout converges on.
func findNewReplicaSet(d *appsv1.Deployment, rss []*appsv1.ReplicaSet) *appsv1.ReplicaSet {
	sorted := append([]*appsv1.ReplicaSet(nil), rss...)
	sortOlderFirst(sorted)
	for _, rs := range sorted {
		if equalIgnoreHash(&rs.Spec.Template, &d.Spec.Template) {
			return rs
		}
	}
	return nil
}

// copyAnnotations copies d's annotations but the skipped ones to rs;
// true if rs changed.
func copyAnnotations(d *appsv1.Deployment, rs *appsv1.ReplicaSet) bool {
	changed := false
	if rs.Annotations == nil {
		rs.Annotations = map[string]string{}
	}
	for k, v := range d.Annotations {
		if skipCopy[k] || rs.Annotations[k] == v {
			continue
		}
		rs.Annotations[k] = v
		changed = true
	}
	return changed
}

// setReplicasAnnotations records on rs the Deployment's size and maximum
// size, which proportional scaling reads later; true if rs changed.
func setReplicasAnnotations(rs *appsv1.ReplicaSet, desired, maxReplicas int32) bool {
	changed := false
	if rs.Annotations == nil {
		rs.Annotations = map[string]string{}
	}
	for k, v := range map[string]string{DesiredReplicasAnnotation: strconv.Itoa(int(desired)), MaxReplicasAnnotation: strconv.Itoa(int(maxReplicas))} {
		if rs.Annotations[k] != v {
			rs.Annotations[k] = v
			changed = true
		}
	}
	return changed
}

func replicasAnnotationsNeedUpdate(rs *appsv1.ReplicaSet, desired, maxReplicas int32) bool {
	return rs.Annotations[DesiredReplicasAnnotation] != strconv.Itoa(int(desired)) ||
		rs.Annotations[MaxReplicasAnnotation] != strconv.Itoa(int(maxReplicas))
}

// setNewReplicaSetAnnotations brings the new ReplicaSet's annotations up
// to date: the Deployment's, the revision (raised to newRevision, the old
// one kept in revision-history when it is a rollback to rs) and, for a
// ReplicaSet about to be created, the replicas annotations. True if rs
// changed.
func setNewReplicaSetAnnotations(d *appsv1.Deployment, rs *appsv1.ReplicaSet, newRevision int64, exists bool) bool {
	changed := copyAnnotations(d, rs)
	old, had := rs.Annotations[RevisionAnnotation]
	oldRevision, err := strconv.ParseInt(old, 10, 64)
	if err != nil {
		if old != "" {
			return false
		}
		oldRevision = 0
	}
	if oldRevision < newRevision {
		rs.Annotations[RevisionAnnotation] = strconv.FormatInt(newRevision, 10)
		changed = true
		if had {
			rs.Annotations[RevisionHistoryAnnotation] = appendRevisionHistory(rs.Annotations[RevisionHistoryAnnotation], old)
		}
	}
	if !exists && setReplicasAnnotations(rs, *d.Spec.Replicas, *d.Spec.Replicas+maxSurge(d)) {
		changed = true
	}
	return changed
}

// appendRevisionHistory adds rev to the comma-separated history, dropping
// the oldest entries to stay within maxRevisionHistoryChars.
func appendRevisionHistory(history, rev string) string {
	if history == "" {
		return rev
	}
	revs := strings.Split(history, ",")
	total := len(history) + len(rev) + 1
	start := 0
	for total > maxRevisionHistoryChars && start < len(revs) {
		total -= len(revs[start]) + 1
		start++
	}
	if total > maxRevisionHistoryChars {
		return history
	}
	return strings.Join(append(revs[start:], rev), ",")
}

// setDeploymentRevision sets d's revision annotation; true if it changed.
func setDeploymentRevision(d *appsv1.Deployment, rev string) bool {
	if d.Annotations[RevisionAnnotation] == rev {
		return false
	}
	if d.Annotations == nil {
		d.Annotations = map[string]string{}
	}
	d.Annotations[RevisionAnnotation] = rev
	return true
}

// ---- conditions

func getCondition(st appsv1.DeploymentStatus, t appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			return &st.Conditions[i]
		}
	}
	return nil
}

func newCondition(t appsv1.DeploymentConditionType, s corev1.ConditionStatus, reason, msg string, now time.Time) appsv1.DeploymentCondition {
	n := metav1.NewTime(now)
	return appsv1.DeploymentCondition{Type: t, Status: s, LastUpdateTime: n, LastTransitionTime: n, Reason: reason, Message: msg}
}

// setCondition adds or replaces c, unless one of its type has its status
// and reason already; a status unchanged keeps its transition time.
func setCondition(st *appsv1.DeploymentStatus, c appsv1.DeploymentCondition) {
	cur := getCondition(*st, c.Type)
	if cur != nil && cur.Status == c.Status && cur.Reason == c.Reason {
		return
	}
	if cur != nil && cur.Status == c.Status {
		c.LastTransitionTime = cur.LastTransitionTime
	}
	removeCondition(st, c.Type)
	st.Conditions = append(st.Conditions, c)
}

func removeCondition(st *appsv1.DeploymentStatus, t appsv1.DeploymentConditionType) {
	out := st.Conditions[:0:0]
	for _, c := range st.Conditions {
		if c.Type != t {
			out = append(out, c)
		}
	}
	st.Conditions = out
	if len(out) == 0 {
		st.Conditions = nil
	}
}
