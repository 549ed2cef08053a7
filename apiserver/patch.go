package apiserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	extapply "k8s.io/apiextensions-apiserver/pkg/client/applyconfiguration"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/applyconfigurations"
	"k8s.io/client-go/kubernetes/scheme"
	aggapply "k8s.io/kube-aggregator/pkg/client/applyconfiguration"
	"sigs.k8s.io/yaml"

	"bonsai.dev/bonsai/apiserver/aggregator"
	"bonsai.dev/bonsai/apiserver/apiextensions"
)

// applyPatch applies a PATCH body to old (nil when the object does not
// exist: only apply may create). conditional reports whether the patch
// pins a resourceVersion.
func (s *Server) applyPatch(w http.ResponseWriter, r *http.Request, res *resource, ri requestInfo, old runtime.Object, body []byte, o writeOptions, manager string) (runtime.Object, bool, error) {
	fv, pt := o.fv, o.patchType
	if pt == types.ApplyYAMLPatchType {
		return s.applyServerSide(w, r, res, ri, old, body, o)
	}
	if old == nil {
		return nil, false, apierrors.NewNotFound(qualified(res), ri.name)
	}
	if pt == types.MergePatchType || pt == types.StrategicMergePatchType {
		if err := s.checkPatchFloor(res, ri, body, pt == types.StrategicMergePatchType, pt == types.MergePatchType); err != nil {
			return nil, false, err
		}
	}
	current, err := json.Marshal(old)
	if err != nil {
		return nil, false, apierrors.NewInternalError(err)
	}
	patched, err := s.patchJSON(r, res, ri, current, body, res.newObject())
	if err != nil {
		return nil, false, err
	}
	obj := res.newObject()
	if err := decodeInto(w, patched, obj, fv); err != nil {
		return nil, false, err
	}
	patched = nil
	if err := s.checkObjectSize(res, obj); err != nil {
		return nil, false, err
	}
	if err := checkCustomFields(w, res, obj, fv); err != nil {
		return nil, false, err
	}
	m, _ := metaOf(obj)
	om, _ := metaOf(old)
	if m.GetName() != ri.name {
		return nil, false, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", m.GetName(), ri.name))
	}
	// The patch pins the version only if it set resourceVersion to another
	// value. One that removed it asks for an unconditional update, as
	// kube-apiserver reads a missing resourceVersion: kubectl apply sends
	// "resourceVersion":null whenever last-applied holds one (after
	// kubectl replace of an exported object, for one).
	rv := m.GetResourceVersion()
	conditional := rv != "" && rv != om.GetResourceVersion()
	return obj, conditional, nil
}

// patchJSON applies a JSON, merge or strategic merge patch to current;
// dataStruct is the Go type strategic merge patch reads its merge keys from.
func (s *Server) patchJSON(r *http.Request, res *resource, ri requestInfo, current, body []byte, dataStruct any) ([]byte, error) {
	pt, err := patchType(r, res)
	if err != nil {
		return nil, err
	}
	var patched []byte
	switch pt {
	case types.JSONPatchType:
		p, err := jsonpatch.DecodePatch(body)
		if err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		if len(p) > maxJSONPatchOperations {
			return nil, tooManyJSONPatchOperations(len(p))
		}
		if patched, err = applyJSONPatch(p, current); err != nil {
			// kube-apiserver names neither resource nor object here, and
			// drops the patch library's message: clients print the same.
			return nil, apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "", schema.GroupResource{}, "", err.Error(), 0, false)
		}
	case types.MergePatchType:
		if patched, err = jsonpatch.MergePatch(current, body); err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
	case types.StrategicMergePatchType:
		if patched, err = strategicpatch.StrategicMergePatch(current, body, dataStruct); err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
	default:
		// Apply is not a patch of JSON.
		return nil, unsupportedMediaType(builtinPatchTypes[:3])
	}
	return patched, nil
}

