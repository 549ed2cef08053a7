// Package storage holds the kinds of storage.k8s.io: StorageClasses,
// VolumeAttributesClasses and the CSI kinds (CSIDriver, CSINode,
// CSIStorageCapacity, VolumeAttachment), with their defaults, rules and
// table columns.
package storage

import (
	"fmt"
	"math"
	"reflect"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"bonsai.dev/bonsai/apiserver/registry"
)

// Kinds are the group's rows of the table of served kinds.
func Kinds() []registry.Kind {
	return []registry.Kind{
		{GVR: registry.GVR("storage.k8s.io", "v1", "storageclasses"), Kind: "StorageClass", ShortNames: []string{"sc"},
			Strategy: storageClassStrategy{}, Defaulter: defaultStorageClass, Printer: &storageClassPrinter},
		{GVR: registry.GVR("storage.k8s.io", "v1", "volumeattributesclasses"), Kind: "VolumeAttributesClass", ShortNames: []string{"vac"},
			Strategy: volumeAttributesClassStrategy{}, Printer: &volumeAttributesClassPrinter},
		{GVR: registry.GVR("storage.k8s.io", "v1", "csidrivers"), Kind: "CSIDriver",
			Strategy: csiDriverStrategy{}, Defaulter: defaultCSIDriver, Printer: &csiDriverPrinter},
		{GVR: registry.GVR("storage.k8s.io", "v1", "csinodes"), Kind: "CSINode", Subresources: []string{"status"},
			Strategy: csiNodeStrategy{}, Printer: &csiNodePrinter},
		{GVR: registry.GVR("storage.k8s.io", "v1", "csistoragecapacities"), Kind: "CSIStorageCapacity", Namespaced: true,
			Strategy: csiStorageCapacityStrategy{}, Printer: &csiStorageCapacityPrinter},
		{GVR: registry.GVR("storage.k8s.io", "v1", "volumeattachments"), Kind: "VolumeAttachment", Subresources: []string{"status"},
			Strategy: volumeAttachmentStrategy{}, Printer: &volumeAttachmentPrinter},
	}
}

func defaultStorageClass(obj runtime.Object) {
	o := obj.(*storagev1.StorageClass)
	if o.ReclaimPolicy == nil {
		o.ReclaimPolicy = ptrTo(corev1.PersistentVolumeReclaimDelete)
	}
	if o.VolumeBindingMode == nil {
		o.VolumeBindingMode = ptrTo(storagev1.VolumeBindingImmediate)
	}
}

// The limits of a class's parameters, as kube-apiserver's.
const (
	maxParameters     = 512
	maxParametersSize = 256 << 10
	// maxAttachMetadataSize bounds a VolumeAttachment's
	// attachmentMetadata, maxVolumeErrorMessage its errors' messages.
	maxAttachMetadataSize = 256 << 10
	maxVolumeErrorMessage = 1024
	// maxCSINodeID is the longest node ID a CSINode driver may report.
	maxCSINodeID = 256
)

// storageClassStrategy: the provisioner is required and, with the
// parameters, reclaim policy and binding mode, fixed once created.
type storageClassStrategy struct{ registry.DefaultStrategy }

func (storageClassStrategy) Validate(_ *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	sc := obj.(*storagev1.StorageClass)
	errs := validateProvisioner(sc.Provisioner, field.NewPath("provisioner"))
	errs = append(errs, validateParameters(sc.Parameters, true, field.NewPath("parameters"))...)
	if p := sc.ReclaimPolicy; p != nil && *p != "" && *p != corev1.PersistentVolumeReclaimDelete && *p != corev1.PersistentVolumeReclaimRetain {
		errs = append(errs, field.NotSupported(field.NewPath("reclaimPolicy"), *p, []string{string(corev1.PersistentVolumeReclaimDelete), string(corev1.PersistentVolumeReclaimRetain)}))
	}
	if m := sc.VolumeBindingMode; m == nil {
		errs = append(errs, field.Required(field.NewPath("volumeBindingMode"), ""))
	} else if *m != storagev1.VolumeBindingImmediate && *m != storagev1.VolumeBindingWaitForFirstConsumer {
		errs = append(errs, field.NotSupported(field.NewPath("volumeBindingMode"), *m, []string{string(storagev1.VolumeBindingImmediate), string(storagev1.VolumeBindingWaitForFirstConsumer)}))
	}
	return errs
}

