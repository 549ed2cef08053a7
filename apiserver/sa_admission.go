package apiserver

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Names the ServiceAccount admission plugin uses, as upstream.
const (
	defaultServiceAccountName = "default"
	// serviceAccountVolumePrefix starts the name of the projected volume
	// the plugin adds ("kube-api-access-xxxxx").
	serviceAccountVolumePrefix = "kube-api-access-"
	// defaultAPITokenMountPath is where every container finds its token,
	// the cluster CA and its namespace: client-go's in-cluster config
	// reads them there.
	defaultAPITokenMountPath = "/var/run/secrets/kubernetes.io/serviceaccount"
	mirrorPodAnnotation      = "kubernetes.io/config.mirror"
	// rootCACertConfigMapName is the ConfigMap in every namespace that
	// holds the cluster CA (controllers/serviceaccount publishes it).
	rootCACertConfigMapName = "kube-root-ca.crt"
)

// admitPodServiceAccount is kube-apiserver's ServiceAccount admission for
// a pod being created: it names the default account when the pod names
// none, refuses an account that does not exist, copies the account's
// image pull secrets, and, unless the pod or the account opts out, mounts
// a projected token volume into every container. Mirror pods are not
// changed, only checked.
func (s *Server) admitPodServiceAccount(ctx context.Context, pod *corev1.Pod, generatedName bool) error {
	if pod.Spec.ServiceAccountName == "" {
		// Old clients set only the deprecated field; conversion from v1
		// reads it.
		pod.Spec.ServiceAccountName = pod.Spec.DeprecatedServiceAccount
	}
	if _, mirror := pod.Annotations[mirrorPodAnnotation]; mirror {
		return validateMirrorPod(pod, generatedName)
	}
	if pod.Spec.ServiceAccountName == "" {
		pod.Spec.ServiceAccountName = defaultServiceAccountName
	}
	sa, err := s.lookupServiceAccount(ctx, pod.Namespace, pod.Spec.ServiceAccountName)
	if err != nil {
		return podForbidden(pod, generatedName, fmt.Errorf("error looking up service account %s/%s: %w", pod.Namespace, pod.Spec.ServiceAccountName, err))
	}
	if shouldAutomount(sa, pod) {
		mountServiceAccountToken(pod)
	}
	if len(pod.Spec.ImagePullSecrets) == 0 {
		for _, ref := range sa.ImagePullSecrets {
			pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: ref.Name})
		}
	}
	return nil
}

// podForbidden is admission's 403, naming the pod, or its generateName
// when the name was generated: kube-apiserver generates names after
// admission.
func podForbidden(pod *corev1.Pod, generatedName bool, err error) error {
	name := pod.Name
	if generatedName {
		name = pod.GenerateName
	}
	return apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, name, err)
}

// lookupServiceAccount reads the account, retrying the default one for a
// little while: the serviceaccount controller creates it just after its
// namespace, and a pod created right then should not fail.
func (s *Server) lookupServiceAccount(ctx context.Context, namespace, name string) (*corev1.ServiceAccount, error) {
	res := s.reg.byGVR[gvr("", "v1", "serviceaccounts")]
	attempts := 1
	if name == defaultServiceAccountName {
		attempts = 10
	}
	interval := time.Duration(100+rand.IntN(100)) * time.Millisecond
	for i := 0; i < attempts; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(interval):
			}
		}
		obj, _, err := s.getObject(ctx, res, namespace, name)
		if err == nil {
			return obj.(*corev1.ServiceAccount), nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, err
		}
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "serviceaccount"}, name)
}

// shouldAutomount: the pod's choice wins, then the account's; the default
// is to mount.
func shouldAutomount(sa *corev1.ServiceAccount, pod *corev1.Pod) bool {
	if pod.Spec.AutomountServiceAccountToken != nil {
		return *pod.Spec.AutomountServiceAccountToken
	}
	if sa.AutomountServiceAccountToken != nil {
		return *sa.AutomountServiceAccountToken
	}
	return true
}

