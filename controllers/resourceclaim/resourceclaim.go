// Package resourceclaim is kube-controller-manager's resource-claim
// controller, for dynamic resource allocation:
//
//   - for each entry of a pod's spec.resourceClaims that names a
//     ResourceClaimTemplate it creates a ResourceClaim from the template,
//     named <pod>-<claim>-<5 random characters> (generateName, the base
//     cut to 57 characters as upstream cuts it), owned by the pod
//     (controller: true) and annotated resource.kubernetes.io/pod-claim-name,
//     and records its name in the pod's status.resourceClaimStatuses;
//   - it reserves an allocated claim for a pod bound to a node without
//     the scheduler having done so;
//   - it drops from a claim's status.reservedFor the pods that are gone,
//     replaced (another UID) or will not run any more (Succeeded, Failed,
//     or deleted before being scheduled); a claim that loses its last
//     consumer is deallocated (status.allocation cleared) and its
//     resource.kubernetes.io/delete-protection finalizer removed, so its
//     devices are free for others and a deleted claim can go;
//   - a claim made for a pod that will not run and reserved for nobody is
//     deleted (the garbage collector deletes those of deleted pods).
package resourceclaim

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/dynamic-resource-allocation/resourceclaim"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/worker"
)

// Config is what the controller needs.
type Config struct {
	Client    *client.Clientset
	Informers *client.Informers
	Logger    *slog.Logger
}

// Controller makes pods' claims from templates and keeps claims'
// reservations to the pods that may still use them.
type Controller struct {
	cfg       Config
	log       *slog.Logger
	pods      corelisters.PodLister
	claims    resourcelisters.ResourceClaimLister
	templates resourcelisters.ResourceClaimTemplateLister
	claimIdx  cache.Indexer
	synced    []cache.InformerSynced
	queue     workqueue.TypedRateLimitingInterface[string]
	recorder  record.EventRecorder

	// deleted remembers the UIDs of pods seen deleted, so a reservation
	// of theirs goes without asking the API server whether they exist.
	mu      sync.Mutex
	deleted map[types.UID]bool
}

// Keys of the queue: a pod or a claim.
const (
	podKey   = "pod:"
	claimKey = "claim:"
	// ownerIndex indexes claims by the UID of their controlling pod.
	ownerIndex = "pod-owner"
	// maxDeleted bounds the deleted pods remembered.
	maxDeleted = 4096
)

// New builds the controller and registers its handlers.
func New(cfg Config) (*Controller, error) {
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	podInf := cfg.Informers.For(&corev1.Pod{})
	claimInf := cfg.Informers.For(&resourcev1.ResourceClaim{})
	tplInf := cfg.Informers.For(&resourcev1.ResourceClaimTemplate{})
	if err := claimInf.AddIndexers(cache.Indexers{ownerIndex: func(obj any) ([]string, error) {
		c, ok := obj.(*resourcev1.ResourceClaim)
		if !ok {
			return nil, nil
		}
		if ref := metav1.GetControllerOf(c); ref != nil && ref.APIVersion == "v1" && ref.Kind == "Pod" {
			return []string{c.Namespace + "/" + string(ref.UID)}, nil
		}
		return nil, nil
	}}); err != nil {
		return nil, err
	}
	c := &Controller{
		cfg:       cfg,
		log:       cfg.Logger,
		pods:      corelisters.NewPodLister(podInf.GetIndexer()),
		claims:    resourcelisters.NewResourceClaimLister(claimInf.GetIndexer()),
		templates: resourcelisters.NewResourceClaimTemplateLister(tplInf.GetIndexer()),
		claimIdx:  claimInf.GetIndexer(),
		synced:    []cache.InformerSynced{podInf.HasSynced, claimInf.HasSynced, tplInf.HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "resource_claim"}),
		deleted: map[types.UID]bool{},
	}
	if _, err := podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { c.onPod(o, false) },
		UpdateFunc: func(_, o any) { c.onPod(o, false) },
		DeleteFunc: func(o any) { c.onPod(o, true) },
	}); err != nil {
		return nil, err
	}
	onClaim := func(o any) {
		if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
			o = t.Obj
		}
		cl, ok := o.(*resourcev1.ResourceClaim)
		if !ok {
			return
		}
		c.queue.Add(claimKey + cl.Namespace + "/" + cl.Name)
		// A generated claim deleted under its live pod is made again;
		// a new allocation may need reserving for a bound pod.
		if ref := metav1.GetControllerOf(cl); ref != nil && ref.APIVersion == "v1" && ref.Kind == "Pod" {
			c.queue.Add(podKey + cl.Namespace + "/" + ref.Name)
		}
	}
	if _, err := claimInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onClaim, UpdateFunc: func(_, o any) { onClaim(o) }, DeleteFunc: onClaim,
	}); err != nil {
		return nil, err
	}
	// A template created after its pods lets them go on.
	if _, err := tplInf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(o any) {
		t, ok := o.(*resourcev1.ResourceClaimTemplate)
		if !ok {
			return
		}
		pods, _ := c.pods.Pods(t.Namespace).List(labels.Everything())
		for _, p := range pods {
			for _, pc := range p.Spec.ResourceClaims {
				if pc.ResourceClaimTemplateName != nil && *pc.ResourceClaimTemplateName == t.Name {
					c.queue.Add(podKey + p.Namespace + "/" + p.Name)
				}
			}
		}
	}}); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Controller) onPod(obj any, deleted bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, deleted = t.Obj, true
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok || len(pod.Spec.ResourceClaims) == 0 {
		return
	}
	if deleted {
		c.mu.Lock()
		if len(c.deleted) >= maxDeleted {
			clear(c.deleted) // the server is asked again for those
		}
		c.deleted[pod.UID] = true
		c.mu.Unlock()
	}
	// A pod that will not run frees its claims.
	if deleted || isPodDone(pod) {
		for _, name := range podClaimNames(pod) {
			c.queue.Add(claimKey + pod.Namespace + "/" + name)
		}
	}
	if !deleted && pod.DeletionTimestamp == nil {
		c.queue.Add(podKey + pod.Namespace + "/" + pod.Name)
	}
}

