package job

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Labels, annotations and the finalizer upstream puts on a Job's pods.
const (
	trackingFinalizer         = batchv1.JobTrackingFinalizer
	completionIndexKey        = batchv1.JobCompletionIndexAnnotation
	indexFailureCountKey      = batchv1.JobIndexFailureCountAnnotation
	indexIgnoredFailureCntKey = batchv1.JobIndexIgnoredFailureCountAnnotation
	completionIndexEnv        = "JOB_COMPLETION_INDEX"
	unknownIndex              = -1
)

// controllerKind is what the ownerReferences this controller writes name.
var controllerKind = batchv1.SchemeGroupVersion.WithKind("Job")

func hasTrackingFinalizer(p *corev1.Pod) bool {
	for _, f := range p.Finalizers {
		if f == trackingFinalizer {
			return true
		}
	}
	return false
}

// podIndex is a pod's completion index, or unknownIndex.
func podIndex(p *corev1.Pod) int {
	v, ok := p.Annotations[completionIndexKey]
	if !ok {
		return unknownIndex
	}
	i, err := strconv.Atoi(v)
	if err != nil || i < 0 {
		return unknownIndex
	}
	return i
}

func annotationInt(p *corev1.Pod, key string) int {
	i, err := strconv.Atoi(p.Annotations[key])
	if err != nil || i < 0 {
		return 0
	}
	return i
}

func isIndexed(j *batchv1.Job) bool {
	return j.Spec.CompletionMode != nil && *j.Spec.CompletionMode == batchv1.IndexedCompletion
}

// newPod is the pod the Job's template describes, owned by the Job and
// held by the tracking finalizer; for an Indexed Job it carries its index
// (annotation, label, hostname and JOB_COMPLETION_INDEX) and, with
// backoffLimitPerIndex, the failures its index had so far.
func newPod(j *batchv1.Job, index int, failures, ignored int) *corev1.Pod {
	t := j.Spec.Template.DeepCopy()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       j.Namespace,
			GenerateName:    j.Name + "-",
			Labels:          t.Labels,
			Annotations:     t.Annotations,
			Finalizers:      append(t.Finalizers, trackingFinalizer),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(j, controllerKind)},
		},
		Spec: t.Spec,
	}
	if index == unknownIndex {
		return p
	}
	ix := strconv.Itoa(index)
	p.GenerateName = fmt.Sprintf("%s-%d-", j.Name, index)
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Annotations[completionIndexKey] = ix
	p.Labels[batchv1.JobCompletionIndexAnnotation] = ix
	if j.Spec.BackoffLimitPerIndex != nil {
		p.Annotations[indexFailureCountKey] = strconv.Itoa(failures)
		if ignored > 0 {
			p.Annotations[indexIgnoredFailureCntKey] = strconv.Itoa(ignored)
		}
	}
	if p.Spec.Hostname == "" {
		p.Spec.Hostname = fmt.Sprintf("%s-%d", j.Name, index)
	}
	env := corev1.EnvVar{Name: completionIndexEnv, ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{FieldPath: fmt.Sprintf("metadata.annotations['%s']", completionIndexKey)},
	}}
	addEnv := func(cs []corev1.Container) {
		for i := range cs {
			if !hasEnv(cs[i].Env, completionIndexEnv) {
				cs[i].Env = append(cs[i].Env, env)
			}
		}
	}
	addEnv(p.Spec.InitContainers)
	addEnv(p.Spec.Containers)
	return p
}

func hasEnv(env []corev1.EnvVar, name string) bool {
	for _, e := range env {
		if e.Name == name {
			return true
		}
	}
	return false
}

// createPods creates the pods in batches of 1, 2, 4, ... (upstream's
// slow start), stopping at the first batch with a failure, so that a Job
// whose pods cannot be created (quota, admission) does not send a burst
// of doomed requests each sync. It returns how many it created.
func (c *Controller) createPods(ctx context.Context, j *batchv1.Job, key string, pods []*corev1.Pod) (int, error) {
	var created atomic.Int32
	for next, batch := 0, 1; next < len(pods); batch *= 2 {
		n := min(batch, len(pods)-next)
		if err := c.createBatch(ctx, j, key, pods[next:next+n], &created); err != nil {
			return int(created.Load()), err
		}
		next += n
	}
	return int(created.Load()), nil
}

func (c *Controller) createBatch(ctx context.Context, j *batchv1.Job, key string, pods []*corev1.Pod, count *atomic.Int32) error {
	return parallel(len(pods), func(i int) error {
		created, err := c.client.Core.Pods(j.Namespace).Create(ctx, pods[i], metav1.CreateOptions{})
		if err != nil {
			if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
				return nil // the namespace is going away with the Job
			}
			c.recorder.Eventf(j, corev1.EventTypeWarning, "FailedCreate", "Error creating: %v", err)
			return fmt.Errorf("create pod for job %s: %w", key, err)
		}
		c.expect.Add(key, createdPod(created.Name))
		count.Add(1)
		c.recorder.Eventf(j, corev1.EventTypeNormal, "SuccessfulCreate", "Created pod: %v", created.Name)
		return nil
	})
}

// deletePods deletes the pods. With dropFinalizer the tracking finalizer
// goes first, so the pod is not counted (suspension, scale-down);
// otherwise it stays, and the pod is counted once it is gone or failed.
func (c *Controller) deletePods(ctx context.Context, j *batchv1.Job, key string, pods []*corev1.Pod, dropFinalizer bool) error {
	return parallel(len(pods), func(i int) error {
		p := pods[i]
		if dropFinalizer && hasTrackingFinalizer(p) {
			if err := c.removeFinalizer(ctx, key, p); err != nil {
				return err
			}
		}
		err := c.client.Core.Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			c.recorder.Eventf(j, corev1.EventTypeWarning, "FailedDelete", "Error deleting: %v", err)
			return fmt.Errorf("delete pod %s of job %s: %w", p.Name, key, err)
		}
		c.expect.Add(key, deletedPod(p.UID))
		if err == nil {
			c.recorder.Eventf(j, corev1.EventTypeNormal, "SuccessfulDelete", "Deleted pod: %v", p.Name)
		}
		return nil
	})
}

// removeFinalizer takes the tracking finalizer off a pod with a JSON
// patch guarded by the pod's finalizer list, so a concurrent change of
// the list is not overwritten.
func (c *Controller) removeFinalizer(ctx context.Context, key string, p *corev1.Pod) error {
	var keep []string
	for _, f := range p.Finalizers {
		if f != trackingFinalizer {
			keep = append(keep, f)
		}
	}
	if keep == nil {
		keep = []string{}
	}
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/finalizers", "value": p.Finalizers},
		{"op": "replace", "path": "/metadata/finalizers", "value": keep},
	})
	if err != nil {
		return err
	}
	_, err = c.client.Core.Pods(p.Namespace).Patch(ctx, p.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove finalizer of pod %s of job %s: %w", p.Name, key, err)
	}
	c.expect.Add(key, unfinalizedPod(p.UID))
	return nil
}

// removeFinalizers removes the tracking finalizer from every pod given.
func (c *Controller) removeFinalizers(ctx context.Context, key string, pods []*corev1.Pod) error {
	return parallel(len(pods), func(i int) error { return c.removeFinalizer(ctx, key, pods[i]) })
}

// parallel runs f for 0..n-1 on at most 16 goroutines and returns the
// first error.
func parallel(n int, f func(int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		sem   = make(chan struct{}, 16)
	)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := f(i); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}
