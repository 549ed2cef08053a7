package apiserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"strconv"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"bonsai.dev/bonsai/apiserver/aggregator"
	"bonsai.dev/bonsai/apiserver/params"
	"bonsai.dev/bonsai/apiserver/registry"
	"bonsai.dev/bonsai/store"
)

// serveResource is the entry of every /api/v1/... and /apis/g/v/... request
// that names a resource.
func (s *Server) serveResource(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ri, ok := parseResourcePath(r.Method, r.URL.Path, params.Bool(q, "watch"))
	if !ok {
		writeError(w, notFoundPath())
		return
	}
	res := s.lookup(ri.gvr)
	if res == nil || (ri.namespace != "" && !res.namespaced) {
		writeError(w, notFoundPath())
		return
	}
	if ri.subresource != "" && !res.hasSubresource(ri.subresource) {
		writeError(w, notFoundPath())
		return
	}
	if res.def != nil && res.def.Warning != "" {
		addWarning(w, res.def.Warning)
	}
	if res.createOnly && res.gvr == bindingsGVR {
		if err := s.createTopLevelBinding(w, r, ri, res); err != nil {
			writeError(w, err)
		}
		return
	}
	if res.createOnly {
		if err := s.serveReview(w, r, ri, res); err != nil {
			writeError(w, err)
		}
		return
	}
	if res.reader != nil {
		if err := s.serveRead(w, r, ri, res); err != nil {
			writeError(w, err)
		}
		return
	}
	if err := s.dispatch(w, r, ri, res); err != nil {
		writeError(w, err)
	}
}

func notFoundPath() error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
		Message: "the server could not find the requested resource",
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: metav1.CauseTypeUnexpectedServerResponse, Message: "404 page not found"}}},
	}}
}

func methodNotSupported(res *resource, verb string) error {
	return apierrors.NewMethodNotSupported(qualified(res), verb)
}

func (s *Server) dispatch(w http.ResponseWriter, r *http.Request, ri requestInfo, res *resource) error {
	switch ri.subresource {
	case "":
	case "status", "approval":
		switch ri.verb {
		case "get":
			return s.get(w, r, ri, res)
		case "update", "patch":
			return s.update(w, r, ri, res)
		}
		return methodNotSupported(res, ri.verb)
	case "scale":
		return s.serveScale(w, r, ri, res)
	case "binding":
		if ri.verb == "create" {
			return s.createBinding(w, r, ri, res)
		}
		return methodNotSupported(res, ri.verb)
	case "eviction":
		if ri.verb == "create" {
			return s.createEviction(w, r, ri, res)
		}
		return methodNotSupported(res, ri.verb)
	case "finalize":
		if ri.verb == "update" {
			return s.update(w, r, ri, res)
		}
		return methodNotSupported(res, ri.verb)
	case "log":
		return s.serveLog(w, r, ri, res)
	case "token":
		if ri.verb == "create" {
			return s.createToken(w, r, ri, res)
		}
		return methodNotSupported(res, ri.verb)
	case "exec", "attach", "portforward":
		return s.serveConnect(w, r, ri, res)
	case "proxy":
		return s.serveProxy(w, r, ri, res)
	case "ephemeralcontainers":
		switch ri.verb {
		case "get":
			return s.get(w, r, ri, res)
		case "update", "patch":
			return s.update(w, r, ri, res)
		}
		return methodNotSupported(res, ri.verb)
	default:
		return methodNotSupported(res, ri.verb)
	}
	if res.namespaced && ri.namespace == "" && ri.verb != "list" && ri.verb != "watch" {
		return notFoundPath()
	}
	switch ri.verb {
	case "get":
		return s.get(w, r, ri, res)
	case "list":
		return s.list(w, r, ri, res)
	case "watch":
		return s.watch(w, r, ri, res)
	case "create":
		if ri.name != "" {
			return methodNotSupported(res, "create")
		}
		return s.create(w, r, ri, res)
	case "update", "patch":
		return s.update(w, r, ri, res)
	case "delete":
		return s.delete(w, r, ri, res)
	case "deletecollection":
		if res.noCollection {
			return methodNotSupported(res, "deletecollection")
		}
		return s.deleteCollection(w, r, ri, res)
	}
	return methodNotSupported(res, ri.verb)
}