// checkPatchFloor refuses a merge patch, strategic merge patch or apply
// configuration of the main resource whose result is surely over the
// object limit, before anything is built from it (patchFloor).
func (s *Server) checkPatchFloor(res *resource, ri requestInfo, body []byte, strategic, merge bool) error {
	if strategic && res.custom != nil {
		return nil // 415, from patchJSON
	}
	floor, nesting, ok := patchFloor(body, patchShape(res), strategic)
	if !ok {
		return nil // the patch libraries say what is wrong with it
	}
	// A subresource's patch keeps only part of what it sends: no floor.
	if ri.subresource == "" && floor > s.maxObjectSize() {
		return objectTooLarge(s.maxObjectSize())
	}
	if merge && nesting > maxMergePatchNesting {
		return apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("a merge patch may nest at most %d bytes (each byte counted at each level it is nested at), got %d", maxMergePatchNesting, nesting))
	}
	return nil
}

// maxMergePatchNesting bounds what the JSON merge patch library copies of
// a patch (patchFloor's nesting): a body of the largest size averaging
// ten levels deep, where objects are at most a few tens of levels deep.
// Without it a 3 MB patch of members nested 800 deep took 2.6 GB.
const maxMergePatchNesting = 10 * maxBodyBytes

// applyJSONPatch applies a JSON patch, turning the library's panics on
// malformed operations (an operation on the root without a value
// dereferences nil) into an error, so bad input is a 4xx, never a crash.
func applyJSONPatch(p jsonpatch.Patch, doc []byte) (out []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("invalid JSON patch: %v", r)
		}
	}()
	return p.Apply(doc)
}

// applyServerSide runs server-side apply through Kubernetes' own field
// manager, so ownership and conflicts are exactly upstream's.
func (s *Server) applyServerSide(w http.ResponseWriter, r *http.Request, res *resource, ri requestInfo, old runtime.Object, body []byte, o writeOptions) (runtime.Object, bool, error) {
	// The options' validation made sure apply names its manager.
	fv, manager, force := o.fv, o.manager, o.force
	// A configuration sent as JSON, as client-go and kubectl send it, is
	// measured before the YAML decoder builds it; one in YAML, once it
	// is JSON.
	if trimmed := bytes.TrimSpace(body); len(trimmed) > 0 && trimmed[0] == '{' {
		if err := s.checkPatchFloor(res, ri, body, false, false); err != nil {
			return nil, false, err
		}
	}
	j, err := yaml.YAMLToJSON(body)
	if err != nil {
		return nil, false, apierrors.NewBadRequest(fmt.Sprintf("error decoding YAML: %v", err))
	}
	if err := s.checkPatchFloor(res, ri, j, false, false); err != nil {
		return nil, false, err
	}
	patchObj := &unstructured.Unstructured{}
	if err := patchObj.UnmarshalJSON(j); err != nil {
		return nil, false, apierrors.NewBadRequest(fmt.Sprintf("error decoding apply configuration: %v", err))
	}
	if gvk := patchObj.GroupVersionKind(); gvk != res.gvk() {
		return nil, false, apierrors.NewBadRequest(fmt.Sprintf("the apply configuration's apiVersion/kind %s does not match %s", gvk, res.gvk()))
	}
	if patchObj.GetName() != ri.name {
		return nil, false, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", patchObj.GetName(), ri.name))
	}
	// Validate fields of the configuration itself as a typed decode would.
	probe := res.newObject()
	if err := decodeInto(w, j, probe, fv); err != nil {
		return nil, false, err
	}
	// Everything the configuration sets is in the result: one over the
	// limit is refused before the field manager builds its field sets,
	// which take many times its size.
	if err := s.checkObjectSize(res, probe); err != nil {
		return nil, false, err
	}
	if err := checkCustomFields(w, res, probe, fv); err != nil {
		return nil, false, err
	}
	fm, err := res.fieldManager(ri.subresource)
	if err != nil {
		return nil, false, apierrors.NewInternalError(err)
	}
	live := old
	if live == nil {
		live = res.newObject()
		if m, err := metaOf(live); err == nil {
			m.SetNamespace(ri.namespace)
			m.SetName(ri.name)
		}
		live.GetObjectKind().SetGroupVersionKind(res.gvk())
	}
	out, err := fm.Apply(live, patchObj, manager, force)
	if err != nil {
		var st apierrors.APIStatus
		if errors.As(err, &st) {
			return nil, false, err // conflicts are 409 already
		}
		// What is left is an apply configuration the schema cannot take
		// (a field it does not declare): the client's error, not ours.
		return nil, false, apierrors.NewBadRequest(err.Error())
	}
	conditional := patchObj.GetResourceVersion() != ""
	if m, err := metaOf(out); err == nil && conditional {
		m.SetResourceVersion(patchObj.GetResourceVersion())
	}
	return out, conditional, nil
}