// podClaimNames are the names of the claims a pod uses, as far as known.
func podClaimNames(pod *corev1.Pod) []string {
	var out []string
	for i := range pod.Spec.ResourceClaims {
		if n, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i]); err == nil && n != nil {
			out = append(out, *n)
		}
	}
	return out
}

// isPodDone: the pod will not run (again): it ended, or was deleted
// before it was scheduled.
func isPodDone(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed ||
		pod.DeletionTimestamp != nil && pod.Spec.NodeName == ""
}

// Run works until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	c.recorder = client.NewRecorder(ctx, c.cfg.Client.Core.RESTClient(), "resource_claim")
	worker.Run(ctx, c.queue, 2, c.sync, c.log, "key", c.synced...)
	return nil
}

func (c *Controller) sync(ctx context.Context, key string) error {
	if k, ok := strings.CutPrefix(key, podKey); ok {
		ns, name, _ := cache.SplitMetaNamespaceKey(k)
		return c.syncPod(ctx, ns, name)
	}
	if k, ok := strings.CutPrefix(key, claimKey); ok {
		ns, name, _ := cache.SplitMetaNamespaceKey(k)
		return c.syncClaim(ctx, ns, name)
	}
	return nil
}

// syncPod creates a pod's missing claims, records them in its status
// and reserves its allocated claims once it is bound.
func (c *Controller) syncPod(ctx context.Context, ns, name string) error {
	pod, err := c.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil || pod.DeletionTimestamp != nil {
		return err
	}
	made := map[string]string{}
	for _, pc := range pod.Spec.ResourceClaims {
		claimName, err := c.ensureClaim(ctx, pod, pc)
		if err != nil {
			c.recorder.Eventf(pod, corev1.EventTypeWarning, "FailedResourceClaimCreation", "PodResourceClaim %s: %v", pc.Name, err)
			return fmt.Errorf("pod %s/%s, PodResourceClaim %s: %w", ns, name, pc.Name, err)
		}
		if claimName != "" {
			made[pc.Name] = claimName
		}
	}
	if len(made) > 0 {
		if err := c.recordClaims(ctx, pod, made); err != nil {
			return err
		}
	}
	if pod.Spec.NodeName == "" {
		return nil // the scheduler reserves
	}
	for _, pc := range pod.Spec.ResourceClaims {
		n, checkOwner, err := resourceclaim.Name(pod, &pc)
		if err != nil || n == nil {
			continue
		}
		claim, err := c.claims.ResourceClaims(ns).Get(*n)
		if err != nil {
			continue
		}
		if checkOwner && resourceclaim.IsForPod(pod, claim, false) != nil {
			continue
		}
		if claim.Status.Allocation != nil && !resourceclaim.IsReservedForPod(pod, claim, false) && resourceclaim.CanBeReserved(claim) {
			claim = claim.DeepCopy()
			claim.Status.ReservedFor = append(claim.Status.ReservedFor, resourcev1.ResourceClaimConsumerReference{Resource: "pods", Name: pod.Name, UID: pod.UID})
			if _, err := c.cfg.Client.Resource.ResourceClaims(ns).UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("reserve claim %s/%s: %w", ns, claim.Name, err)
			}
		}
	}
	return nil
}

