package apiserver

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/typed/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/workqueue"

	"bonsai.dev/bonsai/apiserver/authn"
)

// crdController does in-process what upstream's apiextensions-apiserver
// controllers do for every CustomResourceDefinition: the naming
// controller (accepted names, NamesAccepted, conflicts with the group's
// other CRDs), the establishing controller (Established) and the
// finalizer that deletes a CRD's objects before the CRD. It is fed by
// runCustomResources and writes through the API like any client, as the
// API server's own identity.
type crdController struct {
	s      *Server
	queue  workqueue.TypedRateLimitingInterface[string]
	client crdclient.ApiextensionsV1Interface
}

// apiserverUser is the API server's identity for its own writes (upstream's
// loopback client).
var apiserverUser = &authn.User{Name: "system:apiserver", Groups: []string{authn.GroupMasters}}

func newCRDController(s *Server) *crdController {
	return &crdController{
		s:      s,
		queue:  workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		client: crdclient.NewForConfigOrDie(s.ClientConfig(apiserverUser)),
	}
}

func (c *crdController) enqueue(name string) { c.queue.Add(name) }

func (c *crdController) run(ctx context.Context) {
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
				c.s.log.Warn("CustomResourceDefinition sync", "crd", name, "err", err)
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
func (c *crdController) sync(ctx context.Context, name string) (time.Duration, error) {
	obj, _, err := c.s.getObject(ctx, c.s.reg.byGVR[crdGVR], "", name)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	crd := obj.(*apiextensionsv1.CustomResourceDefinition)
	if crd.DeletionTimestamp != nil {
		return c.finalize(ctx, crd)
	}
	return 0, c.syncNames(ctx, crd)
}

// syncNames is upstream's naming and establishing: a name another CRD of
// the group has accepted is refused, with the reason and message
// Kubernetes gives; a CRD whose names are accepted becomes Established.
func (c *crdController) syncNames(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) error {
	resources, kinds := sets.New[string](), sets.New[string]()
	for _, other := range c.s.crs.all() {
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
		if err := freshName(sn, "", resources); err != nil && !contains(accepted.ShortNames, sn) {
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
		c.s.noteCRD(updated)
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
func (c *crdController) finalize(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) (time.Duration, error) {
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
	res, err := storageResource(c.s, crd)
	if err != nil {
		return 0, err
	}
	items, _, err := c.s.listObjects(ctx, res, "", listOptions{})
	if err != nil {
		return 0, err
	}
	var failed error
	for _, it := range items {
		m, _ := metaOf(it)
		if m.GetDeletionTimestamp() != nil {
			continue // waiting for its own finalizers
		}
		if _, _, err := c.s.deleteObject(ctx, res, m.GetNamespace(), m.GetName(), &metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			failed = err
		}
	}
	if failed != nil {
		if _, err := setTerminating(apiextensionsv1.ConditionTrue, "InstanceDeletionFailed", fmt.Sprintf("could not delete instances: %v", failed)); err != nil {
			return 0, err
		}
		return 0, failed
	}
	if left, _, err := c.s.listObjects(ctx, res, "", listOptions{limit: 1}); err != nil {
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

// storageResource is a table entry for a CRD's stored objects, served or
// not: what the finalizer lists and deletes.
func storageResource(s *Server, crd *apiextensionsv1.CustomResourceDefinition) (*resource, error) {
	cp := crd.DeepCopy()
	for i := range cp.Spec.Versions {
		cp.Spec.Versions[i].Served = cp.Spec.Versions[i].Storage
	}
	rs, err := customResourcesOf(s, cp)
	if err != nil {
		return nil, err
	}
	if len(rs) == 0 {
		return nil, fmt.Errorf("%s has no storage version", crd.Name)
	}
	newRegistry(rs)
	return rs[0], nil
}