func (st storageClassStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	sc, was := obj.(*storagev1.StorageClass), old.(*storagev1.StorageClass)
	var errs field.ErrorList
	if !reflect.DeepEqual(sc.Parameters, was.Parameters) {
		errs = append(errs, field.Forbidden(field.NewPath("parameters"), "updates to parameters are forbidden."))
	}
	if sc.Provisioner != was.Provisioner {
		errs = append(errs, field.Forbidden(field.NewPath("provisioner"), "updates to provisioner are forbidden."))
	}
	if sc.ReclaimPolicy != nil && was.ReclaimPolicy != nil && *sc.ReclaimPolicy != *was.ReclaimPolicy {
		errs = append(errs, field.Forbidden(field.NewPath("reclaimPolicy"), "updates to reclaimPolicy are forbidden."))
	}
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(sc.VolumeBindingMode, was.VolumeBindingMode, field.NewPath("volumeBindingMode"))...)
	return errs
}

// validateProvisioner: a provisioner (a class's driver) is a qualified
// name, in any case.
func validateProvisioner(p string, path *field.Path) field.ErrorList {
	if p == "" {
		return field.ErrorList{field.Required(path, "")}
	}
	var errs field.ErrorList
	for _, msg := range validation.IsQualifiedName(strings.ToLower(p)) {
		errs = append(errs, field.Invalid(path, p, msg))
	}
	return errs
}

func validateParameters(params map[string]string, allowEmpty bool, path *field.Path) field.ErrorList {
	if len(params) > maxParameters {
		return field.ErrorList{field.TooMany(path, len(params), maxParameters)}
	}
	var errs field.ErrorList
	size := 0
	for k, v := range params {
		if k == "" {
			errs = append(errs, field.Invalid(path, k, "field can not be empty."))
		}
		size += len(k) + len(v)
	}
	if size > maxParametersSize {
		errs = append(errs, field.TooLong(path, "", maxParametersSize))
	}
	if !allowEmpty && len(params) == 0 {
		errs = append(errs, field.Required(path, "must contain at least one key/value pair"))
	}
	return errs
}

// volumeAttributesClassStrategy: a driver and at least one parameter,
// both fixed once created.
type volumeAttributesClassStrategy struct{ registry.DefaultStrategy }

func (volumeAttributesClassStrategy) Validate(_ *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	c := obj.(*storagev1.VolumeAttributesClass)
	errs := validateProvisioner(c.DriverName, field.NewPath("driverName"))
	return append(errs, validateParameters(c.Parameters, false, field.NewPath("parameters"))...)
}

func (st volumeAttributesClassStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	c, was := obj.(*storagev1.VolumeAttributesClass), old.(*storagev1.VolumeAttributesClass)
	var errs field.ErrorList
	if c.DriverName != was.DriverName {
		errs = append(errs, field.Forbidden(field.NewPath("driverName"), "updates to driverName are forbidden."))
	}
	if !reflect.DeepEqual(c.Parameters, was.Parameters) {
		errs = append(errs, field.Forbidden(field.NewPath("parameters"), "updates to parameters are forbidden."))
	}
	return append(errs, st.Validate(w, obj)...)
}

// defaultCSIDriver applies storage.k8s.io/v1's defaults.
func defaultCSIDriver(obj runtime.Object) {
	s := &obj.(*storagev1.CSIDriver).Spec
	if s.AttachRequired == nil {
		s.AttachRequired = ptrTo(true)
	}
	if s.PodInfoOnMount == nil {
		s.PodInfoOnMount = ptrTo(false)
	}
	if s.StorageCapacity == nil {
		s.StorageCapacity = ptrTo(false)
	}
	if s.FSGroupPolicy == nil {
		s.FSGroupPolicy = ptrTo(storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy)
	}
	if len(s.VolumeLifecycleModes) == 0 {
		s.VolumeLifecycleModes = []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}
	}
	if s.RequiresRepublish == nil {
		s.RequiresRepublish = ptrTo(false)
	}
	if s.SELinuxMount == nil {
		s.SELinuxMount = ptrTo(false)
	}
}

