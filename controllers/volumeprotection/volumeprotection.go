// Package volumeprotection is kube-controller-manager's pvc-protection
// and pv-protection controllers: a claim marked for deletion keeps its
// kubernetes.io/pvc-protection finalizer while a scheduled pod uses it,
// and a volume marked for deletion keeps kubernetes.io/pv-protection
// while it is Bound, so neither disappears under a running workload.
// Both finalizers are put on at create by the API server's
// StorageObjectInUseProtection admission; this controller adds them to
// objects that predate it.
//
// It owns those two finalizers and nothing else.
package volumeprotection

import (
	"context"
	"log/slog"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/component-helpers/storage/ephemeral"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/kit"
	"bonsai.dev/bonsai/controllers/worker"
)

const (
	// PVCProtectionFinalizer and PVProtectionFinalizer are upstream's.
	PVCProtectionFinalizer = "kubernetes.io/pvc-protection"
	PVProtectionFinalizer  = "kubernetes.io/pv-protection"
)

// Config is what the controller needs.
type Config struct {
	Client    *client.Clientset
	Informers *client.Informers
	Logger    *slog.Logger
}

// Controller manages both finalizers.
type Controller struct {
	cfg     Config
	log     *slog.Logger
	claims  corelisters.PersistentVolumeClaimLister
	volumes corelisters.PersistentVolumeLister
	pods    corelisters.PodLister
	synced  []cache.InformerSynced
	queue   workqueue.TypedRateLimitingInterface[string]
}

var everything = labels.Everything()

const (
	claimPrefix  = "claim/"
	volumePrefix = "volume/"
)

// New builds the controller and registers its handlers.
func New(cfg Config) (*Controller, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	claimInf := cfg.Informers.For(&corev1.PersistentVolumeClaim{})
	volumeInf := cfg.Informers.For(&corev1.PersistentVolume{})
	podInf := cfg.Informers.For(&corev1.Pod{})
	c := &Controller{
		cfg:     cfg,
		log:     cfg.Logger,
		claims:  corelisters.NewPersistentVolumeClaimLister(claimInf.GetIndexer()),
		volumes: corelisters.NewPersistentVolumeLister(volumeInf.GetIndexer()),
		pods:    corelisters.NewPodLister(podInf.GetIndexer()),
		synced:  []cache.InformerSynced{claimInf.HasSynced, volumeInf.HasSynced, podInf.HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "volume-protection"}),
	}
	onClaim := func(obj any) {
		if pvc, ok := obj.(*corev1.PersistentVolumeClaim); ok {
			c.queue.Add(claimPrefix + pvc.Namespace + "/" + pvc.Name)
		}
	}
	if _, err := claimInf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onClaim, UpdateFunc: func(_, o any) { onClaim(o) }}); err != nil {
		return nil, err
	}
	onVolume := func(obj any) {
		if pv, ok := obj.(*corev1.PersistentVolume); ok {
			c.queue.Add(volumePrefix + pv.Name)
		}
	}
	if _, err := volumeInf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onVolume, UpdateFunc: func(_, o any) { onVolume(o) }}); err != nil {
		return nil, err
	}
	// A pod that goes (or is bound, or finishes) may free its claims.
	if _, err := podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, o any) { c.onPod(o) },
		DeleteFunc: c.onPod,
	}); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Controller) onPod(obj any) {
	pod, ok := kit.Unwrap[*corev1.Pod](obj)
	if !ok {
		return
	}
	for i := range pod.Spec.Volumes {
		if name := claimName(pod, &pod.Spec.Volumes[i]); name != "" {
			c.queue.Add(claimPrefix + pod.Namespace + "/" + name)
		}
	}
}

// claimName is the claim a pod volume uses: a persistentVolumeClaim
// volume's, or the one made for a generic ephemeral volume.
func claimName(pod *corev1.Pod, v *corev1.Volume) string {
	switch {
	case v.PersistentVolumeClaim != nil:
		return v.PersistentVolumeClaim.ClaimName
	case v.Ephemeral != nil:
		return ephemeral.VolumeClaimName(pod, v)
	}
	return ""
}

// Run works until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	worker.Run(ctx, c.queue, 1, worker.ByPrefix(c.syncVolume, worker.Prefixed{Prefix: claimPrefix, Sync: c.syncClaim}, worker.Prefixed{Prefix: volumePrefix, Sync: c.syncVolume}), c.log, "key", c.synced...)
	return nil
}

func (c *Controller) syncClaim(ctx context.Context, k string) error {
	ns, name, _ := cache.SplitMetaNamespaceKey(k)
	pvc, err := c.claims.PersistentVolumeClaims(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	has := slices.Contains(pvc.Finalizers, PVCProtectionFinalizer)
	if pvc.DeletionTimestamp == nil {
		if has {
			return nil
		}
		upd := pvc.DeepCopy()
		upd.Finalizers = append(upd.Finalizers, PVCProtectionFinalizer)
		_, err := c.cfg.Client.Core.PersistentVolumeClaims(ns).Update(ctx, upd, metav1.UpdateOptions{})
		return err
	}
	if !has {
		return nil
	}
	used, err := c.claimInUse(ctx, pvc)
	if err != nil || used {
		return err
	}
	upd := pvc.DeepCopy()
	upd.Finalizers = slices.DeleteFunc(upd.Finalizers, func(f string) bool { return f == PVCProtectionFinalizer })
	if _, err := c.cfg.Client.Core.PersistentVolumeClaims(ns).Update(ctx, upd, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	c.log.Info("removed claim protection", "claim", k)
	return nil
}

// claimInUse: a scheduled pod uses the claim (an unscheduled one will
// never start with it, as the kubelet refuses claims being deleted).
// The cache may not have a pod created a moment ago, so "unused" is
// confirmed with the API before the claim is let go.
func (c *Controller) claimInUse(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (bool, error) {
	pods, err := c.pods.Pods(pvc.Namespace).List(everything)
	if err != nil {
		return false, err
	}
	for _, p := range pods {
		if podUses(p, pvc) {
			return true, nil
		}
	}
	live, err := c.cfg.Client.Core.Pods(pvc.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, err
	}
	for i := range live.Items {
		if podUses(&live.Items[i], pvc) {
			return true, nil
		}
	}
	return false, nil
}

func podUses(pod *corev1.Pod, pvc *corev1.PersistentVolumeClaim) bool {
	if pod.Spec.NodeName == "" {
		return false
	}
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == pvc.Name {
			return true
		}
		if v.Ephemeral != nil && ephemeral.VolumeClaimName(pod, v) == pvc.Name && ephemeral.VolumeIsForPod(pod, pvc) == nil {
			return true
		}
	}
	return false
}

// syncVolume lets a volume marked for deletion go once it is not Bound.
func (c *Controller) syncVolume(ctx context.Context, name string) error {
	pv, err := c.volumes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	has := slices.Contains(pv.Finalizers, PVProtectionFinalizer)
	upd := pv.DeepCopy()
	switch {
	case pv.DeletionTimestamp == nil && !has:
		upd.Finalizers = append(upd.Finalizers, PVProtectionFinalizer)
	case pv.DeletionTimestamp != nil && has && pv.Status.Phase != corev1.VolumeBound:
		upd.Finalizers = slices.DeleteFunc(upd.Finalizers, func(f string) bool { return f == PVProtectionFinalizer })
	default:
		return nil
	}
	if _, err := c.cfg.Client.Core.PersistentVolumes().Update(ctx, upd, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}