// fieldManagers are built on first use: the type converter parses the
// schema of every built-in type, which is too slow for start-up.
var (
	typeConverterOnce sync.Once
	typeConverter     managedfields.TypeConverter
)

// groupTypeConverters know the kinds client-go's apply configurations
// do not describe: CustomResourceDefinitions and APIServices.
var groupTypeConverters = map[string]func() managedfields.TypeConverter{
	apiextensions.GVR.Group: sync.OnceValue(func() managedfields.TypeConverter { return extapply.NewTypeConverter(scheme.Scheme) }),
	aggregator.GVR.Group:    sync.OnceValue(func() managedfields.TypeConverter { return aggapply.NewTypeConverter(scheme.Scheme) }),
}

func builtinTypeConverter() managedfields.TypeConverter {
	typeConverterOnce.Do(func() {
		typeConverter = &fastTypeConverter{TypeConverter: applyconfigurations.NewTypeConverter(scheme.Scheme)}
	})
	return typeConverter
}

func (r *resource) fieldManager(subresource string) (*managedfields.FieldManager, error) {
	r.fmMu.Lock()
	defer r.fmMu.Unlock()
	if fm, ok := r.fms[subresource]; ok {
		return fm, nil
	}
	var fm *managedfields.FieldManager
	var err error
	if r.custom != nil {
		objs := r.custom.Objects()
		fm, err = managedfields.NewDefaultFieldManager(r.typeConverter(), objs, objs, objs, r.gvk(), r.gvk().GroupVersion(), subresource, nil)
	} else {
		fm, err = managedfields.NewDefaultFieldManager(r.typeConverter(), sameVersion{scheme.Scheme, r.peerConversions()}, r.defaulter, scheme.Scheme, r.gvk(), r.gvk().GroupVersion(), subresource, r.resetFields(subresource))
	}
	if err != nil {
		return nil, err
	}
	if r.fms == nil {
		r.fms = map[string]*managedfields.FieldManager{}
	}
	r.fms[subresource] = fm
	return fm, nil
}

// trackManagedFields records manager's ownership of what this write set,
// as every kube-apiserver write does.
func (s *Server) trackManagedFields(res *resource, subresource string, obj, old runtime.Object, manager string) (runtime.Object, error) {
	if old == nil && subresource == "" && res.recordCreated(obj, manager) {
		return obj, nil
	}
	fm, err := res.fieldManager(subresource)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	live := old
	if live == nil {
		live = res.newObject()
		live.GetObjectKind().SetGroupVersionKind(res.gvk())
	} else if res.custom == nil {
		equal := equalFields(live, obj)
		if res.recordUpdated(live, obj, obj, subresource, manager, equal) {
			return obj, nil
		}
		if pl, pn, pruned := withoutFields(live, obj, equal); pruned {
			return obj, copyManagedFields(fm.UpdateNoErrors(pl, pn, manager), obj)
		}
	}
	return fm.UpdateNoErrors(live, obj, manager), nil
}