// csiDriverStrategy holds CSIDriver's rules; attachRequired and the
// lifecycle modes are fixed once created. (kube-apiserver names the
// first "spec.attachedRequired" in its errors; so does bonsai.)
type csiDriverStrategy struct{ registry.DefaultStrategy }

func (csiDriverStrategy) Validate(_ *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	s := &obj.(*storagev1.CSIDriver).Spec
	p := field.NewPath("spec")
	var errs field.ErrorList
	for _, req := range []struct {
		v    *bool
		name string
	}{{s.AttachRequired, "attachedRequired"}, {s.PodInfoOnMount, "podInfoOnMount"}, {s.StorageCapacity, "storageCapacity"}, {s.SELinuxMount, "seLinuxMount"}} {
		if req.v == nil {
			errs = append(errs, field.Required(p.Child(req.name), ""))
		}
	}
	if g := s.FSGroupPolicy; g != nil && *g != storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy && *g != storagev1.FileFSGroupPolicy && *g != storagev1.NoneFSGroupPolicy {
		errs = append(errs, field.NotSupported(p.Child("fsGroupPolicy"), *g, []string{string(storagev1.FileFSGroupPolicy), string(storagev1.NoneFSGroupPolicy), string(storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy)}))
	}
	audiences := map[string]bool{}
	for i, tr := range s.TokenRequests {
		ip := p.Child("tokenRequests").Index(i)
		if audiences[tr.Audience] {
			errs = append(errs, field.Duplicate(ip.Child("audience"), tr.Audience))
			continue
		}
		audiences[tr.Audience] = true
		if e := tr.ExpirationSeconds; e != nil {
			if *e < 600 {
				errs = append(errs, field.Invalid(ip.Child("expirationSeconds"), *e, "may not specify a duration less than 10 minutes"))
			}
			if *e > 1<<32 {
				errs = append(errs, field.Invalid(ip.Child("expirationSeconds"), *e, "may not specify a duration larger than 2^32 seconds"))
			}
		}
	}
	for _, m := range s.VolumeLifecycleModes {
		if m != storagev1.VolumeLifecyclePersistent && m != storagev1.VolumeLifecycleEphemeral {
			errs = append(errs, field.NotSupported(p.Child("volumeLifecycleModes"), m, []string{string(storagev1.VolumeLifecyclePersistent), string(storagev1.VolumeLifecycleEphemeral)}))
		}
	}
	if n := s.NodeAllocatableUpdatePeriodSeconds; n != nil && *n < 10 {
		errs = append(errs, field.Invalid(p.Child("nodeAllocatableUpdatePeriodSeconds"), *n, "must be greater than or equal to 10 seconds"))
	}
	return errs
}

func (st csiDriverStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	s, was := &obj.(*storagev1.CSIDriver).Spec, &old.(*storagev1.CSIDriver).Spec
	errs := st.Validate(w, obj)
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(s.AttachRequired, was.AttachRequired, field.NewPath("spec", "attachedRequired"))...)
	return append(errs, apimachineryvalidation.ValidateImmutableField(s.VolumeLifecycleModes, was.VolumeLifecycleModes, field.NewPath("spec", "volumeLifecycleModes"))...)
}

// validateCSIDriverName: a CSI driver's name, as the CSI spec and
// kube-apiserver want it.
func validateCSIDriverName(name string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if name == "" {
		errs = append(errs, field.Required(path, ""))
	}
	if len(name) > 63 {
		errs = append(errs, field.TooLong(path, name, 63))
	}
	for _, msg := range validation.IsDNS1123Subdomain(strings.ToLower(name)) {
		errs = append(errs, field.Invalid(path, name, msg))
	}
	return errs
}

// csiNodeStrategy: each driver once, with a name, a node ID and
// qualified topology keys; an existing driver's entry is fixed but for
// its allocatable count.
type csiNodeStrategy struct{ registry.DefaultStrategy }

