package statefulset

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"bonsai.dev/bonsai/controllers/garbagecollector"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

// owners is a claim's ownerReferences as "Kind/name/uid" (controller
// references only; the retention policy sets no others).
func owners(pvc *corev1.PersistentVolumeClaim) []string {
	var out []string
	for _, r := range pvc.OwnerReferences {
		if r.Controller != nil && *r.Controller && r.BlockOwnerDeletion != nil && *r.BlockOwnerDeletion {
			out = append(out, r.Kind+"/"+r.Name+"/"+string(r.UID))
		}
	}
	return out
}

// Each pod gets a PVC per claim template, <template>-<set>-<ordinal>,
// labelled with the set's selector, before it is created, and mounts it;
// scale down keeps or hands the claims to the garbage collector as the
// retention policy says, through ownerReferences.
func TestClaims(t *testing.T) {
	retain, del := appsv1.RetainPersistentVolumeClaimRetentionPolicyType, appsv1.DeletePersistentVolumeClaimRetentionPolicyType
	for _, tc := range []struct {
		whenDeleted, whenScaled appsv1.PersistentVolumeClaimRetentionPolicyType
		// Owners of the kept claim (data-web-0) and of the scaled-down
		// one (data-web-1): "set" or "pod" (web-1, as it was).
		kept, scaled []string
	}{
		{retain, retain, nil, nil},
		{del, retain, []string{"set"}, []string{"set"}},
		{retain, del, nil, []string{"pod"}},
		{del, del, []string{"set"}, []string{"pod"}},
	} {
		t.Run(fmt.Sprintf("whenDeleted %s whenScaled %s", tc.whenDeleted, tc.whenScaled), func(t *testing.T) {
			e := clustertest.New(t, clustertest.Options{Nodes: 2, Storage: true})
			inf := start(t, e)
			// Every pod must find its claims there when it is created.
			log := watchPods(t, inf, func(event string, p *corev1.Pod, _ map[string]*corev1.Pod) string {
				if event != "add" {
					return ""
				}
				if _, err := e.Client.Core.PersistentVolumeClaims("default").Get(e.Ctx, "data-"+p.Name, metav1.GetOptions{}); err != nil {
					return fmt.Sprintf("%s created before its claim: %v", p.Name, err)
				}
				return ""
			})
			set := create(t, e, newSet(2, parallel, claimTemplate, func(s *appsv1.StatefulSet) {
				s.Spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{WhenDeleted: tc.whenDeleted, WhenScaled: tc.whenScaled}
			}))
			ps := waitPods(t, e, func(p *corev1.Pod) error {
				want := []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-" + p.Name}}}}
				// Admission adds the service-account token volume beside it.
				var got []corev1.Volume
				for _, v := range p.Spec.Volumes {
					if v.Projected == nil {
						got = append(got, v)
					}
				}
				if diff := cmp.Diff(want, got); diff != "" {
					return fmt.Errorf("volumes (-want +got):\n%s", diff)
				}
				return nil
			}, "web-0", "web-1")
			if v := log.violations(); len(v) > 0 {
				t.Errorf("%v", v)
			}
			for _, name := range []string{"data-web-0", "data-web-1"} {
				pvc, err := e.Client.Core.PersistentVolumeClaims("default").Get(e.Ctx, name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(map[string]string{"app": "web", "tier": "db"}, pvc.Labels); diff != "" {
					t.Errorf("%s labels (-want +got):\n%s", name, diff)
				}
			}

			modify(t, e, func(s *appsv1.StatefulSet) { s.Spec.Replicas = ptr[int32](1) })
			waitPods(t, e, nil, "web-0")
			ref := map[string]string{"set": "StatefulSet/web/" + string(set.UID), "pod": "Pod/web-1/" + string(ps["web-1"].UID)}
			for _, c := range []struct {
				name string
				want []string
			}{{"data-web-0", tc.kept}, {"data-web-1", tc.scaled}} {
				var want []string
				for _, w := range c.want {
					want = append(want, ref[w])
				}
				clustertest.Eventually(t, timeout, func() error {
					pvc, err := e.Client.Core.PersistentVolumeClaims("default").Get(e.Ctx, c.name, metav1.GetOptions{})
					if err != nil {
						return err
					}
					if diff := cmp.Diff(want, owners(pvc)); diff != "" {
						return fmt.Errorf("%s owners (-want +got):\n%s", c.name, diff)
					}
					return nil
				})
			}
		})
	}
}

// Under whenScaled=Delete a claim still owned by a pod that is gone
// holds back the pod's successor until the garbage collector removes it
// (played here by the test), so the new pod never mounts the old data.
func TestStaleClaimBlocksPod(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{Nodes: 1, Storage: true})
	start(t, e)
	create(t, e, newSet(1, claimTemplate, func(s *appsv1.StatefulSet) {
		s.Spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{WhenScaled: appsv1.DeletePersistentVolumeClaimRetentionPolicyType}
	}))
	waitPods(t, e, nil, "web-0")
	modify(t, e, func(s *appsv1.StatefulSet) { s.Spec.Replicas = ptr[int32](0) })
	clustertest.Eventually(t, timeout, func() error {
		pvc, err := e.Client.Core.PersistentVolumeClaims("default").Get(e.Ctx, "data-web-0", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(owners(pvc)) != 1 {
			return fmt.Errorf("owners %v", owners(pvc))
		}
		if n := len(pods(t, e)); n != 0 {
			return fmt.Errorf("%d pods", n)
		}
		return nil
	})
	modify(t, e, func(s *appsv1.StatefulSet) { s.Spec.Replicas = ptr[int32](1) })
	// The set has seen the scale up and holds the pod back.
	clustertest.Eventually(t, timeout, func() error {
		if s := getSet(t, e); s.Status.ObservedGeneration != s.Generation {
			return fmt.Errorf("observedGeneration %d of %d", s.Status.ObservedGeneration, s.Generation)
		}
		return nil
	})
	if n := len(pods(t, e)); n != 0 {
		t.Fatalf("%d pods created over a stale claim", n)
	}
	pvc, err := e.Client.Core.PersistentVolumeClaims("default").Get(e.Ctx, "data-web-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Client.Core.PersistentVolumeClaims("default").Delete(e.Ctx, "data-web-0", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr(types.UID(pvc.UID))}}); err != nil {
		t.Fatal(err)
	}
	waitPods(t, e, nil, "web-0")
	if _, err := e.Client.Core.PersistentVolumeClaims("default").Get(e.Ctx, "data-web-0", metav1.GetOptions{}); err != nil {
		t.Errorf("claim not created again: %v", err)
	}
}

// With the garbage collector running, the retention policy's owner
// references do what the policy says: claims of scaled-down pods and of a
// deleted set go, or stay.
func TestClaimsWithGarbageCollector(t *testing.T) {
	retain, del := appsv1.RetainPersistentVolumeClaimRetentionPolicyType, appsv1.DeletePersistentVolumeClaimRetentionPolicyType
	for _, tc := range []struct {
		whenDeleted, whenScaled appsv1.PersistentVolumeClaimRetentionPolicyType
	}{{retain, retain}, {del, retain}, {retain, del}, {del, del}} {
		t.Run(fmt.Sprintf("whenDeleted %s whenScaled %s", tc.whenDeleted, tc.whenScaled), func(t *testing.T) {
			e := clustertest.New(t, clustertest.Options{Nodes: 2, Storage: true})
			start(t, e)
			gc, err := garbagecollector.New(garbagecollector.Config{RESTConfig: e.Config, Client: e.Client, Logger: e.Log})
			if err != nil {
				t.Fatal(err)
			}
			go gc.Run(e.Ctx)
			create(t, e, newSet(2, parallel, claimTemplate, func(s *appsv1.StatefulSet) {
				s.Spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{WhenDeleted: tc.whenDeleted, WhenScaled: tc.whenScaled}
			}))
			waitPods(t, e, nil, "web-0", "web-1")
			claims := e.Client.Core.PersistentVolumeClaims("default")
			exists := func(name string) bool {
				_, err := claims.Get(e.Ctx, name, metav1.GetOptions{})
				if err != nil && !apierrors.IsNotFound(err) {
					t.Fatal(err)
				}
				return err == nil
			}
			waitGone := func(name string) {
				t.Helper()
				clustertest.Eventually(t, timeout, func() error {
					if exists(name) {
						return fmt.Errorf("%s still there", name)
					}
					return nil
				})
			}

			modify(t, e, func(s *appsv1.StatefulSet) { s.Spec.Replicas = ptr[int32](1) })
			waitPods(t, e, nil, "web-0")
			if tc.whenScaled == del {
				waitGone("data-web-1")
			} else if !exists("data-web-1") {
				t.Fatal("data-web-1 deleted on scale down under whenScaled=Retain")
			}

			// A delete racing the controller's status write can get a 409
			// from bonsai's store (its reads lag a pending group commit);
			// retry as a client would.
			clustertest.Eventually(t, timeout, func() error {
				err := e.Client.Apps.StatefulSets("default").Delete(e.Ctx, "web", metav1.DeleteOptions{})
				if err != nil && !apierrors.IsConflict(err) {
					t.Fatal(err)
				}
				return err
			})
			waitPods(t, e, nil)
			left := []string{"data-web-0"}
			if tc.whenScaled == retain {
				left = append(left, "data-web-1")
			}
			for _, name := range left {
				if tc.whenDeleted == del {
					waitGone(name)
				} else if !exists(name) {
					t.Errorf("%s deleted with the set under whenDeleted=Retain", name)
				}
			}
		})
	}
}