// getObject reads one object.
func (s *Server) getObject(ctx context.Context, res *resource, namespace, name string) (runtime.Object, uint64, error) {
	obj, kv, err := s.getStored(ctx, res, namespace, name)
	return obj, kv.Revision, err
}

// getStored is getObject with the stored value it decoded.
// The store reads the value only when the event cache has not got it.
func (s *Server) getStored(ctx context.Context, res *resource, namespace, name string) (runtime.Object, store.KeyValue, error) {
	var cached runtime.Object
	var stored []byte
	kv, err := store.GetUnless(ctx, s.cfg.Store, res.key(namespace, name), func(rev uint64) bool {
		cached, stored = s.events.current(res, rev)
		return cached != nil
	})
	if err != nil {
		return nil, store.KeyValue{}, storeError(err, res, name)
	}
	if cached == nil && kv.Value != nil { // a store that read the value anyway
		cached, stored = s.events.current(res, kv.Revision)
	}
	if cached != nil {
		if kv.Value == nil {
			kv.Value = stored
		}
		return cached, kv, nil
	}
	obj, err := decodeStored(res, kv)
	if err != nil {
		return nil, store.KeyValue{}, apierrors.NewInternalError(err)
	}
	return obj, kv, nil
}

func (s *Server) get(w http.ResponseWriter, r *http.Request, ri requestInfo, res *resource) error {
	format, err := negotiate(r, res, false)
	if err != nil {
		return err
	}
	obj, _, err := s.getObject(r.Context(), res, ri.namespace, ri.name)
	if err != nil {
		return err
	}
	return s.respond(w, r, http.StatusOK, res, obj, format)
}

// respond writes one object in the negotiated format.
func (s *Server) respond(w http.ResponseWriter, r *http.Request, code int, res *resource, obj runtime.Object, format outputFormat) error {
	obj.GetObjectKind().SetGroupVersionKind(res.gvk())
	switch {
	case format.table():
		t, err := s.table(r, res, []runtime.Object{obj}, "", "")
		if err != nil {
			return err
		}
		writeObject(w, code, t, format.encoding())
	case format.metadataOnly():
		writeObject(w, code, partialMetadata(obj), format.encoding())
	default:
		writeObject(w, code, obj, format)
	}
	return nil
}

func partialMetadata(obj runtime.Object) *metav1.PartialObjectMetadata {
	m, _ := metaOf(obj)
	p := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"}}
	if u, ok := obj.(*unstructured.Unstructured); ok {
		p.ObjectMeta = unstructuredMeta(u)
	} else if om, ok := m.(*metav1.ObjectMeta); ok {
		p.ObjectMeta = *om
	} else if a, ok := obj.(interface{ GetObjectMeta() metav1.Object }); ok {
		if om, ok := a.GetObjectMeta().(*metav1.ObjectMeta); ok {
			p.ObjectMeta = *om
		}
	}
	return p
}

// generateNameChars is the alphabet Kubernetes uses for generated name
// suffixes: no vowels, no confusable digits.
const generateNameChars = "bcdfghjklmnpqrstvwxz2456789"

// newGeneratedName makes a name from generateName; tests replace it to
// force collisions.
var newGeneratedName = generateName

func generateName(base string) string {
	const maxBase = 63 - 5
	if len(base) > maxBase {
		base = base[:maxBase]
	}
	b := make([]byte, 5)
	for i := range b {
		n, _ := rand.Int(rand.Reader, big.NewInt(int64(len(generateNameChars))))
		b[i] = generateNameChars[n.Int64()]
	}
	return base + string(b)
}

// writeParams are what every write request carries besides its body's
// object: the response format, its options and the body.
type writeParams struct {
	format outputFormat
	writeOptions
	body []byte
}