func (csiNodeStrategy) Validate(_ *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	var errs field.ErrorList
	names := map[string]bool{}
	for i, d := range obj.(*storagev1.CSINode).Spec.Drivers {
		p := field.NewPath("spec", "drivers").Index(i)
		errs = append(errs, validateCSIDriverName(d.Name, p.Child("name"))...)
		if d.NodeID == "" {
			errs = append(errs, field.Required(p.Child("nodeID"), ""))
		}
		if len(d.NodeID) > maxCSINodeID {
			errs = append(errs, field.Invalid(p.Child("nodeID"), d.NodeID, fmt.Sprintf("must be %d characters or less", maxCSINodeID)))
		}
		if a := d.Allocatable; a != nil && a.Count != nil && *a.Count < 0 {
			errs = append(errs, field.Invalid(p.Child("allocatable", "count"), int64(*a.Count), "must be greater than or equal to 0"))
		}
		if names[d.Name] {
			errs = append(errs, field.Duplicate(p.Child("name"), d.Name))
		}
		names[d.Name] = true
		keys := map[string]bool{}
		for _, k := range d.TopologyKeys {
			if k == "" {
				errs = append(errs, field.Required(p, k))
			}
			if keys[k] {
				errs = append(errs, field.Duplicate(p, k))
			}
			keys[k] = true
			for _, msg := range validation.IsQualifiedName(k) {
				errs = append(errs, field.Invalid(p, k, msg))
			}
		}
	}
	return errs
}

func (st csiNodeStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	errs := st.Validate(w, obj)
	for _, was := range old.(*storagev1.CSINode).Spec.Drivers {
		for _, d := range obj.(*storagev1.CSINode).Spec.Drivers {
			if d.Name != was.Name {
				continue
			}
			d, was := *d.DeepCopy(), *was.DeepCopy()
			d.Allocatable, was.Allocatable = nil, nil
			errs = append(errs, apimachineryvalidation.ValidateImmutableField(d, was, field.NewPath("spec", "drivers"))...)
		}
	}
	return errs
}

// csiStorageCapacityStrategy: the topology and class a capacity was
// asked for are fixed; the capacity is not negative.
type csiStorageCapacityStrategy struct{ registry.DefaultStrategy }

func (csiStorageCapacityStrategy) Validate(_ *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	c := obj.(*storagev1.CSIStorageCapacity)
	errs := registry.ValidateLabelSelector(c.NodeTopology, field.NewPath("nodeTopology"))
	for _, msg := range apimachineryvalidation.NameIsDNSSubdomain(c.StorageClassName, false) {
		errs = append(errs, field.Invalid(field.NewPath("storageClassName"), c.StorageClassName, msg))
	}
	if c.Capacity != nil && c.Capacity.Sign() < 0 {
		errs = append(errs, field.Invalid(field.NewPath("capacity"), c.Capacity.String(), "must be greater than or equal to 0"))
	}
	return errs
}

func (st csiStorageCapacityStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	c, was := obj.(*storagev1.CSIStorageCapacity), old.(*storagev1.CSIStorageCapacity)
	var errs field.ErrorList
	if !equality.Semantic.DeepEqual(c.NodeTopology, was.NodeTopology) {
		errs = append(errs, field.Invalid(field.NewPath("nodeTopology"), c.NodeTopology, "field is immutable"))
	}
	if c.StorageClassName != was.StorageClassName {
		errs = append(errs, field.Invalid(field.NewPath("storageClassName"), c.StorageClassName, "field is immutable"))
	}
	return append(errs, st.Validate(w, obj)...)
}

// volumeAttachmentStrategy: an attacher, a node and exactly one source;
// the spec is fixed once created, the status is the attacher's.
type volumeAttachmentStrategy struct{ registry.DefaultStrategy }

func (volumeAttachmentStrategy) Validate(_ *registry.WriteCtx, obj runtime.Object) field.ErrorList {
	va := obj.(*storagev1.VolumeAttachment)
	p := field.NewPath("spec")
	var errs field.ErrorList
	if va.Spec.Attacher == "" {
		errs = append(errs, field.Required(p.Child("attacher"), ""))
	}
	src := va.Spec.Source
	switch {
	case src.InlineVolumeSpec == nil && src.PersistentVolumeName == nil:
		errs = append(errs, field.Required(p.Child("source"), "must specify exactly one of inlineVolumeSpec and persistentVolumeName"))
	case src.InlineVolumeSpec != nil && src.PersistentVolumeName != nil:
		errs = append(errs, field.Forbidden(p.Child("source"), "must specify exactly one of inlineVolumeSpec and persistentVolumeName"))
	case src.PersistentVolumeName != nil && *src.PersistentVolumeName == "":
		errs = append(errs, field.Required(p.Child("source", "persistentVolumeName"), "must specify non empty persistentVolumeName"))
	}
	for _, msg := range apimachineryvalidation.NameIsDNSSubdomain(va.Spec.NodeName, false) {
		errs = append(errs, field.Invalid(p.Child("nodeName"), va.Spec.NodeName, msg))
	}
	errs = append(errs, validateVolumeAttachmentStatus(&va.Status)...)
	if va.Spec.Attacher != "" {
		errs = append(errs, validateCSIDriverName(va.Spec.Attacher, p.Child("attacher"))...)
	}
	if n := src.PersistentVolumeName; n != nil && *n != "" {
		for _, msg := range apimachineryvalidation.NameIsDNSSubdomain(*n, false) {
			errs = append(errs, field.Invalid(p.Child("source", "persistentVolumeName"), *n, msg))
		}
	}
	return errs
}

