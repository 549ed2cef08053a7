// Package attachdetach is kube-controller-manager's attachdetach
// controller for CSI volumes: for every node, the CSI persistent volumes
// of the pods scheduled to it whose driver needs attach (its CSIDriver's
// spec.attachRequired, true when the driver has no CSIDriver) get a
// VolumeAttachment, which the driver's external-attacher acts on; a
// VolumeAttachment no pod of its node needs any more is deleted, which
// has the attacher detach. A pod counts until it is gone from the API:
// the kubelet lets a pod go only once its volumes are unpublished, so a
// volume is never detached under a mount.
//
// It owns the VolumeAttachments of persistent volumes and nothing else;
// one instance per cluster.
package attachdetach

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/component-helpers/storage/ephemeral"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/kit"
	"bonsai.dev/bonsai/controllers/worker"
)

// Config is what the controller needs.
type Config struct {
	Client    *client.Clientset
	Informers *client.Informers
	Logger    *slog.Logger
}

// Controller keeps the VolumeAttachments of each node.
type Controller struct {
	cfg         Config
	log         *slog.Logger
	pods        corelisters.PodLister
	claims      corelisters.PersistentVolumeClaimLister
	volumes     corelisters.PersistentVolumeLister
	drivers     storagelisters.CSIDriverLister
	attachments storagelisters.VolumeAttachmentLister
	synced      []cache.InformerSynced
	queue       workqueue.TypedRateLimitingInterface[string] // node names
}

// AttachmentName is a volume's VolumeAttachment on a node, as upstream
// names it (the kubelet looks it up by this name).
func AttachmentName(handle, driver, node string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(handle+driver+node)))
}

// New builds the controller and registers its handlers.
func New(cfg Config) (*Controller, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	podInf := cfg.Informers.For(&corev1.Pod{})
	claimInf := cfg.Informers.For(&corev1.PersistentVolumeClaim{})
	volInf := cfg.Informers.For(&corev1.PersistentVolume{})
	drvInf := cfg.Informers.For(&storagev1.CSIDriver{})
	vaInf := cfg.Informers.For(&storagev1.VolumeAttachment{})
	c := &Controller{
		cfg: cfg, log: cfg.Logger,
		pods:        corelisters.NewPodLister(podInf.GetIndexer()),
		claims:      corelisters.NewPersistentVolumeClaimLister(claimInf.GetIndexer()),
		volumes:     corelisters.NewPersistentVolumeLister(volInf.GetIndexer()),
		drivers:     storagelisters.NewCSIDriverLister(drvInf.GetIndexer()),
		attachments: storagelisters.NewVolumeAttachmentLister(vaInf.GetIndexer()),
		synced:      []cache.InformerSynced{podInf.HasSynced, claimInf.HasSynced, volInf.HasSynced, drvInf.HasSynced, vaInf.HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "attachdetach"}),
	}
	onPod := func(obj any) {
		if p, ok := kit.Unwrap[*corev1.Pod](obj); ok && p.Spec.NodeName != "" {
			c.queue.Add(p.Spec.NodeName)
		}
	}
	if _, err := podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onPod, UpdateFunc: func(_, o any) { onPod(o) }, DeleteFunc: onPod}); err != nil {
		return nil, err
	}
	onVA := func(obj any) {
		if va, ok := kit.Unwrap[*storagev1.VolumeAttachment](obj); ok {
			c.queue.Add(va.Spec.NodeName)
		}
	}
	if _, err := vaInf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onVA, DeleteFunc: onVA}); err != nil {
		return nil, err
	}
	// A claim bound, or a driver's attachRequired changed: every node may
	// need another look.
	all := func(any) {
		nodes := map[string]bool{}
		pods, _ := c.pods.List(labels.Everything())
		for _, p := range pods {
			if p.Spec.NodeName != "" && !nodes[p.Spec.NodeName] {
				nodes[p.Spec.NodeName] = true
				c.queue.Add(p.Spec.NodeName)
			}
		}
	}
	for _, inf := range []cache.SharedIndexInformer{claimInf, drvInf} {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: all, UpdateFunc: func(_, o any) { all(o) }, DeleteFunc: all}); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Run works until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	worker.Run(ctx, c.queue, 1, c.syncNode, c.log, "node", c.synced...)
	return nil
}

