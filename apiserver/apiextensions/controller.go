package apiextensions

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/typed/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/workqueue"
)

// Server is what the CRD controller needs of the API server besides a
// client: the CRDs as the server knows them, and their stored objects.
type Server interface {
	// CRD reads a CRD from the store (an API NotFound error if it is
	// gone).
	CRD(ctx context.Context, name string) (*apiextensionsv1.CustomResourceDefinition, error)
	// CRDs are every CRD as the server last saw it.
	CRDs() []*apiextensionsv1.CustomResourceDefinition
	// NoteCRD tells the server of a CRD the controller just wrote, ahead
	// of the watch event.
	NoteCRD(crd *apiextensionsv1.CustomResourceDefinition)
	// Storage is where crd's objects are stored, whether or not a version
	// serves them.
	Storage(crd *apiextensionsv1.CustomResourceDefinition) (Storage, error)
}

// Storage lists and deletes a CRD's stored objects, as the generic
// handlers do (their finalizers honoured).
type Storage interface {
	// List lists the objects in every namespace; limit 0 is all.
	List(ctx context.Context, limit int64) ([]runtime.Object, error)
	Delete(ctx context.Context, namespace, name string) error
}

// Controller does in-process what upstream's apiextensions-apiserver
// controllers do for every CustomResourceDefinition: the naming
// controller (accepted names, NamesAccepted, conflicts with the group's
// other CRDs), the establishing controller (Established) and the
// finalizer that deletes a CRD's objects before the CRD. The server feeds
// it the names of CRDs that changed and it writes through the API like
// any client, as the API server's own identity (client).
type Controller struct {
	s      Server
	log    *slog.Logger
	queue  workqueue.TypedRateLimitingInterface[string]
	client crdclient.ApiextensionsV1Interface
}

// NewController makes the controller of s's CRDs, writing with client.
func NewController(s Server, client crdclient.ApiextensionsV1Interface, log *slog.Logger) *Controller {
	return &Controller{
		s:      s,
		log:    log,
		queue:  workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		client: client,
	}
}

// Enqueue asks for a sync of the CRD named name.
func (c *Controller) Enqueue(name string) { c.queue.Add(name) }

// Run syncs the queued CRDs until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	for {
		name, quit := c.queue.Get()
		if quit {
			return
		}
		requeue, err := c.sync(ctx, name)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				c.log.Warn("CustomResourceDefinition sync", "crd", name, "err", err)
			}
			c.queue.AddRateLimited(name)
		case requeue > 0:
			c.queue.Forget(name)
			c.queue.AddAfter(name, requeue)
		default:
			c.queue.Forget(name)
		}
		c.queue.Done(name)
	}
}

// sync brings one CRD's status to what the world says; it returns a delay
// when it must look again (objects still finalizing).
func (c *Controller) sync(ctx context.Context, name string) (time.Duration, error) {
	crd, err := c.s.CRD(ctx, name)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if crd.DeletionTimestamp != nil {
		return c.finalize(ctx, crd)
	}
	return 0, c.syncNames(ctx, crd)
}

// syncNames is upstream's naming and establishing: a name another CRD of
// the group has accepted is refused, with the reason and message
// Kubernetes gives; a CRD whose names are accepted becomes Established.
func (c *Controller) syncNames(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) error {
	resources, kinds := sets.New[string](), sets.New[string]()
	for _, other := range c.s.CRDs() {
		if other.Name == crd.Name || other.Spec.Group != crd.Spec.Group {
			continue
		}
		n := other.Status.AcceptedNames
		resources.Insert(n.Plural, n.Singular)
		resources.Insert(n.ShortNames...)
		kinds.Insert(n.Kind, n.ListKind)
	}
	resources.Delete("")
	kinds.Delete("")
	requested, accepted := crd.Spec.Names, crd.Status.AcceptedNames
	names := accepted
	cond := apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionUnknown}
	conflict := func(reason string, err error) {
		cond.Status, cond.Reason, cond.Message = apiextensionsv1.ConditionFalse, reason, err.Error()
	}
	if err := freshName(requested.Plural, accepted.Plural, resources); err != nil {
		conflict("PluralConflict", err)
	} else {
		names.Plural = requested.Plural
	}
	if err := freshName(requested.Singular, accepted.Singular, resources); err != nil {
		conflict("SingularConflict", err)
	} else {
		names.Singular = requested.Singular
	}
	shortOK := true
	for _, sn := range requested.ShortNames {
		if err := freshName(sn, "", resources); err != nil && !slices.Contains(accepted.ShortNames, sn) {
			conflict("ShortNamesConflict", err)
			shortOK = false
		}
	}
	if shortOK {
		names.ShortNames = requested.ShortNames
	}
	if err := freshName(requested.Kind, accepted.Kind, kinds); err != nil {
		conflict("KindConflict", err)
	} else {
		names.Kind = requested.Kind
	}
	if err := freshName(requested.ListKind, accepted.ListKind, kinds); err != nil {
		conflict("ListKindConflict", err)
	} else {
		names.ListKind = requested.ListKind
	}
	// Categories are never in conflict.
	names.Categories = requested.Categories
	if cond.Reason == "" {
		cond.Status, cond.Reason, cond.Message = apiextensionsv1.ConditionTrue, "NoConflicts", "no conflicts found"
	}
	established := apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionFalse, Reason: "NotAccepted", Message: "not all names are accepted"}
	if old := apihelpers.FindCRDCondition(crd, apiextensionsv1.Established); old != nil && old.Status == apiextensionsv1.ConditionTrue {
		established = *old
	} else if cond.Status == apiextensionsv1.ConditionTrue {
		// bonsai is one API server: nothing else must see the names
		// before the resource is served, so it is established at once.
		established = apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue, Reason: "InitialNamesAccepted", Message: "the initial names have been accepted"}
	}
	next := crd.DeepCopy()
	next.Status.AcceptedNames = names
	apihelpers.SetCRDCondition(next, cond)
	apihelpers.SetCRDCondition(next, established)
	if sameNamesStatus(crd, next) {
		return nil
	}
	updated, err := c.client.CustomResourceDefinitions().UpdateStatus(ctx, next, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil // a newer version is queued already
	}
	if err == nil {
		// The next CRD of the group must see these names taken, even
		// before the watch delivers this write.
		c.s.NoteCRD(updated)
	}
	return err
}

