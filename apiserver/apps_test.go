package apiserver

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func appsTemplate(image string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "a"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: image}}},
	}
}

// A DaemonSet's template generation lives in an annotation kube-apiserver
// owns: 1 on create, +1 per template change only, whatever a client sends.
func TestDaemonSetTemplateGeneration(t *testing.T) {
	e := newTestEnv(t)
	dss := e.cs.AppsV1().DaemonSets("default")
	ds, err := dss.Create(e.ctx, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent"}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}},
		Template: appsTemplate("one"),
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gen := func(ds *appsv1.DaemonSet) string { return ds.Annotations[appsv1.DeprecatedTemplateGeneration] }
	if gen(ds) != "1" || ds.Generation != 1 {
		t.Fatalf("created: template generation %q, generation %d; want 1, 1", gen(ds), ds.Generation)
	}

	ds.Spec.MinReadySeconds = 5
	ds.Annotations[appsv1.DeprecatedTemplateGeneration] = "7"
	if ds, err = dss.Update(e.ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if gen(ds) != "1" || ds.Generation != 2 {
		t.Fatalf("spec change outside the template: template generation %q, generation %d; want 1, 2", gen(ds), ds.Generation)
	}

	ds.Spec.Template.Spec.Containers[0].Image = "two"
	if ds, err = dss.Update(e.ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if gen(ds) != "2" || ds.Generation != 3 {
		t.Fatalf("template change: template generation %q, generation %d; want 2, 3", gen(ds), ds.Generation)
	}

	ds.Annotations[appsv1.DeprecatedTemplateGeneration] = "x"
	if _, err := dss.Update(e.ctx, ds, metav1.UpdateOptions{}); !apierrors.IsBadRequest(err) {
		t.Fatalf("non-numeric template generation: %v, want BadRequest", err)
	}
}

func TestAppsDefaults(t *testing.T) {
	e := newTestEnv(t)
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}
	onDelete := appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
	explicit := appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType}
	for _, tc := range []struct {
		name string
		in   appsv1.StatefulSetUpdateStrategy
		want appsv1.StatefulSetUpdateStrategy
	}{
		{"unset", appsv1.StatefulSetUpdateStrategy{}, appsv1.StatefulSetUpdateStrategy{
			Type: appsv1.RollingUpdateStatefulSetStrategyType,
			RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{
				Partition: ptrTo[int32](0), MaxUnavailable: ptrTo(intstr.FromInt32(1)),
			},
		}},
		// Upstream fills rollingUpdate in only when the type was unset.
		{"RollingUpdate without parameters", explicit, explicit},
		{"OnDelete", onDelete, onDelete},
	} {
		t.Run("statefulset "+tc.name, func(t *testing.T) {
			s, err := e.cs.AppsV1().StatefulSets("default").Create(e.ctx, &appsv1.StatefulSet{
				ObjectMeta: metav1.ObjectMeta{GenerateName: "db-"},
				Spec:       appsv1.StatefulSetSpec{Selector: sel, Template: appsTemplate("x"), UpdateStrategy: tc.in},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, s.Spec.UpdateStrategy); diff != "" {
				t.Errorf("updateStrategy (-want +got):\n%s", diff)
			}
			retain := appsv1.RetainPersistentVolumeClaimRetentionPolicyType
			want := appsv1.StatefulSetSpec{
				Replicas:             ptrTo[int32](1),
				PodManagementPolicy:  appsv1.OrderedReadyPodManagement,
				RevisionHistoryLimit: ptrTo[int32](10),
				PersistentVolumeClaimRetentionPolicy: &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
					WhenDeleted: retain, WhenScaled: retain,
				},
			}
			got := appsv1.StatefulSetSpec{Replicas: s.Spec.Replicas, PodManagementPolicy: s.Spec.PodManagementPolicy,
				RevisionHistoryLimit: s.Spec.RevisionHistoryLimit, PersistentVolumeClaimRetentionPolicy: s.Spec.PersistentVolumeClaimRetentionPolicy}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("defaults (-want +got):\n%s", diff)
			}
		})
	}

	ds, err := e.cs.AppsV1().DaemonSets("default").Create(e.ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent"},
		Spec:       appsv1.DaemonSetSpec{Selector: sel, Template: appsTemplate("x")},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType, RollingUpdate: &appsv1.RollingUpdateDaemonSet{
		MaxUnavailable: ptrTo(intstr.FromInt32(1)), MaxSurge: ptrTo(intstr.FromInt32(0)),
	}}
	if diff := cmp.Diff(want, ds.Spec.UpdateStrategy); diff != "" {
		t.Errorf("daemonset updateStrategy (-want +got):\n%s", diff)
	}
	if ds.Spec.RevisionHistoryLimit == nil || *ds.Spec.RevisionHistoryLimit != 10 {
		t.Errorf("daemonset revisionHistoryLimit %v, want 10", ds.Spec.RevisionHistoryLimit)
	}
}

