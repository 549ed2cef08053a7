package job

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The pod writes of a Job the informer has not shown yet are named in
// the controller's kit.Expectations: created pods by name, deleted pods
// and pods whose tracking finalizer was removed by UID. While any is
// pending the Job's pod list is stale, so it neither creates nor deletes
// pods.
func createdPod(name string) string       { return "created/" + name }
func deletedPod(uid types.UID) string     { return "deleted/" + string(uid) }
func unfinalizedPod(uid types.UID) string { return "unfinalized/" + string(uid) }

// expectationsSatisfied drops the writes pods (the Job's pods as the
// informer has them) shows done and says whether the Job may be managed.
func (c *Controller) expectationsSatisfied(key string, pods []*corev1.Pod) bool {
	byName := make(map[string]*corev1.Pod, len(pods))
	byUID := make(map[types.UID]*corev1.Pod, len(pods))
	for _, pod := range pods {
		byName[pod.Name] = pod
		byUID[pod.UID] = pod
	}
	c.expect.ObservedIf(key, func(write string) bool {
		what, id, _ := strings.Cut(write, "/")
		switch what {
		case "created":
			return byName[id] != nil
		case "deleted":
			pod := byUID[types.UID(id)]
			return pod == nil || pod.DeletionTimestamp != nil
		case "unfinalized":
			pod := byUID[types.UID(id)]
			return pod == nil || !hasTrackingFinalizer(pod)
		}
		return false
	})
	return c.expect.Satisfied(key)
}