// writeOptions are a write's query options (CreateOptions, UpdateOptions
// or PatchOptions) as bonsai uses them.
type writeOptions struct {
	fv  fieldValidation
	dry bool
	// manager is the fieldManager the client sent, "" when none.
	manager string
	force   bool
	// patchType is a PATCH's Content-Type, without its parameters.
	patchType types.PatchType
}

// fieldManager is the manager the write's fields are recorded under:
// the client's, or one derived from its user agent.
func (o writeOptions) fieldManager(r *http.Request) string {
	if o.manager != "" {
		return o.manager
	}
	return userAgentManager(r)
}

// parseWriteOptions decodes and checks a create's (POST), update's (PUT)
// or patch's (PATCH) options as kube-apiserver does: a value that does not
// convert is a 400, one that breaks the options' rules a 422.
func parseWriteOptions(r *http.Request, pt types.PatchType) (writeOptions, error) {
	q := r.URL.Query()
	var o writeOptions
	var dry []string
	var fv string
	switch r.Method {
	case http.MethodPost:
		c, err := params.Create(q)
		if err != nil {
			return o, err
		}
		dry, fv, o.manager = c.DryRun, c.FieldValidation, c.FieldManager
	case http.MethodPatch:
		p, err := params.Patch(q, pt)
		if err != nil {
			return o, err
		}
		dry, fv, o.manager, o.force, o.patchType = p.DryRun, p.FieldValidation, p.FieldManager, ptr.Deref(p.Force, false), pt
	default:
		u, err := params.Update(q)
		if err != nil {
			return o, err
		}
		dry, fv, o.manager = u.DryRun, u.FieldValidation, u.FieldManager
	}
	o.dry = len(dry) > 0
	o.fv = validationWarn
	if fv != "" {
		o.fv = fieldValidation(fv)
	}
	return o, nil
}

// parseWrite reads what a write request carries, in kube-apiserver's
// order: the patch type (415), the response format (406), the body's
// media type (415), the body, then the options (400, 422).
func parseWrite(r *http.Request, res *resource) (writeParams, error) {
	var p writeParams
	var pt types.PatchType
	var err error
	if r.Method == http.MethodPatch {
		if pt, err = patchType(r, res); err != nil {
			return p, err
		}
	}
	if p.format, err = negotiate(r, res, false); err != nil {
		return p, err
	}
	if r.Method != http.MethodPatch {
		if err := checkBodyMediaType(r, res); err != nil {
			return p, err
		}
	}
	if p.body, err = readBody(r); err != nil {
		return p, err
	}
	p.writeOptions, err = parseWriteOptions(r, pt)
	return p, err
}

func (s *Server) create(w http.ResponseWriter, r *http.Request, ri requestInfo, res *resource) error {
	p, err := parseWrite(r, res)
	if err != nil {
		return err
	}
	format, fv, dry, body := p.format, p.fv, p.dry, p.body
	if err := customTerminating(res, "create"); err != nil {
		return err
	}
	obj := res.newObject()
	if err := decodeRequest(w, r, body, obj, fv); err != nil {
		return err
	}
	if err := checkKind(obj, res); err != nil {
		return err
	}
	if err := s.checkObjectSize(res, obj); err != nil {
		return err
	}
	if err := checkCustomFields(w, res, obj, fv); err != nil {
		return err
	}
	m, _ := metaOf(obj)
	if err := setRequestNamespace(res, ri, m); err != nil {
		return err
	}
	if m.GetResourceVersion() != "" {
		return apierrors.NewBadRequest("resourceVersion should not be set on objects to be created")
	}
	generated := m.GetName() == "" && m.GetGenerateName() != ""
	wc := s.newWriteCtx(res, dry)
	wc.GeneratedName = generated
	// A generated name that is taken is the server's problem, not the
	// client's: try others, as kube-apiserver does (RetryGenerateName).
	for attempt := 0; ; attempt++ {
		in := obj
		if generated {
			in = obj.DeepCopyObject()
			mi, _ := metaOf(in)
			mi.SetName(newGeneratedName(mi.GetGenerateName()))
		}
		out, err := s.createObject(r.Context(), wc, in, p.fieldManager(r), false)
		if generated && apierrors.IsAlreadyExists(err) && attempt < 7 {
			continue
		}
		if err != nil {
			return err
		}
		return s.respond(w, r, http.StatusCreated, res, out, format)
	}
}