// Update strategies and the other fields the controllers act on are
// refused when the controllers could not honour them, with the field
// kube-apiserver names.
func TestAppsValidation(t *testing.T) {
	e := newTestEnv(t)
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}
	pct := func(s string) *intstr.IntOrString { return ptrTo(intstr.FromString(s)) }
	num := func(n int32) *intstr.IntOrString { return ptrTo(intstr.FromInt32(n)) }
	dsRolling := func(unavailable, surge *intstr.IntOrString) appsv1.DaemonSetUpdateStrategy {
		return appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType, RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: unavailable, MaxSurge: surge}}
	}
	for _, tc := range []struct {
		name  string
		ds    func(*appsv1.DaemonSetSpec)
		field string // "" for valid
	}{
		{"surge only", func(s *appsv1.DaemonSetSpec) { s.UpdateStrategy = dsRolling(num(0), pct("10%")) }, ""},
		{"both zero", func(s *appsv1.DaemonSetSpec) { s.UpdateStrategy = dsRolling(num(0), pct("0%")) }, "spec.updateStrategy.rollingUpdate.maxUnavailable"},
		{"both set", func(s *appsv1.DaemonSetSpec) { s.UpdateStrategy = dsRolling(num(1), num(1)) }, "spec.updateStrategy.rollingUpdate.maxSurge"},
		{"over 100%", func(s *appsv1.DaemonSetSpec) { s.UpdateStrategy = dsRolling(pct("150%"), nil) }, "spec.updateStrategy.rollingUpdate.maxUnavailable"},
		{"negative", func(s *appsv1.DaemonSetSpec) { s.UpdateStrategy = dsRolling(num(-1), nil) }, "spec.updateStrategy.rollingUpdate.maxUnavailable"},
		{"unknown type", func(s *appsv1.DaemonSetSpec) { s.UpdateStrategy.Type = "Sometimes" }, "spec.updateStrategy"},
		{"negative history", func(s *appsv1.DaemonSetSpec) { s.RevisionHistoryLimit = ptrTo[int32](-1) }, "spec.revisionHistoryLimit"},
	} {
		t.Run("daemonset "+tc.name, func(t *testing.T) {
			ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{GenerateName: "ds-"}, Spec: appsv1.DaemonSetSpec{Selector: sel, Template: appsTemplate("x")}}
			tc.ds(&ds.Spec)
			_, err := e.cs.AppsV1().DaemonSets("default").Create(e.ctx, ds, metav1.CreateOptions{})
			checkInvalid(t, err, tc.field)
		})
	}
	for _, tc := range []struct {
		name  string
		sts   func(*appsv1.StatefulSetSpec)
		field string
	}{
		{"maxUnavailable 50%", func(s *appsv1.StatefulSetSpec) {
			s.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType, RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{MaxUnavailable: pct("50%")}}
		}, ""},
		{"maxUnavailable 0", func(s *appsv1.StatefulSetSpec) {
			s.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType, RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{MaxUnavailable: num(0)}}
		}, "spec.updateStrategy.rollingUpdate.maxUnavailable"},
		{"negative partition", func(s *appsv1.StatefulSetSpec) {
			s.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType, RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptrTo[int32](-1)}}
		}, "spec.updateStrategy.rollingUpdate.partition"},
		{"rollingUpdate with OnDelete", func(s *appsv1.StatefulSetSpec) {
			s.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType, RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{}}
		}, "spec.updateStrategy.rollingUpdate"},
		{"mounts its claim template", func(s *appsv1.StatefulSetSpec) {
			s.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"}, Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: apiresource.MustParse("1Gi")}}}}}
			s.Template.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
		}, ""},
		{"mounts an unknown volume", func(s *appsv1.StatefulSetSpec) {
			s.Template.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
		}, "spec.template.spec.containers[0].volumeMounts[0].name"},
		{"unknown policy", func(s *appsv1.StatefulSetSpec) { s.PodManagementPolicy = "Whenever" }, "spec.podManagementPolicy"},
		{"negative start", func(s *appsv1.StatefulSetSpec) { s.Ordinals = &appsv1.StatefulSetOrdinals{Start: -1} }, "spec.ordinals.start"},
		{"unknown retention", func(s *appsv1.StatefulSetSpec) {
			s.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{WhenScaled: "Shred"}
		}, "spec.persistentVolumeClaimRetentionPolicy.whenScaled"},
	} {
		t.Run("statefulset "+tc.name, func(t *testing.T) {
			s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{GenerateName: "sts-"}, Spec: appsv1.StatefulSetSpec{Selector: sel, Template: appsTemplate("x")}}
			tc.sts(&s.Spec)
			_, err := e.cs.AppsV1().StatefulSets("default").Create(e.ctx, s, metav1.CreateOptions{})
			checkInvalid(t, err, tc.field)
		})
	}
}

// checkInvalid wants no error for field "", else a 422 naming field.
func checkInvalid(t *testing.T, err error, field string) {
	t.Helper()
	if field == "" {
		if err != nil {
			t.Fatalf("valid spec refused: %v", err)
		}
		return
	}
	if !apierrors.IsInvalid(err) {
		t.Fatalf("got %v, want 422 Invalid on %s", err, field)
	}
	for _, c := range err.(apierrors.APIStatus).Status().Details.Causes {
		if c.Field == field {
			return
		}
	}
	t.Errorf("422 without a cause on %s: %v", field, err)
}
