package admission

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// attrs are plain Attributes for tests.
type attrs struct {
	op       Operation
	gvr      schema.GroupVersionResource
	sub      string
	obj, old runtime.Object
}

func (a *attrs) GetOperation() Operation                  { return a.op }
func (a *attrs) GetResource() schema.GroupVersionResource { return a.gvr }
func (a *attrs) GetSubresource() string                   { return a.sub }
func (a *attrs) GetNamespace() string                     { return "ns" }
func (a *attrs) GetName() string                          { return "x" }
func (a *attrs) GetObject() runtime.Object                { return a.obj }
func (a *attrs) GetOldObject() runtime.Object             { return a.old }
func (a *attrs) IsDryRun() bool                           { return false }

// recorder records the calls of the plugins under test.
type recorder struct{ calls []string }

type both struct {
	name string
	ops  []Operation
	r    *recorder
	deny string // "admit" or "validate" refuses there
}

func (p both) Name() string { return p.name }
func (p both) Handles(op Operation) bool {
	for _, o := range p.ops {
		if o == op {
			return true
		}
	}
	return false
}

func (p both) Admit(context.Context, Attributes) error {
	p.r.calls = append(p.r.calls, p.name+".admit")
	if p.deny == "admit" {
		return errors.New(p.name)
	}
	return nil
}

type validating struct{ both }

func (p validating) Validate(context.Context, Attributes) error {
	p.r.calls = append(p.r.calls, p.name+".validate")
	if p.deny == "validate" {
		return errors.New(p.name)
	}
	return nil
}

// validateOnly has no Admit.
type validateOnly struct{ v validating }

func (p validateOnly) Name() string              { return p.v.Name() }
func (p validateOnly) Handles(op Operation) bool { return p.v.Handles(op) }
func (p validateOnly) Validate(ctx context.Context, a Attributes) error {
	return p.v.Validate(ctx, a)
}

type steps struct{ r *recorder }

func (s steps) Prepare(context.Context) error {
	s.r.calls = append(s.r.calls, "prepare")
	return nil
}

func (s steps) Validate(context.Context) error {
	s.r.calls = append(s.r.calls, "validate")
	return nil
}

func TestChainOrder(t *testing.T) {
	r := &recorder{}
	all := []Operation{Create, Update, Delete, Connect}
	c := NewChain(
		both{name: "a", ops: all, r: r},
		validating{both{name: "b", ops: []Operation{Create, Update}, r: r}},
		PrepareStep(Create),
		ValidateStep(Create, Update),
		validateOnly{validating{both{name: "c", ops: all, r: r}}},
		both{name: "d", ops: all, r: r},
		PrepareStep(Update),
		validating{both{name: "e", ops: []Operation{Update}, r: r}},
	)
	if diff := cmp.Diff([]string{"a", "b", "(prepare)", "(validate)", "c", "d", "(prepare)", "e"}, c.Names()); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		op   Operation
		want []string
	}{
		{Create, []string{"a.admit", "b.admit", "prepare", "d.admit", "b.validate", "validate", "c.validate"}},
		{Update, []string{"a.admit", "b.admit", "d.admit", "prepare", "e.admit", "b.validate", "validate", "c.validate", "e.validate"}},
		{Delete, []string{"a.admit", "d.admit", "c.validate"}},
	} {
		r.calls = nil
		if err := c.Run(context.Background(), &attrs{op: tc.op}, steps{r}); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, r.calls); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.op, diff)
		}
	}
	// No steps: the marks are passed over.
	r.calls = nil
	if err := c.Run(context.Background(), &attrs{op: Create}, nil); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a.admit", "b.admit", "d.admit", "b.validate", "c.validate"}, r.calls); diff != "" {
		t.Errorf("without steps (-want +got):\n%s", diff)
	}
}

