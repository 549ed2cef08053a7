package apiserver

import (
	"context"
	"errors"
	"fmt"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap"

	flowcontrolregistry "bonsai.dev/bonsai/apiserver/registry/flowcontrol"
	"bonsai.dev/bonsai/store"
)

// autoUpdateAnnotation marks the configuration objects the server keeps
// up to date; an admin who sets it to "false" on a suggested object keeps
// their own spec, as with kube-apiserver.
const autoUpdateAnnotation = "apf.kubernetes.io/autoupdate-spec"

var (
	flowSchemasGVR    = gvr(flowcontrolregistry.Group, "v1", "flowschemas")
	priorityLevelsGVR = gvr(flowcontrolregistry.Group, "v1", "prioritylevelconfigurations")
)

// ensureFlowControl keeps API Priority and Fairness' configuration as
// kube-apiserver does: the mandatory objects always exist with their
// fixed spec, the suggested ones are created when missing and kept at
// the server's spec unless an admin turned auto-update off, and every
// FlowSchema's Dangling condition says whether its priority level exists.
func (s *Server) ensureFlowControl(ctx context.Context) error {
	// One list of each kind: a restart that finds everything in place
	// reads 2 ranges, not 19 objects.
	have := map[string]runtime.Object{}
	for _, g := range []schema.GroupVersionResource{priorityLevelsGVR, flowSchemasGVR} {
		items, _, err := s.listObjects(ctx, s.reg.byGVR[g], "", listOptions{})
		if err != nil {
			return err
		}
		for _, o := range items {
			m, _ := metaOf(o)
			have[g.Resource+"/"+m.GetName()] = o
		}
	}
	type want struct {
		obj       runtime.Object
		g         schema.GroupVersionResource
		mandatory bool
	}
	var wants []want
	for _, o := range bootstrap.MandatoryPriorityLevelConfigurations {
		wants = append(wants, want{o, priorityLevelsGVR, true})
	}
	for _, o := range bootstrap.SuggestedPriorityLevelConfigurations {
		wants = append(wants, want{o, priorityLevelsGVR, false})
	}
	for _, o := range bootstrap.MandatoryFlowSchemas {
		wants = append(wants, want{o, flowSchemasGVR, true})
	}
	for _, o := range bootstrap.SuggestedFlowSchemas {
		wants = append(wants, want{o, flowSchemasGVR, false})
	}
	for _, w := range wants {
		m, _ := metaOf(w.obj)
		if old, ok := have[w.g.Resource+"/"+m.GetName()]; ok && !apfUpdate(old.DeepCopyObject(), s.apfWanted(w.obj, w.g), w.mandatory) {
			continue
		}
		if err := s.ensureAPFObject(ctx, w.obj, w.g, w.mandatory); err != nil {
			return err
		}
	}
	return s.updateDanglingFlowSchemas(ctx)
}

// apfWanted is a configuration object as the server keeps it: defaulted,
// marked auto-update.
func (s *Server) apfWanted(obj runtime.Object, g schema.GroupVersionResource) runtime.Object {
	want := obj.DeepCopyObject()
	m, _ := metaOf(want)
	ann := map[string]string{autoUpdateAnnotation: "true"}
	for k, v := range m.GetAnnotations() {
		ann[k] = v
	}
	m.SetAnnotations(ann)
	s.reg.byGVR[g].defaulter.Default(want)
	return want
}

// ensureAPFObject creates obj (a FlowSchema or PriorityLevelConfiguration)
// or brings the stored object's spec back to obj's (see apfUpdate).
func (s *Server) ensureAPFObject(ctx context.Context, obj runtime.Object, g schema.GroupVersionResource, mandatory bool) error {
	want := s.apfWanted(obj, g)
	return s.ensureCurrent(ctx, want, g, func(old runtime.Object) bool { return apfUpdate(old, want, mandatory) })
}

// apfUpdate brings old (a stored FlowSchema or PriorityLevelConfiguration)
// to want and reports whether that changed it: always for a mandatory
// object, for a suggested one only while it is marked auto-update.
func apfUpdate(old, want runtime.Object, mandatory bool) bool {
	om, _ := metaOf(old)
	auto := om.GetAnnotations()[autoUpdateAnnotation] == "true"
	if !mandatory && !auto {
		return false
	}
	changed := false
	switch o := old.(type) {
	case *flowcontrolv1.FlowSchema:
		if w := want.(*flowcontrolv1.FlowSchema); !apiequality.Semantic.DeepEqual(o.Spec, w.Spec) {
			o.Spec, changed = w.Spec, true
		}
	case *flowcontrolv1.PriorityLevelConfiguration:
		spec := want.(*flowcontrolv1.PriorityLevelConfiguration).Spec.DeepCopy()
		if o.Name == flowcontrolv1.PriorityLevelConfigurationNameExempt && o.Spec.Exempt != nil {
			// The exempt level's spec.exempt is the admin's to tune.
			spec.Exempt = o.Spec.Exempt
		}
		if !apiequality.Semantic.DeepEqual(o.Spec, *spec) {
			o.Spec, changed = *spec, true
		}
	}
	if mandatory && !auto {
		a := om.GetAnnotations()
		if a == nil {
			a = map[string]string{}
		}
		a[autoUpdateAnnotation] = "true"
		om.SetAnnotations(a)
		changed = true
	}
	return changed
}

// updateDanglingFlowSchemas sets each FlowSchema's Dangling condition:
// True when its priority level does not exist.
func (s *Server) updateDanglingFlowSchemas(ctx context.Context) error {
	levels, _, err := s.listObjects(ctx, s.reg.byGVR[priorityLevelsGVR], "", listOptions{})
	if err != nil {
		return err
	}
	exists := map[string]bool{}
	for _, o := range levels {
		exists[o.(*flowcontrolv1.PriorityLevelConfiguration).Name] = true
	}
	res := s.reg.byGVR[flowSchemasGVR]
	schemas, _, err := s.listObjects(ctx, res, "", listOptions{})
	if err != nil {
		return err
	}
	for _, o := range schemas {
		fs := o.(*flowcontrolv1.FlowSchema)
		pl := fs.Spec.PriorityLevelConfiguration.Name
		want := flowcontrolv1.FlowSchemaCondition{Type: flowcontrolv1.FlowSchemaConditionDangling, Status: flowcontrolv1.ConditionFalse,
			Reason: "Found", Message: fmt.Sprintf("This FlowSchema references the PriorityLevelConfiguration object named %q and it exists", pl)}
		if !exists[pl] {
			want.Status, want.Reason = flowcontrolv1.ConditionTrue, "NotFound"
			want.Message = fmt.Sprintf("This FlowSchema references the PriorityLevelConfiguration object named %q but there is no such object", pl)
		}
		i := -1
		for j, c := range fs.Status.Conditions {
			if c.Type == want.Type {
				i = j
			}
		}
		if i >= 0 && fs.Status.Conditions[i].Status == want.Status && fs.Status.Conditions[i].Message == want.Message {
			continue
		}
		want.LastTransitionTime = storedNow()
		fs = fs.DeepCopy()
		if i >= 0 {
			fs.Status.Conditions[i] = want
		} else {
			fs.Status.Conditions = append(fs.Status.Conditions, want)
		}
		_, rev, err := s.getObject(ctx, res, "", fs.Name)
		if err != nil {
			continue
		}
		data, err := encodeForStore(res, fs)
		if err != nil {
			return err
		}
		if _, err := s.cfg.Store.Update(ctx, res.key("", fs.Name), data, rev); err != nil && !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("flowschema %s status: %w", fs.Name, err)
		}
	}
	return nil
}