// createObject runs the create path shared by POST, PUT-as-create and
// apply-as-create: system fields, strategy, validation, store.
func (s *Server) createObject(ctx context.Context, wc *writeCtx, obj runtime.Object, manager string, applied bool) (runtime.Object, error) {
	out, err := s.createStored(ctx, wc, obj, manager, applied)
	wc.finish(err == nil && !wc.DryRun)
	return out, err
}

func (s *Server) createStored(ctx context.Context, wc *writeCtx, obj runtime.Object, manager string, applied bool) (runtime.Object, error) {
	res := wc.res
	m, _ := metaOf(obj)
	m.SetUID(types.UID(uuid.NewUUID()))
	m.SetCreationTimestamp(metav1.NewTime(time.Now().Truncate(time.Second)))
	m.SetResourceVersion("")
	m.SetDeletionTimestamp(nil)
	m.SetDeletionGracePeriodSeconds(nil)
	m.SetSelfLink("")
	res.defaulter.Default(obj)
	// The creator owns what it sent, defaults included, but not what
	// admission and the strategy add (a Pod's service-account volume,
	// default tolerations, priority, phase): kube-apiserver's field
	// manager runs before them.
	if !applied {
		var err error
		if obj, err = s.trackManagedFields(res, "", obj, nil, manager); err != nil {
			return nil, err
		}
		m, _ = metaOf(obj)
	}
	steps := &createSteps{wc: wc, m: m, tracked: m.GetManagedFields()}
	steps.a = newAdmissionAttrs(ctx, wc, admissionv1.Create, "", m.GetNamespace(), m.GetName(), obj, nil)
	if err := s.admit(ctx, &steps.a, steps); err != nil {
		return nil, err
	}
	// A dry run is refused as the write would be.
	data, err := s.encodeWithinLimit(res, obj, applied)
	if err != nil {
		return nil, err
	}
	if wc.DryRun {
		return obj, nil
	}
	done := s.events.offer(res, data, obj)
	rev, err := s.cfg.Store.Create(ctx, res.key(m.GetNamespace(), m.GetName()), data)
	done(rev)
	if err != nil {
		return nil, storeError(err, res, m.GetName())
	}
	setResourceVersion(obj, rev)
	return obj, nil
}

// checkKind refuses a body whose apiVersion/kind name another type.
func checkKind(obj runtime.Object, res *resource) error {
	gvk := obj.GetObjectKind().GroupVersionKind()
	want := res.gvk()
	if gvk.Kind != "" && gvk.Kind != want.Kind {
		return apierrors.NewBadRequest(fmt.Sprintf("the object provided is unrecognized (must be of type %s): couldn't get version/kind; json parse error: kind %q does not match %q", want.Kind, gvk.Kind, want.Kind))
	}
	if v := obj.GetObjectKind().GroupVersionKind().GroupVersion(); gvk.Version != "" && v != want.GroupVersion() {
		return apierrors.NewBadRequest(fmt.Sprintf("the API version in the data (%s) does not match the expected API version (%s)", v.String(), want.GroupVersion().String()))
	}
	obj.GetObjectKind().SetGroupVersionKind(want)
	return nil
}

// setRequestNamespace gives the object the request's namespace, or
// refuses another; a cluster-scoped object has none. Whether the
// namespace takes new objects is NamespaceLifecycle's.
func setRequestNamespace(res *resource, ri requestInfo, m metav1.Object) error {
	if !res.namespaced {
		m.SetNamespace("")
		return nil
	}
	switch ns := m.GetNamespace(); {
	case ns == "":
		m.SetNamespace(ri.namespace)
	case ns != ri.namespace:
		return apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
	}
	return nil
}

