package apiserver

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestServiceAccountAdmission(t *testing.T) {
	e := newTestEnv(t)
	sas, pods := e.cs.CoreV1().ServiceAccounts("default"), e.cs.CoreV1().Pods("default")
	no, yes := ptrTo(false), ptrTo(true)
	if _, err := sas.Create(e.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "quiet"}, AutomountServiceAccountToken: no,
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "registry"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wantVolume := corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: ptrTo[int32](0o644),
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptrTo[int64](3607)}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
		},
	}}
	ownMount := corev1.VolumeMount{Name: "own", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}
	for _, tc := range []struct {
		name string
		pod  corev1.PodSpec
		// sa is the account the pod must end up with; mounted whether
		// the token volume is added; mounts the containers' mounts
		// after admission (the token volume's name left out).
		sa         string
		mounted    bool
		mounts     [][]corev1.VolumeMount
		pullSecret string
	}{
		{name: "default account, every container mounts",
			pod: corev1.PodSpec{InitContainers: []corev1.Container{{Name: "i", Image: "busybox"}}, Containers: []corev1.Container{{Name: "a", Image: "busybox"}, {Name: "b", Image: "busybox"}}},
			sa:  "default", mounted: true,
			mounts: [][]corev1.VolumeMount{{{ReadOnly: true, MountPath: defaultAPITokenMountPath}}, {{ReadOnly: true, MountPath: defaultAPITokenMountPath}}, {{ReadOnly: true, MountPath: defaultAPITokenMountPath}}}},
		{name: "a container with its own mount there keeps it",
			pod: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "own", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
				Containers: []corev1.Container{{Name: "a", Image: "busybox", VolumeMounts: []corev1.VolumeMount{ownMount}}, {Name: "b", Image: "busybox"}}},
			sa: "default", mounted: true,
			mounts: [][]corev1.VolumeMount{{ownMount}, {{ReadOnly: true, MountPath: defaultAPITokenMountPath}}}},
		{name: "pod opts out",
			pod: corev1.PodSpec{AutomountServiceAccountToken: no, Containers: []corev1.Container{{Name: "a", Image: "busybox"}}},
			sa:  "default", mounts: [][]corev1.VolumeMount{nil}},
		{name: "account opts out, its pull secrets are copied",
			pod: corev1.PodSpec{ServiceAccountName: "quiet", Containers: []corev1.Container{{Name: "a", Image: "busybox"}}},
			sa:  "quiet", mounts: [][]corev1.VolumeMount{nil}, pullSecret: "registry"},
		{name: "the pod's opt-in wins over the account's opt-out",
			pod: corev1.PodSpec{ServiceAccountName: "quiet", AutomountServiceAccountToken: yes, Containers: []corev1.Container{{Name: "a", Image: "busybox"}}},
			sa:  "quiet", mounted: true, mounts: [][]corev1.VolumeMount{{{ReadOnly: true, MountPath: defaultAPITokenMountPath}}}, pullSecret: "registry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := pods.Create(e.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "p-"}, Spec: tc.pod}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if p.Spec.ServiceAccountName != tc.sa {
				t.Errorf("serviceAccountName %q, want %q", p.Spec.ServiceAccountName, tc.sa)
			}
			var tokenVolume string
			for _, v := range p.Spec.Volumes {
				if v.Projected == nil {
					continue
				}
				if tokenVolume != "" {
					t.Errorf("two token volumes")
				}
				tokenVolume = v.Name
				if !strings.HasPrefix(v.Name, "kube-api-access-") || len(v.Name) != len("kube-api-access-")+5 {
					t.Errorf("token volume name %q, want kube-api-access-<5 chars>", v.Name)
				}
				if diff := cmp.Diff(wantVolume, v.VolumeSource); diff != "" {
					t.Errorf("token volume (-want +got):\n%s", diff)
				}
			}
			if (tokenVolume != "") != tc.mounted {
				t.Fatalf("token volume %q, want one: %v", tokenVolume, tc.mounted)
			}
			var got [][]corev1.VolumeMount
			for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
				var ms []corev1.VolumeMount
				for _, m := range c.VolumeMounts {
					if m.Name == tokenVolume {
						m.Name = ""
					}
					ms = append(ms, m)
				}
				got = append(got, ms)
			}
			if diff := cmp.Diff(tc.mounts, got); diff != "" {
				t.Errorf("mounts (-want +got):\n%s", diff)
			}
			var pull string
			if len(p.Spec.ImagePullSecrets) > 0 {
				pull = p.Spec.ImagePullSecrets[0].Name
			}
			if pull != tc.pullSecret {
				t.Errorf("imagePullSecrets %v, want %q", p.Spec.ImagePullSecrets, tc.pullSecret)
			}
		})
	}
}