// ensureClaim returns the name of a claim it made, or found made but
// not recorded, for pc; "" if pc needs nothing from it.
func (c *Controller) ensureClaim(ctx context.Context, pod *corev1.Pod, pc corev1.PodResourceClaim) (string, error) {
	if pc.ResourceClaimTemplateName == nil {
		return "", nil
	}
	for _, st := range pod.Status.ResourceClaimStatuses {
		if st.Name != pc.Name || st.ResourceClaimName == nil {
			continue
		}
		// Recorded: it stands unless it was deleted or is not the pod's.
		claim, err := c.claims.ResourceClaims(pod.Namespace).Get(*st.ResourceClaimName)
		if err == nil && resourceclaim.IsForPod(pod, claim, false) == nil {
			return "", nil
		}
		if err == nil || apierrors.IsNotFound(err) {
			// Ask the server: the cache may lag behind a create.
			claim, err := c.cfg.Client.Resource.ResourceClaims(pod.Namespace).Get(ctx, *st.ResourceClaimName, metav1.GetOptions{})
			if err == nil && resourceclaim.IsForPod(pod, claim, false) == nil {
				return "", nil
			}
			if err != nil && !apierrors.IsNotFound(err) {
				return "", err
			}
		}
	}
	// Made before a status write that failed?
	if claim := c.findClaim(pod, pc.Name); claim != nil {
		return claim.Name, nil
	}
	tpl, err := c.templates.ResourceClaimTemplates(pod.Namespace).Get(*pc.ResourceClaimTemplateName)
	if err != nil {
		return "", fmt.Errorf("resource claim template %q: %w", *pc.ResourceClaimTemplateName, err)
	}
	annotations := maps.Clone(tpl.Spec.ObjectMeta.Annotations)
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[resourcev1.PodResourceClaimAnnotation] = pc.Name
	yes := true
	claim := &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName:    GenerateName(pod.Name, pc.Name),
			Namespace:       pod.Namespace,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID, Controller: &yes}},
			Annotations:     annotations,
			Labels:          maps.Clone(tpl.Spec.ObjectMeta.Labels),
		},
		Spec: *tpl.Spec.Spec.DeepCopy(),
	}
	claim, err = c.cfg.Client.Resource.ResourceClaims(pod.Namespace).Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("create ResourceClaim %s: %w", GenerateName(pod.Name, pc.Name), err)
	}
	// Until the informer sees it, the index answers for it.
	_ = c.claimIdx.Add(claim)
	c.log.Info("created ResourceClaim from template", "pod", pod.Namespace+"/"+pod.Name, "claim", claim.Name, "template", tpl.Name)
	return claim.Name, nil
}

// GenerateName is the generateName of a pod's claim made from a
// template: <pod>-<claim>-, both cut in proportion when longer than 57
// characters, leaving room for the server's 5 random characters.
func GenerateName(pod, claim string) string {
	const maxBase = 57
	g := pod + "-" + claim + "-"
	if len(g) > maxBase {
		g = pod[:len(pod)*maxBase/len(g)] + "-" + claim[:len(claim)*maxBase/len(g)]
	}
	return g
}

// findClaim is the claim made for the pod's claim podClaim, if any.
func (c *Controller) findClaim(pod *corev1.Pod, podClaim string) *resourcev1.ResourceClaim {
	objs, _ := c.claimIdx.ByIndex(ownerIndex, pod.Namespace+"/"+string(pod.UID))
	for _, o := range objs {
		cl := o.(*resourcev1.ResourceClaim)
		if cl.Annotations[resourcev1.PodResourceClaimAnnotation] == podClaim && cl.DeletionTimestamp == nil {
			return cl
		}
	}
	return nil
}