// createSteps are a create's own steps inside admission: the strategy
// prepares the new object; metadata and the strategy validate it.
type createSteps struct {
	a       admissionAttrs
	wc      *writeCtx
	m       metav1.Object
	tracked []metav1.ManagedFieldsEntry
}

func (c *createSteps) Prepare(context.Context) error {
	if u := c.a.user; u != nil {
		c.wc.User = registry.UserInfo{Name: u.Name, UID: u.UID, Groups: u.Groups, Extra: u.Extra}
	}
	return c.wc.res.strategy.PrepareForCreate(&c.wc.WriteCtx, c.a.obj)
}

func (c *createSteps) Validate(ctx context.Context) error {
	res, m := c.wc.res, c.m
	keepValidManagedFields(ctx, m, c.tracked)
	if res.strategy.TracksGeneration() {
		m.SetGeneration(1)
	} else {
		m.SetGeneration(0)
	}
	errs := validateMeta(res, m)
	errs = append(errs, res.strategy.Validate(&c.wc.WriteCtx, c.a.obj)...)
	if len(errs) > 0 {
		return invalid(res, m.GetName(), errs)
	}
	return nil
}

// validateMeta validates metadata with Kubernetes' own rules.
func validateMeta(res *resource, m metav1.Object) field.ErrorList {
	nameFn := apivalidation.NameIsDNSSubdomain
	switch res.gvr.Resource {
	case "namespaces":
		nameFn = apivalidation.ValidateNamespaceName
	case "services":
		nameFn = apivalidation.NameIsDNS1035Label
	}
	if res.gvr.Group == "networking.k8s.io" && res.gvr.Resource == "ipaddresses" {
		// An IPAddress is named by its IP, IPv6 ones too ("fd00::1"):
		// the strategy checks it is one in canonical form.
		return apivalidation.ValidateObjectMetaAccessor(m, res.namespaced, func(name string, prefix bool) []string { return path.ValidatePathSegmentName(name, prefix) }, field.NewPath("metadata"))
	}
	if res.gvr.Group == "rbac.authorization.k8s.io" || res.gvr == aggregator.GVR || res.gvr.Resource == "certificatesigningrequests" ||
		res.gvr.Resource == "clustertrustbundles" {
		// RBAC names only need to be path segments (system:discovery),
		// as APIServices' ("v1." is the core group's) and
		// CertificateSigningRequests' (any name will do upstream);
		// ClusterTrustBundles' strategy checks theirs against the signer.
		nameFn = func(name string, prefix bool) []string { return path.ValidatePathSegmentName(name, prefix) }
	}
	return apivalidation.ValidateObjectMetaAccessor(m, res.namespaced, nameFn, field.NewPath("metadata"))
}

// userAgentManager is the field manager of a write whose client named
// none.
func userAgentManager(r *http.Request) string {
	// Kubernetes derives a manager from the user agent's program name.
	ua := r.UserAgent()
	for i, c := range ua {
		if c == '/' {
			return ua[:i]
		}
	}
	if ua == "" {
		return "unknown"
	}
	return ua
}

// maxUnconditionalRetries bounds the retries of a write without a
// resourceVersion that keeps losing races: with waits capped at 50 ms,
// about five seconds.
const maxUnconditionalRetries = 100