func validateVolumeAttachmentStatus(s *storagev1.VolumeAttachmentStatus) field.ErrorList {
	p := field.NewPath("status")
	var errs field.ErrorList
	size := 0
	for k, v := range s.AttachmentMetadata {
		size += len(k) + len(v)
	}
	if size > maxAttachMetadataSize {
		errs = append(errs, field.TooLong(p.Child("attachmentMetadata"), "", maxAttachMetadataSize))
	}
	for name, e := range map[string]*storagev1.VolumeError{"attachError": s.AttachError, "detachError": s.DetachError} {
		if e == nil {
			continue
		}
		if len(e.Message) > maxVolumeErrorMessage {
			errs = append(errs, field.TooLong(p.Child(name, "message"), "", maxVolumeErrorMessage))
		}
		if e.ErrorCode != nil && *e.ErrorCode < 0 {
			errs = append(errs, field.Invalid(p.Child(name, "errorCode"), *e.ErrorCode, validation.InclusiveRangeError(0, math.MaxInt32)))
		}
	}
	return errs
}

func (st volumeAttachmentStrategy) ValidateUpdate(w *registry.WriteCtx, obj, old runtime.Object) field.ErrorList {
	errs := st.Validate(w, obj)
	if !equality.Semantic.DeepEqual(obj.(*storagev1.VolumeAttachment).Spec, old.(*storagev1.VolumeAttachment).Spec) {
		errs = append(errs, field.Invalid(field.NewPath("spec"), obj.(*storagev1.VolumeAttachment).Spec, "field is immutable"))
	}
	return errs
}

// ValidateStatusUpdate checks a status write's attachment metadata and
// errors.
func (volumeAttachmentStrategy) ValidateStatusUpdate(_ *registry.WriteCtx, obj, _ runtime.Object) field.ErrorList {
	return validateVolumeAttachmentStatus(&obj.(*storagev1.VolumeAttachment).Status)
}

var storageClassPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Provisioner", registry.TString, storagev1.StorageClass{}.SwaggerDoc()["provisioner"]),
		registry.Col("ReclaimPolicy", registry.TString, storagev1.StorageClass{}.SwaggerDoc()["reclaimPolicy"]),
		registry.Col("VolumeBindingMode", registry.TString, storagev1.StorageClass{}.SwaggerDoc()["volumeBindingMode"]),
		registry.Col("AllowVolumeExpansion", registry.TBoolean, storagev1.StorageClass{}.SwaggerDoc()["allowVolumeExpansion"]),
		registry.AgeCol,
	),
	Cells: func(o runtime.Object) []any {
		c := o.(*storagev1.StorageClass)
		name := c.Name
		if c.Annotations["storageclass.kubernetes.io/is-default-class"] == "true" || c.Annotations["storageclass.beta.kubernetes.io/is-default-class"] == "true" {
			name += " (default)"
		}
		reclaim := string(corev1.PersistentVolumeReclaimDelete)
		if c.ReclaimPolicy != nil {
			reclaim = string(*c.ReclaimPolicy)
		}
		binding := string(storagev1.VolumeBindingImmediate)
		if c.VolumeBindingMode != nil {
			binding = string(*c.VolumeBindingMode)
		}
		expand := c.AllowVolumeExpansion != nil && *c.AllowVolumeExpansion
		return []any{name, c.Provisioner, reclaim, binding, expand, registry.Age(c)}
	},
}

var volumeAttributesClassPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("DriverName", registry.TString, storagev1.VolumeAttributesClass{}.SwaggerDoc()["driverName"]),
		registry.AgeCol,
	),
	Cells: func(o runtime.Object) []any {
		c := o.(*storagev1.VolumeAttributesClass)
		return []any{c.Name, c.DriverName, registry.Age(c)}
	},
}

var csiDriverPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("AttachRequired", registry.TBoolean, storagev1.CSIDriverSpec{}.SwaggerDoc()["attachRequired"]),
		registry.Col("PodInfoOnMount", registry.TBoolean, storagev1.CSIDriverSpec{}.SwaggerDoc()["podInfoOnMount"]),
		registry.Col("StorageCapacity", registry.TBoolean, storagev1.CSIDriverSpec{}.SwaggerDoc()["storageCapacity"]),
		registry.Col("TokenRequests", registry.TString, storagev1.CSIDriverSpec{}.SwaggerDoc()["tokenRequests"]),
		registry.Col("RequiresRepublish", registry.TBoolean, storagev1.CSIDriverSpec{}.SwaggerDoc()["requiresRepublish"]),
		registry.Col("Modes", registry.TString, storagev1.CSIDriverSpec{}.SwaggerDoc()["volumeLifecycleModes"]),
		registry.AgeCol,
	),
	Cells: func(o runtime.Object) []any {
		d := o.(*storagev1.CSIDriver)
		s := d.Spec
		modes := make([]string, len(s.VolumeLifecycleModes))
		for i, m := range s.VolumeLifecycleModes {
			modes[i] = string(m)
		}
		tokens := "<unset>"
		if s.TokenRequests != nil {
			auds := make([]string, len(s.TokenRequests))
			for i, t := range s.TokenRequests {
				auds[i] = t.Audience
			}
			tokens = strings.Join(auds, ",")
		}
		return []any{d.Name, boolOr(s.AttachRequired, true), boolOr(s.PodInfoOnMount, false), boolOr(s.StorageCapacity, false),
			tokens, boolOr(s.RequiresRepublish, false), registry.OrNone(strings.Join(modes, ",")), registry.Age(d)}
	},
}

var csiNodePrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Drivers", registry.TInteger, "Drivers indicates the number of CSI drivers registered on the node"),
		registry.AgeCol,
	),
	Cells: func(o runtime.Object) []any {
		n := o.(*storagev1.CSINode)
		return []any{n.Name, int64(len(n.Spec.Drivers)), registry.Age(n)}
	},
}

var csiStorageCapacityPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("StorageClassName", registry.TString, storagev1.CSIStorageCapacity{}.SwaggerDoc()["storageClassName"]),
		registry.Col("Capacity", registry.TString, storagev1.CSIStorageCapacity{}.SwaggerDoc()["capacity"]),
	),
	Cells: func(o runtime.Object) []any {
		c := o.(*storagev1.CSIStorageCapacity)
		capacity := "<unset>"
		if c.Capacity != nil {
			capacity = c.Capacity.String()
		}
		return []any{c.Name, c.StorageClassName, capacity}
	},
}

var volumeAttachmentPrinter = registry.Printer{
	Columns: registry.Cols(registry.NameCol,
		registry.Col("Attacher", registry.TString, storagev1.VolumeAttachmentSpec{}.SwaggerDoc()["attacher"]),
		registry.Col("PV", registry.TString, storagev1.VolumeAttachmentSource{}.SwaggerDoc()["persistentVolumeName"]),
		registry.Col("Node", registry.TString, storagev1.VolumeAttachmentSpec{}.SwaggerDoc()["nodeName"]),
		registry.Col("Attached", registry.TBoolean, storagev1.VolumeAttachmentStatus{}.SwaggerDoc()["attached"]),
		registry.AgeCol,
	),
	Cells: func(o runtime.Object) []any {
		va := o.(*storagev1.VolumeAttachment)
		pv := ""
		if n := va.Spec.Source.PersistentVolumeName; n != nil {
			pv = *n
		}
		return []any{va.Name, va.Spec.Attacher, pv, va.Spec.NodeName, va.Status.Attached, registry.Age(va)}
	},
}

func boolOr(b *bool, d bool) bool {
	if b == nil {
		return d
	}
	return *b
}

func ptrTo[T any](v T) *T { return &v }
