// Package localpath is bonsai's built-in dynamic provisioner,
// bonsai.dev/local-path, in the manner of an external provisioner: it
// ensures the default StorageClass local-path (WaitForFirstConsumer,
// reclaim Delete) exists, provisions a hostPath volume under
// <data-dir>/storage/<pv>_<namespace>_<claim> for each claim of its
// class once the scheduler has picked the claim's node (the
// volume.kubernetes.io/selected-node annotation), with node affinity to
// that node, and removes the directory and the volume once a released
// volume's reclaim policy is Delete.
//
// The directory is made on the host this controller runs on: in bonsai
// the server and its kubelet share the host, and for simulated nodes the
// directory is made there too, though no container will use it. An
// agent on another host creates the directory itself when it mounts the
// volume (the hostPath type is DirectoryOrCreate), but its data are not
// deleted with the volume.
//
// It owns the volumes it provisioned (pv.kubernetes.io/provisioned-by)
// and their directories; the binding of claims and volumes is the
// persistentvolume-binder's (controllers/pvbinder).
package localpath

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/worker"
)

const (
	// Provisioner is the name classes use to ask for this provisioner.
	Provisioner = "bonsai.dev/local-path"
	// DefaultClassName is the StorageClass ensured at start.
	DefaultClassName = "local-path"
	// isDefaultClassAnnotation makes a class the one claims without a
	// class get.
	isDefaultClassAnnotation = "storageclass.kubernetes.io/is-default-class"
)

// Config is what the provisioner needs.
type Config struct {
	Client    *client.Clientset
	Informers *client.Informers
	Logger    *slog.Logger
	// DataDir is bonsai's data dir; volumes live in DataDir/storage.
	DataDir string
}

// Controller provisions and deletes local-path volumes.
type Controller struct {
	cfg      Config
	root     string
	log      *slog.Logger
	claims   corelisters.PersistentVolumeClaimLister
	volumes  corelisters.PersistentVolumeLister
	classes  storagelisters.StorageClassLister
	nodes    corelisters.NodeLister
	synced   []cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string]
	recorder record.EventRecorder
}

// Queue keys: "claim/<ns>/<name>" to provision, "volume/<name>" to delete.
const (
	claimPrefix  = "claim/"
	volumePrefix = "volume/"
)

// New builds the provisioner and registers its handlers.
func New(cfg Config) (*Controller, error) {
	if cfg.DataDir == "" {
		return nil, fmt.Errorf("local-path provisioner: no data dir")
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	root, err := filepath.Abs(filepath.Join(cfg.DataDir, "storage"))
	if err != nil {
		return nil, err
	}
	claimInf := cfg.Informers.For(&corev1.PersistentVolumeClaim{})
	volumeInf := cfg.Informers.For(&corev1.PersistentVolume{})
	classInf := cfg.Informers.For(&storagev1.StorageClass{})
	nodeInf := cfg.Informers.For(&corev1.Node{})
	c := &Controller{
		cfg:     cfg,
		root:    root,
		log:     cfg.Logger,
		claims:  corelisters.NewPersistentVolumeClaimLister(claimInf.GetIndexer()),
		volumes: corelisters.NewPersistentVolumeLister(volumeInf.GetIndexer()),
		classes: storagelisters.NewStorageClassLister(classInf.GetIndexer()),
		nodes:   corelisters.NewNodeLister(nodeInf.GetIndexer()),
		synced:  []cache.InformerSynced{claimInf.HasSynced, volumeInf.HasSynced, classInf.HasSynced, nodeInf.HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "local-path-provisioner"}),
	}
	onClaim := func(obj any) {
		if pvc, ok := obj.(*corev1.PersistentVolumeClaim); ok {
			c.queue.Add(claimPrefix + pvc.Namespace + "/" + pvc.Name)
		}
	}
	if _, err := claimInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onClaim, UpdateFunc: func(_, obj any) { onClaim(obj) },
	}); err != nil {
		return nil, err
	}
	onVolume := func(obj any) {
		if pv, ok := obj.(*corev1.PersistentVolume); ok {
			c.queue.Add(volumePrefix + pv.Name)
		}
	}
	if _, err := volumeInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onVolume, UpdateFunc: func(_, obj any) { onVolume(obj) },
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// Run ensures the default class, then provisions until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer c.queue.ShutDown()
	c.recorder = client.NewRecorder(ctx, c.cfg.Client.Core.RESTClient(), Provisioner)
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return nil
	}
	c.ensureDefaultClass(ctx)
	worker.Run(ctx, c.queue, 1, worker.ByPrefix(c.syncVolume, worker.Prefixed{Prefix: claimPrefix, Sync: c.syncClaim}, worker.Prefixed{Prefix: volumePrefix, Sync: c.syncVolume}), c.log, "key")
	return nil
}

// DefaultClass is the StorageClass bonsai starts with.
func DefaultClass() *storagev1.StorageClass {
	bindingMode := storagev1.VolumeBindingWaitForFirstConsumer
	reclaim := corev1.PersistentVolumeReclaimDelete
	return &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: DefaultClassName, Annotations: map[string]string{isDefaultClassAnnotation: "true"}},
		Provisioner:       Provisioner,
		VolumeBindingMode: &bindingMode,
		ReclaimPolicy:     &reclaim,
	}
}

// ensureDefaultClass creates local-path if it is missing, and leaves it
// alone if it exists: the user may have changed it (or unset it as the
// default) on purpose. It retries until it lands or ctx ends.
func (c *Controller) ensureDefaultClass(ctx context.Context) {
	backoff := workqueue.DefaultTypedControllerRateLimiter[string]()
	for ctx.Err() == nil {
		_, err := c.cfg.Client.Storage.StorageClasses().Create(ctx, DefaultClass(), metav1.CreateOptions{})
		if err == nil || apierrors.IsAlreadyExists(err) {
			return
		}
		c.log.Warn("could not create the default StorageClass; retrying", "class", DefaultClassName, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(backoff.When("class")):
		}
	}
}