// freshName: a requested name is fine if it is already accepted for this
// CRD or unused in the group.
func freshName(requested, accepted string, used sets.Set[string]) error {
	if requested == accepted || requested == "" {
		return nil
	}
	if used.Has(requested) {
		return fmt.Errorf("%q is already in use", requested)
	}
	return nil
}

// sameNamesStatus compares the parts of the status syncNames writes,
// ignoring condition transition times.
func sameNamesStatus(a, b *apiextensionsv1.CustomResourceDefinition) bool {
	if fmt.Sprint(a.Status.AcceptedNames) != fmt.Sprint(b.Status.AcceptedNames) {
		return false
	}
	for _, t := range []apiextensionsv1.CustomResourceDefinitionConditionType{apiextensionsv1.NamesAccepted, apiextensionsv1.Established} {
		x, y := apihelpers.FindCRDCondition(a, t), apihelpers.FindCRDCondition(b, t)
		if x == nil || y == nil || !apihelpers.IsCRDConditionEquivalent(x, y) {
			return false
		}
	}
	return true
}

// finalize deletes every object of a CRD being deleted (their own
// finalizers honoured), reporting progress in the Terminating condition,
// then lets the CRD go by removing its cleanup finalizer.
func (c *Controller) finalize(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) (time.Duration, error) {
	if !apihelpers.CRDHasFinalizer(crd, apiextensionsv1.CustomResourceCleanupFinalizer) {
		return 0, nil
	}
	setTerminating := func(status apiextensionsv1.ConditionStatus, reason, msg string) (*apiextensionsv1.CustomResourceDefinition, error) {
		next := crd.DeepCopy()
		cond := apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Terminating, Status: status, Reason: reason, Message: msg}
		if old := apihelpers.FindCRDCondition(crd, apiextensionsv1.Terminating); old != nil && apihelpers.IsCRDConditionEquivalent(old, &cond) {
			return crd, nil
		}
		apihelpers.SetCRDCondition(next, cond)
		return c.client.CustomResourceDefinitions().UpdateStatus(ctx, next, metav1.UpdateOptions{})
	}
	var err error
	if crd, err = setTerminating(apiextensionsv1.ConditionTrue, "InstanceDeletionInProgress", "CustomResource deletion is in progress"); err != nil {
		return 0, err
	}
	stored, err := c.s.Storage(crd)
	if err != nil {
		return 0, err
	}
	items, err := stored.List(ctx, 0)
	if err != nil {
		return 0, err
	}
	var failed error
	for _, it := range items {
		m, _ := it.(metav1.Object)
		if m.GetDeletionTimestamp() != nil {
			continue // waiting for its own finalizers
		}
		if err := stored.Delete(ctx, m.GetNamespace(), m.GetName()); err != nil && !apierrors.IsNotFound(err) {
			failed = err
		}
	}
	if failed != nil {
		if _, err := setTerminating(apiextensionsv1.ConditionTrue, "InstanceDeletionFailed", fmt.Sprintf("could not delete instances: %v", failed)); err != nil {
			return 0, err
		}
		return 0, failed
	}
	if left, err := stored.List(ctx, 1); err != nil {
		return 0, err
	} else if len(left) > 0 {
		return time.Second, nil
	}
	if crd, err = setTerminating(apiextensionsv1.ConditionFalse, "InstanceDeletionCompleted", "removed all instances"); err != nil {
		return 0, err
	}
	next := crd.DeepCopy()
	apihelpers.CRDRemoveFinalizer(next, apiextensionsv1.CustomResourceCleanupFinalizer)
	_, err = c.client.CustomResourceDefinitions().Update(ctx, next, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	return 0, err
}