// attachRequired: the driver's CSIDriver says so, or it has none.
func (c *Controller) attachRequired(driver string) bool {
	d, err := c.drivers.Get(driver)
	if err != nil || d.Spec.AttachRequired == nil {
		return true
	}
	return *d.Spec.AttachRequired
}

// wanted is a volume that must be attached to the node.
type wanted struct {
	pv     *corev1.PersistentVolume
	driver string
	name   string
}

func (c *Controller) syncNode(ctx context.Context, node string) error {
	pods, err := c.pods.List(labels.Everything())
	if err != nil {
		return err
	}
	want := map[string]wanted{} // by attachment name
	for _, p := range pods {
		if p.Spec.NodeName != node {
			continue
		}
		for i := range p.Spec.Volumes {
			v := &p.Spec.Volumes[i]
			claim := ""
			switch {
			case v.PersistentVolumeClaim != nil:
				claim = v.PersistentVolumeClaim.ClaimName
			case v.Ephemeral != nil:
				claim = ephemeral.VolumeClaimName(p, v)
			default:
				continue
			}
			pvc, err := c.claims.PersistentVolumeClaims(p.Namespace).Get(claim)
			if err != nil || pvc.Spec.VolumeName == "" {
				continue
			}
			pv, err := c.volumes.Get(pvc.Spec.VolumeName)
			if err != nil || pv.Spec.CSI == nil || pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != pvc.UID {
				continue
			}
			if !c.attachRequired(pv.Spec.CSI.Driver) {
				continue
			}
			name := AttachmentName(pv.Spec.CSI.VolumeHandle, pv.Spec.CSI.Driver, node)
			want[name] = wanted{pv: pv, driver: pv.Spec.CSI.Driver, name: name}
		}
	}
	vas, err := c.attachments.List(labels.Everything())
	if err != nil {
		return err
	}
	have := map[string]*storagev1.VolumeAttachment{}
	for _, va := range vas {
		if va.Spec.NodeName == node && va.Spec.Source.PersistentVolumeName != nil {
			have[va.Name] = va
		}
	}
	for name, w := range want {
		if _, ok := have[name]; ok {
			continue
		}
		va := &storagev1.VolumeAttachment{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: storagev1.VolumeAttachmentSpec{
				Attacher: w.driver, NodeName: node,
				Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &w.pv.Name},
			},
		}
		if _, err := c.cfg.Client.Storage.VolumeAttachments().Create(ctx, va, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		c.log.Info("attaching volume", "volume", w.pv.Name, "node", node, "attachment", name)
	}
	for name, va := range have {
		if _, ok := want[name]; ok || va.DeletionTimestamp != nil {
			continue
		}
		// The cache may miss a pod made a moment ago: confirm with the API.
		if used, err := c.usedLive(ctx, node, *va.Spec.Source.PersistentVolumeName); err != nil || used {
			return err
		}
		if err := c.cfg.Client.Storage.VolumeAttachments().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		c.log.Info("detaching volume", "volume", *va.Spec.Source.PersistentVolumeName, "node", node, "attachment", name)
	}
	return nil
}

// usedLive: a pod of the node uses the volume, by the API's word.
func (c *Controller) usedLive(ctx context.Context, node, pvName string) (bool, error) {
	pv, err := c.cfg.Client.Core.PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	if pv.Spec.ClaimRef == nil {
		return false, nil
	}
	pods, err := c.cfg.Client.Core.Pods(pv.Spec.ClaimRef.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return false, err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		for j := range p.Spec.Volumes {
			v := &p.Spec.Volumes[j]
			if (v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == pv.Spec.ClaimRef.Name) ||
				(v.Ephemeral != nil && ephemeral.VolumeClaimName(p, v) == pv.Spec.ClaimRef.Name) {
				return true, nil
			}
		}
	}
	return false, nil
}