func TestServiceAccountAdmissionRefuses(t *testing.T) {
	e := newTestEnv(t)
	pods := e.cs.CoreV1().Pods("default")
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		msg  string
	}{
		{"missing account", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{ServiceAccountName: "nope", Containers: []corev1.Container{{Name: "a", Image: "busybox"}}}},
			`pods "p" is forbidden: error looking up service account default/nope: serviceaccount "nope" not found`},
		{"missing account, generated name", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "gen-"}, Spec: corev1.PodSpec{ServiceAccountName: "nope", Containers: []corev1.Container{{Name: "a", Image: "busybox"}}}},
			`pods "gen-" is forbidden: error looking up service account default/nope: serviceaccount "nope" not found`},
		{"mirror pod naming an account", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "m", Annotations: map[string]string{"kubernetes.io/config.mirror": "x"}}, Spec: corev1.PodSpec{ServiceAccountName: "default", Containers: []corev1.Container{{Name: "a", Image: "busybox"}}}},
			`pods "m" is forbidden: a mirror pod may not reference service accounts`},
		{"mirror pod using a secret", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "m", Annotations: map[string]string{"kubernetes.io/config.mirror": "x"}}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "busybox",
			EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}}}}}}}},
			`pods "m" is forbidden: a mirror pod may not reference secrets`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pods.Create(e.ctx, tc.pod, metav1.CreateOptions{})
			if !apierrors.IsForbidden(err) || err.Error() != tc.msg {
				t.Fatalf("err %v, want 403 %q", err, tc.msg)
			}
		})
	}
	// A mirror pod is left as the kubelet wrote it.
	m, err := pods.Create(e.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "static-n1", Annotations: map[string]string{"kubernetes.io/config.mirror": "x"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "busybox"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m.Spec.ServiceAccountName != "" || len(m.Spec.Volumes) != 0 {
		t.Errorf("mirror pod changed: account %q volumes %v", m.Spec.ServiceAccountName, m.Spec.Volumes)
	}
}

// TestServiceAccountAdmissionWaitsForDefault: a pod created in a new
// namespace before the default account exists is admitted once the
// account appears within the retry window, and refused when it never
// does.
func TestServiceAccountAdmissionWaitsForDefault(t *testing.T) {
	e := newTestEnv(t)
	for _, ns := range []string{"late", "never"} {
		if _, err := e.cs.CoreV1().Namespaces().Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "busybox"}}}}
	if _, err := e.cs.CoreV1().Pods("never").Create(e.ctx, pod, metav1.CreateOptions{}); !apierrors.IsForbidden(err) ||
		err.Error() != `pods "p" is forbidden: error looking up service account never/default: serviceaccount "default" not found` {
		t.Fatalf("pod without a default account: %v", err)
	}
	created := make(chan error, 1)
	go func() {
		_, err := e.cs.CoreV1().Pods("late").Create(e.ctx, pod, metav1.CreateOptions{})
		created <- err
	}()
	// The create is refused only after ten lookups at least 100 ms
	// apart, so an account created now lands inside the window.
	if _, err := e.cs.CoreV1().ServiceAccounts("late").Create(e.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := <-created; err != nil {
		t.Fatalf("pod created while the default account appeared: %v", err)
	}
}

func TestBootstrapDefaultServiceAccounts(t *testing.T) {
	e := newTestEnv(t)
	for _, ns := range systemNamespaces {
		if _, err := e.cs.CoreV1().ServiceAccounts(ns).Get(e.ctx, "default", metav1.GetOptions{}); err != nil {
			t.Errorf("namespace %s: %v", ns, err)
		}
	}
}
