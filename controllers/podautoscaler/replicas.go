package podautoscaler

import (
	"fmt"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// podMetric is one pod's usage of a resource, in milli-units, over the
// window that ends at timestamp.
type podMetric struct {
	Timestamp time.Time
	Window    time.Duration
	Value     int64
}

// podMetrics are the pods' figures by pod name.
type podMetrics map[string]podMetric

// tolerances are how far the usage ratio may be from 1 in either
// direction before the controller acts (0.1 by default).
type tolerances struct{ scaleDown, scaleUp float64 }

func (t tolerances) within(ratio float64) bool {
	return (1.0-t.scaleDown) <= ratio && ratio <= (1.0+t.scaleUp)
}

// readiness holds the two durations that decide whether a young pod's
// CPU figure counts: upstream's --horizontal-pod-autoscaler-cpu-
// initialization-period and -initial-readiness-delay.
type readiness struct {
	cpuInitialization, initialReadinessDelay time.Duration
}

// groupPods sorts pods as upstream's replica calculator does: gone or
// failed pods are ignored; pending pods are unready; pods without a
// figure are missing; for CPU, a pod still starting (not ready, or
// ready for less than one metric window within its initialization
// period, or never ready yet within the readiness delay) is unready.
// The rest count.
func groupPods(pods []*corev1.Pod, metrics podMetrics, res corev1.ResourceName, r readiness, now time.Time) (ready int, unready, missing, ignored map[string]bool) {
	unready, missing, ignored = map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodFailed {
			ignored[pod.Name] = true
			continue
		}
		if pod.Status.Phase == corev1.PodPending {
			unready[pod.Name] = true
			continue
		}
		m, found := metrics[pod.Name]
		if !found {
			missing[pod.Name] = true
			continue
		}
		if res == corev1.ResourceCPU {
			var cond *corev1.PodCondition
			for i := range pod.Status.Conditions {
				if pod.Status.Conditions[i].Type == corev1.PodReady {
					cond = &pod.Status.Conditions[i]
				}
			}
			notReady := false
			switch {
			case cond == nil || pod.Status.StartTime == nil:
				notReady = true
			case pod.Status.StartTime.Add(r.cpuInitialization).After(now):
				// Still initializing: only a figure over a whole window
				// since it became ready counts.
				notReady = cond.Status == corev1.ConditionFalse || m.Timestamp.Before(cond.LastTransitionTime.Add(m.Window))
			default:
				// Unready and never ready since it started.
				notReady = cond.Status == corev1.ConditionFalse && pod.Status.StartTime.Add(r.initialReadinessDelay).After(cond.LastTransitionTime.Time)
			}
			if notReady {
				unready[pod.Name] = true
				continue
			}
		}
		ready++
	}
	return ready, unready, missing, ignored
}

// podRequests sums each pod's requests of res (of one container, if
// container is set); a container without a request is an error, as
// utilization is a share of the request.
func podRequests(pods []*corev1.Pod, container string, res corev1.ResourceName) (map[string]int64, error) {
	out := make(map[string]int64, len(pods))
	for _, pod := range pods {
		var sum int64
		for _, c := range pod.Spec.Containers {
			if container != "" && c.Name != container {
				continue
			}
			q, ok := c.Resources.Requests[res]
			if !ok {
				return nil, fmt.Errorf("missing request for %s in container %s of Pod %s", res, c.Name, pod.Name)
			}
			sum += q.MilliValue()
		}
		out[pod.Name] = sum
	}
	return out, nil
}

// utilizationRatio is the pods' usage as a share of their requests,
// against the target percentage: the ratio, the utilization in percent
// and the mean raw usage.
func utilizationRatio(metrics podMetrics, requests map[string]int64, target int32) (float64, int32, int64, error) {
	var usage, requested int64
	n := 0
	for name, m := range metrics {
		req, ok := requests[name]
		if !ok {
			continue // a pod deleted since the metrics were taken
		}
		usage += m.Value
		requested += req
		n++
	}
	if requested == 0 {
		return 0, 0, 0, fmt.Errorf("no metrics returned matched known pods")
	}
	util := int32(usage * 100 / requested)
	return float64(util) / float64(target), util, usage / int64(n), nil
}

// usageRatio is the pods' mean usage against a target mean, and the mean.
func usageRatio(metrics podMetrics, target int64) (float64, int64) {
	var sum int64
	for _, m := range metrics {
		sum += m.Value
	}
	mean := sum / int64(len(metrics))
	return float64(mean) / float64(target), mean
}