// waitToRetry waits before the attempt-th retry of a write that lost a
// race. The write that beat it is queued in the store but not yet
// readable (it waits for its fsync): reading again at once would find the
// same old revision. Each wait is a little longer, a few milliseconds
// being one fsync. kube-apiserver retries such writes until they land; a
// busy disk can take many fsyncs, so the budget is seconds, not attempts.
func waitToRetry(ctx context.Context, attempt int) error {
	select {
	case <-time.After(min(time.Millisecond<<attempt, 50*time.Millisecond)):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// update serves PUT and PATCH of the main resource and its status-like
// subresources. It retries on conflict when the client set no
// resourceVersion precondition.

func (s *Server) update(w http.ResponseWriter, r *http.Request, ri requestInfo, res *resource) error {
	p, err := parseWrite(r, res)
	if err != nil {
		return err
	}
	format, fv, dry, body := p.format, p.fv, p.dry, p.body
	wc := s.newWriteCtx(res, dry)
	manager := p.fieldManager(r)
	for attempt := 0; ; attempt++ {
		old, kv, err := s.getStored(r.Context(), res, ri.namespace, ri.name)
		rev := kv.Revision
		wc.stored = kv.Value
		notFound := apierrors.IsNotFound(err)
		if err != nil && !notFound {
			return err
		}
		var obj runtime.Object
		var conditional bool
		applied := isApply(r)
		if r.Method == http.MethodPatch {
			obj, conditional, err = s.applyPatch(w, r, res, ri, old, body, p.writeOptions, manager)
			if err != nil {
				return err
			}
			if obj == nil { // apply created nothing and found nothing
				return apierrors.NewNotFound(qualified(res), ri.name)
			}
			if notFound {
				// Only apply creates.
				m, _ := metaOf(obj)
				if err := setRequestNamespace(res, ri, m); err != nil {
					return err
				}
				out, err := s.createObject(r.Context(), wc, obj, manager, true)
				if err != nil {
					return err
				}
				return s.respond(w, r, http.StatusCreated, res, out, format)
			}
		} else {
			obj = res.newObject()
			decoded := false
			// Only the server's own components' bodies (client-go's
			// encodings, made in this process) skip the spec: any other
			// client's spec must decode, or the write is refused, as
			// kube-apiserver refuses a body it cannot decode.
			if fromInProcess(r) && ri.subresource == "status" && res.custom == nil {
				wc.requestSpec, decoded = decodeStatusWrite(r, body, obj)
			}
			if !decoded {
				if err := decodeRequest(w, r, body, obj, fv); err != nil {
					return err
				}
			}
			if err := checkKind(obj, res); err != nil {
				return err
			}
			if err := s.checkObjectSize(res, obj); err != nil {
				return err
			}
			if err := checkCustomFields(w, res, obj, fv); err != nil {
				return err
			}
			m, _ := metaOf(obj)
			if m.GetName() != ri.name {
				return apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", m.GetName(), ri.name))
			}
			if res.namespaced && m.GetNamespace() != "" && m.GetNamespace() != ri.namespace {
				return apierrors.NewBadRequest("the namespace of the provided object does not match the namespace sent on the request")
			}
			conditional = m.GetResourceVersion() != ""
			if notFound {
				if !res.allowCreateOnUpdate || ri.subresource != "" {
					return err
				}
				if err := setRequestNamespace(res, ri, m); err != nil {
					return err
				}
				out, err := s.createObject(r.Context(), wc, obj, manager, false)
				if err != nil {
					return err
				}
				return s.respond(w, r, http.StatusCreated, res, out, format)
			}
		}
		out, err := s.updateObject(r.Context(), wc, ri, obj, old, rev, manager, conditional, applied)
		if apierrors.IsConflict(err) && !conditional && attempt < maxUnconditionalRetries {
			if err := waitToRetry(r.Context(), attempt); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		return s.respond(w, r, http.StatusOK, res, out, format)
	}
}

// updateObject writes obj over old (read at rev).
func (s *Server) updateObject(ctx context.Context, wc *writeCtx, ri requestInfo, obj, old runtime.Object, rev uint64, manager string, conditional, applied bool) (runtime.Object, error) {
	out, err := s.updateStored(ctx, wc, ri, obj, old, rev, manager, conditional, applied)
	wc.finish(err == nil && !wc.DryRun)
	return out, err
}

func (s *Server) updateStored(ctx context.Context, wc *writeCtx, ri requestInfo, obj, old runtime.Object, rev uint64, manager string, conditional, applied bool) (runtime.Object, error) {
	res := wc.res
	m, _ := metaOf(obj)
	om, _ := metaOf(old)
	if conditional && m.GetResourceVersion() != strconv.FormatUint(rev, 10) {
		return nil, apierrors.NewConflict(qualified(res), ri.name, errors.New(optimisticLockMsg))
	}
	if !conditional {
		// An unconditional write applies to what was read, as
		// kube-apiserver's AllowUnconditionalUpdate does; metadata
		// validation then finds the resourceVersion an update needs.
		m.SetResourceVersion(strconv.FormatUint(rev, 10))
	}
	if res.namespaced {
		m.SetNamespace(ri.namespace)
	}
	// System fields are the server's.
	if m.GetUID() != "" && m.GetUID() != om.GetUID() {
		return nil, apierrors.NewConflict(qualified(res), ri.name, fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", m.GetUID(), om.GetUID()))
	}
	m.SetUID(om.GetUID())
	m.SetCreationTimestamp(om.GetCreationTimestamp())
	m.SetDeletionTimestamp(om.GetDeletionTimestamp())
	m.SetDeletionGracePeriodSeconds(om.GetDeletionGracePeriodSeconds())
	m.SetGeneration(om.GetGeneration())
	m.SetSelfLink("")
	steps := &updateSteps{wc: wc, ri: ri, m: m, old: old, om: om}
	steps.a = newAdmissionAttrs(ctx, wc, admissionv1.Update, ri.subresource, m.GetNamespace(), m.GetName(), obj, old)
	if err := s.admit(ctx, &steps.a, steps); err != nil {
		return nil, err
	}
	obj, m = steps.a.obj, steps.m
	if !applied {
		var err error
		if obj, err = s.trackManagedFields(res, ri.subresource, obj, old, manager); err != nil {
			return nil, err
		}
		m, _ = metaOf(obj)
	}
	// An object marked for deletion goes once nothing holds it any more.
	if m.GetDeletionTimestamp() != nil && !heldFromDeletion(res, obj, m) {
		if wc.DryRun {
			return obj, nil
		}
		kv, err := s.cfg.Store.Delete(ctx, res.key(ri.namespace, ri.name), rev)
		if err != nil {
			return nil, storeError(err, res, ri.name)
		}
		s.afterDelete(res, obj)
		setResourceVersion(obj, kv.Revision)
		return obj, nil
	}
	data, err := s.encodeWithinLimit(res, obj, applied)
	if err != nil {
		return nil, err
	}
	// The stored encoding is the old object's, unless it predates
	// protobuf storage or is a custom object's.
	oldData := wc.stored
	if res.custom != nil || !bytes.HasPrefix(oldData, protobufPrefix) {
		oldData, _ = encodeForStore(res, old)
	}
	if string(data) == string(oldData) && !s.storedStale(ctx, res, ri, rev) {
		// A no-op write changes nothing, not even the resourceVersion.
		setResourceVersion(obj, rev)
		return obj, nil
	}
	if wc.DryRun {
		return obj, nil
	}
	done := s.events.offer(res, data, obj)
	newRev, err := store.Replace(ctx, s.cfg.Store, res.key(ri.namespace, ri.name), data, rev, wc.stored)
	done(newRev)
	if err != nil {
		return nil, storeError(err, res, ri.name)
	}
	setResourceVersion(obj, newRev)
	return obj, nil
}

// updateSteps are an update's own steps inside admission: the strategy
// prepares the object over old (for a subresource, merges what it may
// change into old); metadata and the strategy validate it.
type updateSteps struct {
	a     admissionAttrs
	wc    *writeCtx
	ri    requestInfo
	m, om metav1.Object
	old   runtime.Object
}

func (u *updateSteps) Prepare(context.Context) error {
	wc, res, ri, old, om := u.wc, u.wc.res, u.ri, u.old, u.om
	obj, m := u.a.obj, u.m
	switch ri.subresource {
	case "status":
		// Only status moves: everything else is the stored object's. A
		// built-in object's other fields are old's own (old is this
		// request's, read-only, and gone after it): no copy of the spec
		// to make, and the field manager finds it equal at a glance.
		merged := shallowCopy(old)
		if _, ok := old.(*unstructured.Unstructured); ok || merged == nil {
			merged = old.DeepCopyObject()
		}
		registry.CopyField(merged, obj, "Status")
		mm, _ := metaOf(merged)
		mm.SetManagedFields(m.GetManagedFields())
		mm.SetResourceVersion(m.GetResourceVersion())
		resetMetaForStatus(mm, om)
		if _, ok := res.strategy.(registry.StatusAnnotationsWriter); ok {
			mm.SetAnnotations(m.GetAnnotations())
		}
		obj, m = merged, mm
		if st, ok := res.strategy.(registry.StatusPreparer); ok {
			if err := st.PrepareForStatusUpdate(&wc.WriteCtx, obj, old); err != nil {
				return err
			}
		}
	case "approval":
		st, ok := res.strategy.(registry.ApprovalStrategy)
		if !ok {
			return methodNotSupported(res, ri.verb)
		}
		obj = st.PrepareForApprovalUpdate(&wc.WriteCtx, obj, old)
		mm, _ := metaOf(obj)
		mm.SetManagedFields(m.GetManagedFields())
		mm.SetResourceVersion(m.GetResourceVersion())
		resetMetaForStatus(mm, om)
		m = mm
	case "finalize":
		merged := old.DeepCopyObject()
		registry.CopyField(merged, obj, "Spec")
		obj = merged
		m, _ = metaOf(obj)
	case "ephemeralcontainers":
		merged := old.DeepCopyObject().(*corev1.Pod)
		merged.Spec.EphemeralContainers = obj.(*corev1.Pod).Spec.EphemeralContainers
		obj = merged
		m, _ = metaOf(obj)
	default:
		res.defaulter.Default(obj)
		if err := res.strategy.PrepareForUpdate(&wc.WriteCtx, obj, old); err != nil {
			return err
		}
		if res.strategy.TracksGeneration() && specChanged(obj, old) {
			m.SetGeneration(om.GetGeneration() + 1)
		}
	}
	// From here on admission sees the prepared object, under the
	// request's namespace and name.
	u.a.obj, u.m = obj, m
	u.a.namespace, u.a.name = ri.namespace, ri.name
	return nil
}

func (u *updateSteps) Validate(context.Context) error {
	wc, res, ri, obj, m := u.wc, u.wc.res, u.ri, u.a.obj, u.m
	errs := apivalidation.ValidateObjectMetaAccessorUpdate(m, u.om, field.NewPath("metadata"))
	errs = append(errs, validateMeta(res, m)...)
	if ri.subresource == "" {
		errs = append(errs, res.strategy.ValidateUpdate(&wc.WriteCtx, obj, u.old)...)
	} else if sv, ok := res.strategy.(registry.StatusValidator); ok && ri.subresource == "status" {
		errs = append(errs, sv.ValidateStatusUpdate(&wc.WriteCtx, obj, u.old)...)
	} else if av, ok := res.strategy.(registry.ApprovalStrategy); ok && ri.subresource == "approval" {
		errs = append(errs, av.ValidateApprovalUpdate(&wc.WriteCtx, obj, u.old)...)
	}
	if len(errs) > 0 {
		return invalid(res, ri.name, errs)
	}
	return nil
}

// heldFromDeletion reports what keeps an object marked for deletion in
// the store: finalizers; a grace period still running (a terminating pod
// goes only by a delete with grace 0); the kind's own finalizers outside
// metadata (a namespace's spec.finalizers, which /finalize clears).
func heldFromDeletion(res *resource, obj runtime.Object, m metav1.Object) bool {
	if len(m.GetFinalizers()) > 0 {
		return true
	}
	if g := m.GetDeletionGracePeriodSeconds(); g != nil && *g > 0 {
		return true
	}
	b, ok := res.strategy.(registry.DeletionBlocker)
	return ok && b.BlocksDeletion(obj)
}

func isApply(r *http.Request) bool {
	return r.Method == http.MethodPatch && patchTypeOf(r) == types.ApplyYAMLPatchType
}
