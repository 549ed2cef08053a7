package kit

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// PodEvents are the pod handlers of a controller of pods (ReplicaSet,
// DaemonSet, StatefulSet), as upstream's addPod, updatePod and
// deletePod: a pod's event wakes its owner of kind T, or, when it has no
// controller, every owner that may adopt it; a pod turning Ready wakes
// its owner again when it becomes available, minReadySeconds later,
// which no event announces.
type PodEvents[T object] struct {
	// Owner resolves a pod's controller of kind T (the zero T if none);
	// Selecting are the owners whose selector picks an orphan.
	Owner     func(metav1.Object) T
	Selecting func(metav1.Object) []T
	// Enqueue wakes an owner now, EnqueueAfter later.
	Enqueue      func(T)
	EnqueueAfter func(T, time.Duration)
	// MinReadySeconds is an owner's spec.minReadySeconds.
	MinReadySeconds func(T) int32
	// Created and Deleted, when set, see a pod of owner appear or go
	// (its expectations).
	Created func(owner T)
	Deleted func(owner T, pod metav1.Object)
	// GoingIsGone counts a pod first seen with a deletion timestamp as
	// deleted rather than created (an owner that replaces pods as soon
	// as they start going).
	GoingIsGone bool
}

// Handler is the three handlers, for a pod informer.
func (e *PodEvents[T]) Handler() cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{AddFunc: e.Add, UpdateFunc: e.Update, DeleteFunc: e.Delete}
}

// Add wakes a new pod's owner, or the owners that may adopt it.
func (e *PodEvents[T]) Add(obj any) {
	pod := obj.(*corev1.Pod)
	if e.GoingIsGone && pod.DeletionTimestamp != nil {
		// Seen first while already going (a restart of the
		// controller): not the creation an expectation waits for.
		e.Delete(pod)
		return
	}
	var none T
	if metav1.GetControllerOfNoCopy(pod) != nil {
		if o := e.Owner(pod); o != none {
			if e.Created != nil {
				e.Created(o)
			}
			e.Enqueue(o)
		}
		return
	}
	for _, o := range e.Selecting(pod) {
		e.Enqueue(o)
	}
}

// Update wakes the owners a pod's change concerns (WakeOwners), and its
// owner once more when it turned Ready.
func (e *PodEvents[T]) Update(oldObj, curObj any) {
	old, cur := oldObj.(*corev1.Pod), curObj.(*corev1.Pod)
	var none T
	o := WakeOwners(old, cur, e.Owner, e.Selecting, e.Enqueue)
	if o == none {
		return
	}
	if min := e.MinReadySeconds(o); min > 0 && !IsPodReady(old) && IsPodReady(cur) {
		e.EnqueueAfter(o, time.Duration(min)*time.Second+time.Second)
	}
}

// Delete wakes a deleted pod's owner.
func (e *PodEvents[T]) Delete(obj any) {
	pod, ok := Unwrap[metav1.Object](obj)
	if !ok {
		return
	}
	var none T
	if o := e.Owner(pod); o != none {
		if e.Deleted != nil {
			e.Deleted(o, pod)
		}
		e.Enqueue(o)
	}
}