// replicaCalc is one computation of a replica count from pods and their
// figures, as upstream's ReplicaCalculator does it.
type replicaCalc struct {
	tolerances tolerances
	readiness  readiness
	now        time.Time
}

// utilizationReplicas is the replica count that brings the pods' mean
// utilization of res to target percent, with the utilization and mean
// raw usage now.
func (rc replicaCalc) utilizationReplicas(current, target int32, res corev1.ResourceName, container string, pods []*corev1.Pod, metrics podMetrics) (int32, int32, int64, error) {
	if len(pods) == 0 {
		return 0, 0, 0, fmt.Errorf("no pods returned by selector while calculating replica count")
	}
	ready, unready, missing, ignored := groupPods(pods, metrics, res, rc.readiness, rc.now)
	drop(metrics, ignored)
	drop(metrics, unready)
	if len(metrics) == 0 {
		return 0, 0, 0, fmt.Errorf("did not receive metrics for targeted pods (pods might be unready)")
	}
	requests, err := podRequests(pods, container, res)
	if err != nil {
		return 0, 0, 0, err
	}
	ratio, util, raw, err := utilizationRatio(metrics, requests, target)
	if err != nil {
		return 0, 0, 0, err
	}
	scaleUpWithUnready := len(unready) > 0 && ratio > 1.0
	if !scaleUpWithUnready && len(missing) == 0 {
		if rc.tolerances.within(ratio) {
			return current, util, raw, nil
		}
		return int32(math.Ceil(ratio * float64(ready))), util, raw, nil
	}
	// Guess conservatively for the pods without a figure: on a scale
	// down they use their whole request (or the target, if higher), on a
	// scale up none of it; unready pods use none on a scale up.
	if len(missing) > 0 {
		fallback := int64(max(100, target))
		for name := range missing {
			switch {
			case ratio < 1.0:
				metrics[name] = podMetric{Value: requests[name] * fallback / 100}
			case ratio > 1.0:
				metrics[name] = podMetric{Value: 0}
			}
		}
	}
	if scaleUpWithUnready {
		for name := range unready {
			metrics[name] = podMetric{Value: 0}
		}
	}
	newRatio, _, _, err := utilizationRatio(metrics, requests, target)
	if err != nil {
		return 0, 0, 0, err
	}
	return rc.rebalanced(current, ratio, newRatio, len(metrics)), util, raw, nil
}

// averageReplicas is the replica count that brings the pods' mean usage
// of res to target (milli-units), with the mean usage now.
func (rc replicaCalc) averageReplicas(current int32, target int64, res corev1.ResourceName, pods []*corev1.Pod, metrics podMetrics) (int32, int64, error) {
	if len(pods) == 0 {
		return 0, 0, fmt.Errorf("no pods returned by selector while calculating replica count")
	}
	ready, unready, missing, ignored := groupPods(pods, metrics, res, rc.readiness, rc.now)
	drop(metrics, ignored)
	drop(metrics, unready)
	if len(metrics) == 0 {
		return 0, 0, fmt.Errorf("did not receive metrics for targeted pods (pods might be unready)")
	}
	ratio, usage := usageRatio(metrics, target)
	scaleUpWithUnready := len(unready) > 0 && ratio > 1.0
	if !scaleUpWithUnready && len(missing) == 0 {
		if rc.tolerances.within(ratio) {
			return current, usage, nil
		}
		return int32(math.Ceil(ratio * float64(ready))), usage, nil
	}
	if len(missing) > 0 {
		for name := range missing {
			switch {
			case ratio < 1.0:
				metrics[name] = podMetric{Value: target}
			default:
				metrics[name] = podMetric{Value: 0}
			}
		}
	}
	if scaleUpWithUnready {
		for name := range unready {
			metrics[name] = podMetric{Value: 0}
		}
	}
	newRatio, _ := usageRatio(metrics, target)
	return rc.rebalanced(current, ratio, newRatio, len(metrics)), usage, nil
}

// rebalanced is the count after the guesses for missing and unready
// pods: no change if it is within tolerance or turns the direction of
// the first estimate.
func (rc replicaCalc) rebalanced(current int32, ratio, newRatio float64, n int) int32 {
	if rc.tolerances.within(newRatio) || (ratio < 1.0 && newRatio > 1.0) || (ratio > 1.0 && newRatio < 1.0) {
		return current
	}
	next := int32(math.Ceil(newRatio * float64(n)))
	if (newRatio < 1.0 && next > current) || (newRatio > 1.0 && next < current) {
		return current
	}
	return next
}

func drop(metrics podMetrics, names map[string]bool) {
	for n := range names {
		delete(metrics, n)
	}
}
