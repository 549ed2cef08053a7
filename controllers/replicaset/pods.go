package replicaset

import (
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// isPodActive: neither terminated nor being deleted, so it counts toward
// a ReplicaSet's replicas.
func isPodActive(p *corev1.Pod) bool {
	return p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed && p.DeletionTimestamp == nil
}

// isPodTerminating: being deleted but not yet terminated.
func isPodTerminating(p *corev1.Pod) bool {
	return p.DeletionTimestamp != nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// podFromTemplate is the pod a ReplicaSet creates: its template's
// metadata and spec, a name generated from the ReplicaSet's, and the
// ReplicaSet (named as kind) as its controller.
func podFromTemplate(rs *appsv1.ReplicaSet, kind schema.GroupVersionKind) *corev1.Pod {
	t := rs.Spec.Template.DeepCopy()
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName:    rs.Name + "-",
			Namespace:       rs.Namespace,
			Labels:          t.Labels,
			Annotations:     t.Annotations,
			Finalizers:      t.Finalizers,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(rs, kind)},
		},
		Spec: t.Spec,
	}
}

// slowStartBatch calls fn count times, in batches that double from
// initial (1, 2, 4, ...) while every call of a batch succeeds, each batch
// in parallel. A batch with a failure ends it: when the API refuses (a
// quota, a webhook), the controller finds out after one call, not after
// hundreds. It returns how many calls succeeded and the first error.
func slowStartBatch(count, initial int, fn func() error) (int, error) {
	remaining, successes := count, 0
	for batch := min(remaining, initial); batch > 0; batch = min(2*batch, remaining) {
		errs := make(chan error, batch)
		var wg sync.WaitGroup
		for range batch {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := fn(); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		successes += batch - len(errs)
		if err, failed := <-errs; failed {
			return successes, err
		}
		remaining -= batch
	}
	return successes, nil
}

func ptr[T any](v T) *T { return &v }
