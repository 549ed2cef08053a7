// Package ephemeral is kube-controller-manager's ephemeral-volume
// controller: for each generic ephemeral volume of a pod it creates the
// PersistentVolumeClaim <pod>-<volume> from the volume's claim template,
// owned by the pod, so the claim goes with the pod (through the garbage
// collector) and binds, provisions and mounts like any other.
//
// It owns the creation of those claims and nothing else; it never
// updates or deletes them.
package ephemeral

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/component-helpers/storage/ephemeral"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/worker"
)

// Config is what the controller needs.
type Config struct {
	Client    *client.Clientset
	Informers *client.Informers
	Logger    *slog.Logger
}

// Controller creates the claims of pods' ephemeral volumes.
type Controller struct {
	cfg      Config
	log      *slog.Logger
	pods     corelisters.PodLister
	claims   corelisters.PersistentVolumeClaimLister
	synced   []cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string]
	recorder record.EventRecorder
}

// New builds the controller and registers its handlers.
func New(cfg Config) (*Controller, error) {
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	podInf := cfg.Informers.For(&corev1.Pod{})
	claimInf := cfg.Informers.For(&corev1.PersistentVolumeClaim{})
	c := &Controller{
		cfg:    cfg,
		log:    cfg.Logger,
		pods:   corelisters.NewPodLister(podInf.GetIndexer()),
		claims: corelisters.NewPersistentVolumeClaimLister(claimInf.GetIndexer()),
		synced: []cache.InformerSynced{podInf.HasSynced, claimInf.HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "ephemeral-volume"}),
	}
	onPod := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok || pod.DeletionTimestamp != nil || !hasEphemeral(pod) {
			return
		}
		if k, err := cache.MetaNamespaceKeyFunc(pod); err == nil {
			c.queue.Add(k)
		}
	}
	if _, err := podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onPod, UpdateFunc: func(_, o any) { onPod(o) }}); err != nil {
		return nil, err
	}
	// A claim deleted under a live pod is made again.
	if _, err := claimInf.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		pvc, ok := obj.(*corev1.PersistentVolumeClaim)
		if !ok {
			return
		}
		if ref := metav1.GetControllerOf(pvc); ref != nil && ref.Kind == "Pod" && ref.APIVersion == "v1" {
			c.queue.Add(pvc.Namespace + "/" + ref.Name)
		}
	}}); err != nil {
		return nil, err
	}
	return c, nil
}

func hasEphemeral(pod *corev1.Pod) bool {
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Ephemeral != nil {
			return true
		}
	}
	return false
}

// Run works until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	c.recorder = client.NewRecorder(ctx, c.cfg.Client.Core.RESTClient(), "ephemeral_volume")
	worker.Run(ctx, c.queue, 1, c.sync, c.log, "pod", c.synced...)
	return nil
}

// sync creates the missing claims of one pod's ephemeral volumes. A
// claim of that name that belongs to something else is the user's: it
// stays, the pod cannot start (the scheduler says why), and the sync is
// retried with back-off in case the claim goes.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	pod, err := c.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil || pod.DeletionTimestamp != nil {
		return err
	}
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if v.Ephemeral == nil || v.Ephemeral.VolumeClaimTemplate == nil {
			continue
		}
		claimName := ephemeral.VolumeClaimName(pod, v)
		if existing, err := c.claims.PersistentVolumeClaims(ns).Get(claimName); err == nil {
			if err := ephemeral.VolumeIsForPod(pod, existing); err != nil {
				return err
			}
			continue
		}
		if err := c.createClaim(ctx, pod, claimName, v.Ephemeral.VolumeClaimTemplate); err != nil {
			return err
		}
	}
	return nil
}

func (c *Controller) createClaim(ctx context.Context, pod *corev1.Pod, name string, tmpl *corev1.PersistentVolumeClaimTemplate) error {
	yes := true
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   pod.Namespace,
			Labels:      tmpl.Labels,
			Annotations: tmpl.Annotations,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
				Controller: &yes, BlockOwnerDeletion: &yes,
			}},
		},
		Spec: *tmpl.Spec.DeepCopy(),
	}
	_, err := c.cfg.Client.Core.PersistentVolumeClaims(pod.Namespace).Create(ctx, pvc, metav1.CreateOptions{})
	switch {
	case err == nil:
		c.log.Info("created claim for ephemeral volume", "pod", pod.Namespace+"/"+pod.Name, "claim", name)
		return nil
	case apierrors.IsAlreadyExists(err):
		return nil // the cache lags; the next sync checks its owner
	}
	c.recorder.Eventf(pod, corev1.EventTypeWarning, "FailedBinding", "PVC creation failed: %v", err)
	return fmt.Errorf("create claim %s/%s: %w", pod.Namespace, name, err)
}