// recordClaims writes made into the pod's status.resourceClaimStatuses
// (a strategic merge by name, so other entries stay).
func (c *Controller) recordClaims(ctx context.Context, pod *corev1.Pod, made map[string]string) error {
	names := slices.Sorted(maps.Keys(made))
	sts := make([]corev1.PodResourceClaimStatus, 0, len(names))
	for _, n := range names {
		sts = append(sts, corev1.PodResourceClaimStatus{Name: n, ResourceClaimName: ptr(made[n])})
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"resourceClaimStatuses": sts}})
	if err != nil {
		return err
	}
	if _, err := c.cfg.Client.Core.Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("update pod %s/%s ResourceClaimStatuses: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// syncClaim drops the reservations of pods that will not use the claim,
// deallocates a claim nobody uses any more and deletes a generated claim
// whose pod will not run.
func (c *Controller) syncClaim(ctx context.Context, ns, name string) error {
	claim, err := c.claims.ResourceClaims(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	remaining := make([]resourcev1.ResourceClaimConsumerReference, 0, len(claim.Status.ReservedFor))
	for _, r := range claim.Status.ReservedFor {
		if r.APIGroup != "" || r.Resource != "pods" {
			remaining = append(remaining, r) // not ours to judge
			continue
		}
		keep, err := c.podMayUse(ctx, ns, r)
		if err != nil {
			return err
		}
		if keep {
			remaining = append(remaining, r)
		}
	}
	protected := slices.Index(claim.Finalizers, resourcev1.Finalizer) >= 0
	cl := c.cfg.Client.Resource.ResourceClaims(ns)
	switch {
	case len(remaining) < len(claim.Status.ReservedFor):
		// An update, not a patch: it fails if the claim changed since
		// (the scheduler reserving it for another pod, say).
		upd := claim.DeepCopy()
		upd.Status.ReservedFor = remaining
		if len(remaining) == 0 {
			// The last consumer went: deallocate, so the devices are
			// free and the next consumer may go to another node.
			upd.Status.Allocation = nil
		}
		if upd, err = cl.UpdateStatus(ctx, upd, metav1.UpdateOptions{}); err != nil {
			return err
		}
		c.log.Info("removed reservations of pods done with a claim", "claim", ns+"/"+name, "reserved", len(remaining), "allocated", upd.Status.Allocation != nil)
		if i := slices.Index(upd.Finalizers, resourcev1.Finalizer); i >= 0 && upd.Status.Allocation == nil {
			upd.Finalizers = slices.Delete(upd.Finalizers, i, i+1)
			if _, err := cl.Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
	case protected && claim.DeletionTimestamp != nil && len(remaining) == 0:
		upd := claim.DeepCopy()
		if upd.Status.Allocation != nil {
			upd.Status.Allocation = nil
			if upd, err = cl.UpdateStatus(ctx, upd, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
		i := slices.Index(upd.Finalizers, resourcev1.Finalizer)
		if i >= 0 {
			upd.Finalizers = slices.Delete(upd.Finalizers, i, i+1)
			if _, err := cl.Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
	}
	if len(remaining) > 0 || claim.DeletionTimestamp != nil {
		return nil
	}
	ref := metav1.GetControllerOf(claim)
	if ref == nil || ref.APIVersion != "v1" || ref.Kind != "Pod" {
		return nil
	}
	pod, err := c.pods.Pods(ns).Get(ref.Name)
	switch {
	case apierrors.IsNotFound(err):
		return nil // the garbage collector deletes claims of deleted pods
	case err != nil:
		return err
	case pod.UID == ref.UID && !isPodDone(pod):
		return nil
	}
	if err := cl.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &claim.UID}}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete unused generated claim %s/%s: %w", ns, name, err)
	}
	c.log.Info("deleted generated claim of a pod that will not run", "claim", ns+"/"+name, "pod", ref.Name)
	return nil
}

// podMayUse: the pod a reservation names may still run. One not in the
// cache is asked of the server before it loses its reservation: the
// scheduler may have reserved for a pod the cache has not seen yet.
func (c *Controller) podMayUse(ctx context.Context, ns string, r resourcev1.ResourceClaimConsumerReference) (bool, error) {
	c.mu.Lock()
	gone := c.deleted[r.UID]
	c.mu.Unlock()
	if gone {
		return false, nil
	}
	pod, err := c.pods.Pods(ns).Get(r.Name)
	if apierrors.IsNotFound(err) {
		pod, err = c.cfg.Client.Core.Pods(ns).Get(ctx, r.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
	}
	if err != nil {
		return false, err
	}
	return pod.UID == r.UID && !isPodDone(pod), nil
}

func ptr[T any](v T) *T { return &v }
