// Package pvbinder is kube-controller-manager's persistentvolume-binder:
// it binds PersistentVolumeClaims to PersistentVolumes (the smallest
// fitting volume of the claim's class, access modes and selector, or the
// one pre-bound through claim.spec.volumeName or volume.spec.claimRef),
// keeps the phases of both current (Available, Bound, Released, Failed;
// Pending, Bound, Lost), asks a provisioner for a volume through the
// volume.kubernetes.io/storage-provisioner annotation when none fits,
// and leaves WaitForFirstConsumer claims pending until the scheduler
// picks a node for them.
//
// It owns claim.spec.volumeName, volume.spec.claimRef, the binding
// annotations and both kinds' status. It never creates or deletes
// volumes: provisioners (controllers/localpath) do. It talks to the API
// only through client-go; one instance per cluster.
package pvbinder

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/worker"
)

// DefaultSyncPeriod is kube-controller-manager's --pvclaimbinder-sync-period:
// every claim and volume is looked at again this often, which catches
// what no event announces (a volume freed for a waiting claim).
const DefaultSyncPeriod = 15 * time.Second

const componentName = "persistentvolume-controller"

// Config is what the controller needs.
type Config struct {
	Client    *client.Clientset
	Informers *client.Informers
	Logger    *slog.Logger
	// SyncPeriod is DefaultSyncPeriod when zero.
	SyncPeriod time.Duration
}

// Controller binds claims and volumes.
type Controller struct {
	cfg      Config
	log      *slog.Logger
	claims   corelisters.PersistentVolumeClaimLister
	volumes  corelisters.PersistentVolumeLister
	classes  storagelisters.StorageClassLister
	synced   []cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string]
	recorder record.EventRecorder
}

// Queue keys: claims and volumes share one queue, so one worker decides
// every binding and two claims never race for a volume in this process.
const (
	claimPrefix  = "claim/"
	volumePrefix = "volume/"
)

// New builds the controller and registers its informer handlers.
func New(cfg Config) (*Controller, error) {
	if cfg.SyncPeriod <= 0 {
		cfg.SyncPeriod = DefaultSyncPeriod
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	claimInf := cfg.Informers.For(&corev1.PersistentVolumeClaim{})
	volumeInf := cfg.Informers.For(&corev1.PersistentVolume{})
	classInf := cfg.Informers.For(&storagev1.StorageClass{})
	c := &Controller{
		cfg:     cfg,
		log:     cfg.Logger,
		claims:  corelisters.NewPersistentVolumeClaimLister(claimInf.GetIndexer()),
		volumes: corelisters.NewPersistentVolumeLister(volumeInf.GetIndexer()),
		classes: storagelisters.NewStorageClassLister(classInf.GetIndexer()),
		synced:  []cache.InformerSynced{claimInf.HasSynced, volumeInf.HasSynced, classInf.HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: componentName}),
	}
	if _, err := claimInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onClaim,
		UpdateFunc: func(_, obj any) { c.onClaim(obj) },
		DeleteFunc: c.onClaimDelete,
	}); err != nil {
		return nil, err
	}
	if _, err := volumeInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onVolume,
		UpdateFunc: func(_, obj any) { c.onVolume(obj) },
		DeleteFunc: c.onVolumeDelete,
	}); err != nil {
		return nil, err
	}
	// A new default class, or a class changed, may settle waiting claims.
	if _, err := classInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.enqueueUnboundClaims() },
		UpdateFunc: func(any, any) { c.enqueueUnboundClaims() },
	}); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Controller) enqueueUnboundClaims() {
	claims, _ := c.claims.List(everything)
	for _, pvc := range claims {
		if pvc.Spec.VolumeName == "" {
			c.queue.Add(claimPrefix + key(pvc.Namespace, pvc.Name))
		}
	}
}

// Run works until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer c.queue.ShutDown()
	c.recorder = client.NewRecorder(ctx, c.cfg.Client.Core.RESTClient(), componentName)
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return nil
	}
	go c.resync(ctx)
	worker.Run(ctx, c.queue, 1, worker.ByPrefix(c.syncVolume, worker.Prefixed{Prefix: claimPrefix, Sync: c.syncClaim}, worker.Prefixed{Prefix: volumePrefix, Sync: c.syncVolume}), c.log, "key")
	return nil
}

// resync queues everything every SyncPeriod.
func (c *Controller) resync(ctx context.Context) {
	t := time.NewTicker(c.cfg.SyncPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.enqueueAll()
		}
	}
}

func (c *Controller) enqueueAll() {
	claims, _ := c.claims.List(everything)
	for _, pvc := range claims {
		c.queue.Add(claimPrefix + key(pvc.Namespace, pvc.Name))
	}
	volumes, _ := c.volumes.List(everything)
	for _, pv := range volumes {
		c.queue.Add(volumePrefix + pv.Name)
	}
}

func (c *Controller) onClaim(obj any) {
	pvc, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok {
		return
	}
	c.queue.Add(claimPrefix + key(pvc.Namespace, pvc.Name))
	if pvc.Spec.VolumeName != "" {
		c.queue.Add(volumePrefix + pvc.Spec.VolumeName)
	}
}

// onClaimDelete releases the claim's volume.
func (c *Controller) onClaimDelete(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if pvc, ok := obj.(*corev1.PersistentVolumeClaim); ok && pvc.Spec.VolumeName != "" {
		c.queue.Add(volumePrefix + pvc.Spec.VolumeName)
	}
}

func (c *Controller) onVolume(obj any) {
	pv, ok := obj.(*corev1.PersistentVolume)
	if !ok {
		return
	}
	c.queue.Add(volumePrefix + pv.Name)
	if ref := pv.Spec.ClaimRef; ref != nil {
		c.queue.Add(claimPrefix + key(ref.Namespace, ref.Name))
	}
	// A volume that became free may fit a claim waiting for one.
	if pv.Status.Phase == corev1.VolumeAvailable && pv.Spec.ClaimRef == nil {
		c.enqueueUnboundClaims()
	}
}

// onVolumeDelete lets a claim bound to the volume notice it is lost.
func (c *Controller) onVolumeDelete(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if pv, ok := obj.(*corev1.PersistentVolume); ok && pv.Spec.ClaimRef != nil {
		c.queue.Add(claimPrefix + key(pv.Spec.ClaimRef.Namespace, pv.Spec.ClaimRef.Name))
	}
}

func key(ns, name string) string { return ns + "/" + name }

func claimKey(pvc *corev1.PersistentVolumeClaim) string { return key(pvc.Namespace, pvc.Name) }

func refKey(ref *corev1.ObjectReference) string {
	return fmt.Sprintf("%s/%s", ref.Namespace, ref.Name)
}