// mountServiceAccountToken mounts the token volume read-only at
// defaultAPITokenMountPath in every init container and container that
// has nothing mounted there, adding the volume if one of them needs it
// and the pod has none yet.
func mountServiceAccountToken(pod *corev1.Pod) {
	volumeName, hasVolume := "", false
	for _, v := range pod.Spec.Volumes {
		if strings.HasPrefix(v.Name, serviceAccountVolumePrefix) {
			volumeName, hasVolume = v.Name, true
			break
		}
	}
	if volumeName == "" {
		volumeName = generateName(serviceAccountVolumePrefix)
	}
	mount := corev1.VolumeMount{Name: volumeName, ReadOnly: true, MountPath: defaultAPITokenMountPath}
	needsVolume := false
	for _, containers := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range containers {
			if !mountsPath(&containers[i], defaultAPITokenMountPath) {
				containers[i].VolumeMounts = append(containers[i].VolumeMounts, mount)
				needsVolume = true
			}
		}
	}
	if needsVolume && !hasVolume {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: volumeName, VolumeSource: corev1.VolumeSource{Projected: tokenVolumeSource()}})
	}
}

func mountsPath(c *corev1.Container, path string) bool {
	for _, m := range c.VolumeMounts {
		if m.MountPath == path {
			return true
		}
	}
	return false
}

// tokenVolumeSource is the projected volume of an automounted token: the
// token, the cluster CA and the namespace, where rest.InClusterConfig
// looks for them.
func tokenVolumeSource() *corev1.ProjectedVolumeSource {
	return &corev1.ProjectedVolumeSource{
		DefaultMode: ptrTo(corev1.ProjectedVolumeSourceDefaultMode),
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptrTo[int64](legacyTokenExpirationSeconds)}},
			{ConfigMap: &corev1.ConfigMapProjection{
				LocalObjectReference: corev1.LocalObjectReference{Name: rootCACertConfigMapName},
				Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
			}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}},
			}}},
		},
	}
}

// validateMirrorPod refuses mirror pods that would need the API's
// credentials: the kubelet runs static pods without any.
func validateMirrorPod(pod *corev1.Pod, generatedName bool) error {
	if pod.Spec.ServiceAccountName != "" {
		return podForbidden(pod, generatedName, errors.New("a mirror pod may not reference service accounts"))
	}
	if podReferencesSecrets(pod) {
		return podForbidden(pod, generatedName, errors.New("a mirror pod may not reference secrets"))
	}
	for _, v := range pod.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if src.ServiceAccountToken != nil {
				return podForbidden(pod, generatedName, errors.New("a mirror pod may not use ServiceAccountToken volume projections"))
			}
		}
	}
	return nil
}

// podReferencesConfigMaps: configMap volumes and projections, and
// configMap env sources of any container.
func podReferencesConfigMaps(pod *corev1.Pod) bool {
	for _, v := range pod.Spec.Volumes {
		if v.ConfigMap != nil {
			return true
		}
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				if src.ConfigMap != nil {
					return true
				}
			}
		}
	}
	for _, c := range allContainers(pod) {
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
				return true
			}
		}
		for _, f := range c.EnvFrom {
			if f.ConfigMapRef != nil {
				return true
			}
		}
	}
	return false
}

// allContainers is every container of the pod with its env, ephemeral
// ones included.
func allContainers(pod *corev1.Pod) []corev1.Container {
	out := append(append([]corev1.Container(nil), pod.Spec.InitContainers...), pod.Spec.Containers...)
	for _, e := range pod.Spec.EphemeralContainers {
		out = append(out, corev1.Container{Env: e.Env, EnvFrom: e.EnvFrom})
	}
	return out
}

// podReferencesSecrets: image pull secrets, secret volumes and
// projections, and secret env sources of any container.
func podReferencesSecrets(pod *corev1.Pod) bool {
	if len(pod.Spec.ImagePullSecrets) > 0 {
		return true
	}
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil {
			return true
		}
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				if src.Secret != nil {
					return true
				}
			}
		}
	}
	for _, c := range allContainers(pod) {
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				return true
			}
		}
		for _, f := range c.EnvFrom {
			if f.SecretRef != nil {
				return true
			}
		}
	}
	return false
}