func TestChainStopsAtFirstRefusal(t *testing.T) {
	r := &recorder{}
	c := NewChain(
		both{name: "a", ops: []Operation{Create}, r: r, deny: "admit"},
		validating{both{name: "b", ops: []Operation{Create}, r: r}},
	)
	err := c.Run(context.Background(), &attrs{op: Create}, nil)
	if err == nil || err.Error() != "a" {
		t.Fatalf("err = %v, want a's", err)
	}
	if diff := cmp.Diff([]string{"a.admit"}, r.calls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

func TestPodDefaults(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{PriorityClassName: "system-node-critical", Tolerations: []corev1.Toleration{
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	}}}
	a := &attrs{op: Create, gvr: podsResource, obj: pod}
	c := NewChain(Priority{}, DefaultTolerationSeconds{})
	if err := c.Run(context.Background(), a, nil); err != nil {
		t.Fatal(err)
	}
	if pod.Spec.Priority == nil || *pod.Spec.Priority != 2000001000 {
		t.Errorf("priority = %v", pod.Spec.Priority)
	}
	if pod.Spec.PreemptionPolicy == nil || *pod.Spec.PreemptionPolicy != corev1.PreemptLowerPriority {
		t.Errorf("preemptionPolicy = %v", pod.Spec.PreemptionPolicy)
	}
	var keys []string
	for _, tol := range pod.Spec.Tolerations {
		keys = append(keys, tol.Key)
	}
	if diff := cmp.Diff([]string{corev1.TaintNodeUnreachable, corev1.TaintNodeNotReady}, keys); diff != "" {
		t.Errorf("tolerations (-want +got):\n%s", diff)
	}
	// A pod's status write is not a new pod.
	status := &corev1.Pod{}
	if err := c.Run(context.Background(), &attrs{op: Create, gvr: podsResource, sub: "status", obj: status}, nil); err != nil {
		t.Fatal(err)
	}
	if status.Spec.Priority != nil || len(status.Spec.Tolerations) > 0 {
		t.Errorf("a subresource got the defaults: %+v", status.Spec)
	}
}

func TestStorage(t *testing.T) {
	older := metav1.Now()
	newer := metav1.NewTime(older.Add(1e9))
	classes := func(context.Context) ([]*storagev1.StorageClass, error) {
		return []*storagev1.StorageClass{
			{ObjectMeta: metav1.ObjectMeta{Name: "old", CreationTimestamp: older, Annotations: map[string]string{IsDefaultClassAnnotation: "true"}}},
			{ObjectMeta: metav1.ObjectMeta{Name: "new", CreationTimestamp: newer, Annotations: map[string]string{BetaIsDefaultClassAnnotation: "true"}}},
			{ObjectMeta: metav1.ObjectMeta{Name: "plain", CreationTimestamp: newer}},
		}, nil
	}
	c := NewChain(DefaultStorageClass{StorageClasses: classes}, StorageObjectInUseProtection{})
	pvc := &corev1.PersistentVolumeClaim{}
	if err := c.Run(context.Background(), &attrs{op: Create, gvr: claimsResource, obj: pvc}, nil); err != nil {
		t.Fatal(err)
	}
	if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != "new" {
		t.Errorf("class = %v, want the newest default", pvc.Spec.StorageClassName)
	}
	if diff := cmp.Diff([]string{PVCProtectionFinalizer}, pvc.Finalizers); diff != "" {
		t.Errorf("claim finalizers (-want +got):\n%s", diff)
	}
	none := ""
	chosen := &corev1.PersistentVolumeClaim{Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &none}}
	if err := c.Run(context.Background(), &attrs{op: Create, gvr: claimsResource, obj: chosen}, nil); err != nil {
		t.Fatal(err)
	}
	if *chosen.Spec.StorageClassName != "" {
		t.Errorf("an explicit empty class became %q", *chosen.Spec.StorageClassName)
	}
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Finalizers: []string{PVProtectionFinalizer}}}
	if err := c.Run(context.Background(), &attrs{op: Create, gvr: volumesResource, obj: pv}, nil); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{PVProtectionFinalizer}, pv.Finalizers); diff != "" {
		t.Errorf("volume finalizers (-want +got):\n%s", diff)
	}
	failing := DefaultStorageClass{StorageClasses: func(context.Context) ([]*storagev1.StorageClass, error) {
		return nil, errors.New("no list")
	}}
	err := NewChain(failing).Run(context.Background(), &attrs{op: Create, gvr: claimsResource, obj: &corev1.PersistentVolumeClaim{}}, nil)
	if err == nil || !strings.Contains(err.Error(), "no list") {
		t.Errorf("err = %v, want the list's", err)
	}
}
