// Package core holds the kinds of the core ("" group): their strategies,
// validation, defaults, table columns and field selectors (core.go lists
// them), and the pod spec rules the workload groups share.
//
// It must not import the API server: what a rule needs comes through
// registry.WriteCtx or as an argument.
package core

import (
	"fmt"
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// fileModeErrorMsg is kube-apiserver's message for a mode out of range.
const fileModeErrorMsg = "must be a number between 0 and 0777 (octal), both inclusive"

var hostPathTypes = sets.New(
	string(corev1.HostPathUnset), string(corev1.HostPathDirectoryOrCreate), string(corev1.HostPathDirectory),
	string(corev1.HostPathFileOrCreate), string(corev1.HostPathFile), string(corev1.HostPathSocket),
	string(corev1.HostPathCharDev), string(corev1.HostPathBlockDev))

// ValidateVolumes checks a pod's volumes as kube-apiserver does: names,
// one source each, and every path a pod supplies for a file the kubelet
// writes (items, downwardAPI and projected paths), so none can leave its
// volume. It returns the valid volumes' names for the mounts' check.
func ValidateVolumes(vols []corev1.Volume, p *field.Path) (sets.Set[string], field.ErrorList) {
	var errs field.ErrorList
	names := sets.New[string]()
	for i := range vols {
		v := &vols[i]
		vp := p.Index(i)
		el := validateVolumeSource(&v.VolumeSource, vp)
		np := vp.Child("name")
		if v.Name == "" {
			el = append(el, field.Required(np, ""))
		} else {
			for _, msg := range validation.IsDNS1123Label(v.Name) {
				el = append(el, field.Invalid(np, v.Name, msg))
			}
		}
		if names.Has(v.Name) {
			el = append(el, field.Duplicate(np, v.Name))
		}
		if len(el) == 0 {
			names.Insert(v.Name)
		}
		errs = append(errs, el...)
	}
	return names, errs
}

func validateVolumeSource(s *corev1.VolumeSource, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	n := 0
	one := func(name string, check func(*field.Path) field.ErrorList) {
		if n > 0 {
			errs = append(errs, field.Forbidden(p.Child(name), "may not specify more than 1 volume type"))
			return
		}
		n++
		if check != nil {
			errs = append(errs, check(p.Child(name))...)
		}
	}
	if s.EmptyDir != nil {
		one("emptyDir", nil)
	}
	if s.HostPath != nil {
		one("hostPath", func(fp *field.Path) field.ErrorList { return validateHostPath(s.HostPath, fp) })
	}
	if s.Secret != nil {
		one("secret", func(fp *field.Path) field.ErrorList {
			var errs field.ErrorList
			if s.Secret.SecretName == "" {
				errs = append(errs, field.Required(fp.Child("secretName"), ""))
			}
			errs = append(errs, validateMode(s.Secret.DefaultMode, fp.Child("defaultMode"))...)
			return append(errs, validateItems(s.Secret.Items, fp.Child("items"))...)
		})
	}
	if s.ConfigMap != nil {
		one("configMap", func(fp *field.Path) field.ErrorList {
			var errs field.ErrorList
			if s.ConfigMap.Name == "" {
				errs = append(errs, field.Required(fp.Child("name"), ""))
			}
			errs = append(errs, validateMode(s.ConfigMap.DefaultMode, fp.Child("defaultMode"))...)
			return append(errs, validateItems(s.ConfigMap.Items, fp.Child("items"))...)
		})
	}
	if s.DownwardAPI != nil {
		one("downwardAPI", func(fp *field.Path) field.ErrorList {
			errs := validateMode(s.DownwardAPI.DefaultMode, fp.Child("defaultMode"))
			return append(errs, validateDownwardItems(s.DownwardAPI.Items, fp.Child("items"))...)
		})
	}
	if s.Projected != nil {
		one("projected", func(fp *field.Path) field.ErrorList { return validateProjected(s.Projected, fp) })
	}
	if s.PersistentVolumeClaim != nil {
		one("persistentVolumeClaim", func(fp *field.Path) field.ErrorList {
			if s.PersistentVolumeClaim.ClaimName == "" {
				return field.ErrorList{field.Required(fp.Child("claimName"), "")}
			}
			return nil
		})
	}
	if s.Ephemeral != nil {
		one("ephemeral", func(fp *field.Path) field.ErrorList {
			if s.Ephemeral.VolumeClaimTemplate == nil {
				return field.ErrorList{field.Required(fp.Child("volumeClaimTemplate"), "")}
			}
			return nil
		})
	}
	// The sources this node cannot mount are still valid objects, as
	// kube-apiserver stores them; the kubelet refuses them with an event.
	for _, o := range []struct {
		name string
		set  bool
	}{
		{"gitRepo", s.GitRepo != nil}, {"nfs", s.NFS != nil}, {"iscsi", s.ISCSI != nil}, {"glusterfs", s.Glusterfs != nil},
		{"rbd", s.RBD != nil}, {"flexVolume", s.FlexVolume != nil}, {"cinder", s.Cinder != nil}, {"cephfs", s.CephFS != nil},
		{"flocker", s.Flocker != nil}, {"fc", s.FC != nil}, {"azureFile", s.AzureFile != nil}, {"vsphereVolume", s.VsphereVolume != nil},
		{"quobyte", s.Quobyte != nil}, {"azureDisk", s.AzureDisk != nil}, {"photonPersistentDisk", s.PhotonPersistentDisk != nil},
		{"portworxVolume", s.PortworxVolume != nil}, {"scaleIO", s.ScaleIO != nil}, {"storageos", s.StorageOS != nil},
		{"csi", s.CSI != nil}, {"gcePersistentDisk", s.GCEPersistentDisk != nil}, {"awsElasticBlockStore", s.AWSElasticBlockStore != nil},
		{"image", s.Image != nil},
	} {
		if o.set {
			one(o.name, nil)
		}
	}
	if s.GitRepo != nil {
		errs = append(errs, validateLocalDescendingPath(s.GitRepo.Directory, p.Child("gitRepo", "directory"))...)
	}
	if n == 0 {
		errs = append(errs, field.Required(p, "must specify a volume type"))
	}
	return errs
}

func validateHostPath(hp *corev1.HostPathVolumeSource, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if hp.Path == "" {
		errs = append(errs, field.Required(p.Child("path"), ""))
	}
	errs = append(errs, validatePathNoBacksteps(hp.Path, p.Child("path"))...)
	if hp.Type != nil && !hostPathTypes.Has(string(*hp.Type)) {
		errs = append(errs, field.NotSupported(p.Child("type"), *hp.Type, sets.List(hostPathTypes)))
	}
	return errs
}

func validateMode(mode *int32, p *field.Path) field.ErrorList {
	if mode != nil && (*mode > 0o777 || *mode < 0) {
		return field.ErrorList{field.Invalid(p, *mode, fileModeErrorMsg)}
	}
	return nil
}

func validateItems(items []corev1.KeyToPath, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, kp := range items {
		ip := p.Index(i)
		if kp.Key == "" {
			errs = append(errs, field.Required(ip.Child("key"), ""))
		}
		if kp.Path == "" {
			errs = append(errs, field.Required(ip.Child("path"), ""))
		}
		errs = append(errs, ValidateLocalNonReservedPath(kp.Path, ip.Child("path"))...)
		errs = append(errs, validateMode(kp.Mode, ip.Child("mode"))...)
	}
	return errs
}

func validateDownwardItems(items []corev1.DownwardAPIVolumeFile, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, f := range items {
		ip := p.Index(i)
		if f.Path == "" {
			errs = append(errs, field.Required(ip.Child("path"), ""))
		}
		errs = append(errs, ValidateLocalNonReservedPath(f.Path, ip.Child("path"))...)
		errs = append(errs, validateMode(f.Mode, ip.Child("mode"))...)
		switch {
		case f.FieldRef != nil && f.ResourceFieldRef != nil:
			errs = append(errs, field.Invalid(ip, "resource", "fieldRef and resourceFieldRef can not be specified simultaneously"))
		case f.FieldRef == nil && f.ResourceFieldRef == nil:
			errs = append(errs, field.Required(ip, "one of fieldRef and resourceFieldRef is required"))
		}
	}
	return errs
}

func validateProjected(pr *corev1.ProjectedVolumeSource, p *field.Path) field.ErrorList {
	errs := validateMode(pr.DefaultMode, p.Child("defaultMode"))
	paths := sets.New[string]()
	seen := func(sp *field.Path, paths2 ...string) {
		for _, x := range paths2 {
			if paths.Has(x) {
				errs = append(errs, field.Invalid(sp, x, "conflicting duplicate paths"))
			}
			paths.Insert(x)
		}
	}
	for i, src := range pr.Sources {
		sp := p.Child("sources").Index(i)
		n := 0
		// A secret or configMap projection: a name, and items whose
		// paths are the volume's.
		keys := func(kind, name string, items []corev1.KeyToPath) {
			n++
			fp := sp.Child(kind)
			if name == "" {
				errs = append(errs, field.Required(fp.Child("name"), ""))
			}
			errs = append(errs, validateItems(items, fp.Child("items"))...)
			for j, it := range items {
				seen(fp.Child("items").Index(j).Child("path"), it.Path)
			}
		}
		if src.Secret != nil {
			keys("secret", src.Secret.Name, src.Secret.Items)
		}
		if src.ConfigMap != nil {
			keys("configMap", src.ConfigMap.Name, src.ConfigMap.Items)
		}
		if src.DownwardAPI != nil {
			n++
			fp := sp.Child("downwardAPI")
			errs = append(errs, validateDownwardItems(src.DownwardAPI.Items, fp.Child("items"))...)
			for j, it := range src.DownwardAPI.Items {
				seen(fp.Child("items").Index(j).Child("path"), it.Path)
			}
		}
		if t := src.ServiceAccountToken; t != nil {
			n++
			fp := sp.Child("serviceAccountToken")
			if t.ExpirationSeconds != nil {
				if *t.ExpirationSeconds < 10*60 {
					errs = append(errs, field.Invalid(fp.Child("expirationSeconds"), *t.ExpirationSeconds, "may not specify a duration less than 10 minutes"))
				}
				if *t.ExpirationSeconds > 1<<32 {
					errs = append(errs, field.Invalid(fp.Child("expirationSeconds"), *t.ExpirationSeconds, "may not specify a duration larger than 2^32 seconds"))
				}
			}
			if t.Path == "" {
				errs = append(errs, field.Required(fp.Child("path"), ""))
			}
			errs = append(errs, ValidateLocalNonReservedPath(t.Path, fp.Child("path"))...)
			seen(fp.Child("path"), t.Path)
		}
		if pc := src.PodCertificate; pc != nil {
			n++
			errs = append(errs, validatePodCertificateProjection(pc, sp.Child("podCertificate"), seen)...)
		}
		if src.ClusterTrustBundle != nil {
			n++
			fp := sp.Child("clusterTrustBundle")
			errs = append(errs, ValidateLocalNonReservedPath(src.ClusterTrustBundle.Path, fp.Child("path"))...)
			seen(fp.Child("path"), src.ClusterTrustBundle.Path)
		}
		if n > 1 {
			errs = append(errs, field.Forbidden(sp, "may not specify more than 1 volume type per source"))
		}
	}
	return errs
}

// Bounds of a podCertificate projection's maxExpirationSeconds, as
// kube-apiserver has them: an hour at least, 91 days at most, a day at
// most for the signers of kubernetes.io.
const (
	minPodCertificateExpiration           = 3600
	maxPodCertificateExpiration           = 91 * 24 * 60 * 60
	maxKubernetesPodCertificateExpiration = 24 * 60 * 60
)

var podCertificateKeyTypes = []string{"RSA3072", "RSA4096", "ECDSAP256", "ECDSAP384", "ECDSAP521", "ED25519"}

// validatePodCertificateProjection checks a podCertificate projection as
// kube-apiserver does: a signer of the form <domain>/<path>, a supported
// key type, the expiration bounds, and local paths that no other source
// of the volume writes.
func validatePodCertificateProjection(pc *corev1.PodCertificateProjection, fp *field.Path, seen func(*field.Path, ...string)) field.ErrorList {
	var errs field.ErrorList
	domain, path, ok := strings.Cut(pc.SignerName, "/")
	switch {
	case pc.SignerName == "":
		errs = append(errs, field.Required(fp.Child("signerName"), ""))
	case !ok || domain == "" || path == "":
		errs = append(errs, field.Invalid(fp.Child("signerName"), pc.SignerName, "must be a fully qualified domain and path of the form 'example.com/signer-name'"))
	}
	if !slices.Contains(podCertificateKeyTypes, pc.KeyType) {
		errs = append(errs, field.NotSupported(fp.Child("keyType"), pc.KeyType, podCertificateKeyTypes))
	}
	if m := pc.MaxExpirationSeconds; m != nil {
		if *m < minPodCertificateExpiration {
			errs = append(errs, field.Invalid(fp.Child("maxExpirationSeconds"), *m, fmt.Sprintf("if provided, maxExpirationSeconds must be >= %d", minPodCertificateExpiration)))
		}
		limit := maxPodCertificateExpiration
		if domain == "kubernetes.io" || strings.HasSuffix(domain, ".kubernetes.io") {
			limit = maxKubernetesPodCertificateExpiration
		}
		if int(*m) > limit {
			errs = append(errs, field.Invalid(fp.Child("maxExpirationSeconds"), *m, fmt.Sprintf("if provided, maxExpirationSeconds must be <= %d", limit)))
		}
	}
	paths := 0
	for _, x := range []struct{ name, path string }{
		{"credentialBundlePath", pc.CredentialBundlePath}, {"keyPath", pc.KeyPath}, {"certificateChainPath", pc.CertificateChainPath},
	} {
		if x.path == "" {
			continue
		}
		paths++
		errs = append(errs, ValidateLocalNonReservedPath(x.path, fp.Child(x.name))...)
		seen(fp.Child(x.name), x.path)
	}
	if paths == 0 {
		errs = append(errs, field.Required(fp, "specify at least one of credentialBundlePath, keyPath, and certificateChainPath"))
	}
	return errs
}

// ValidateVolumeMounts checks one container's mounts against the pod's
// volumes: a known volume, an absolute-or-not mountPath that is unique,
// and a subPath or subPathExpr that stays inside its volume.
func ValidateVolumeMounts(mounts []corev1.VolumeMount, volumes sets.Set[string], p *field.Path) field.ErrorList {
	var errs field.ErrorList
	mountPaths := sets.New[string]()
	for i, m := range mounts {
		ip := p.Index(i)
		if m.Name == "" {
			errs = append(errs, field.Required(ip.Child("name"), ""))
		} else if !volumes.Has(m.Name) {
			errs = append(errs, field.NotFound(ip.Child("name"), m.Name))
		}
		if m.MountPath == "" {
			errs = append(errs, field.Required(ip.Child("mountPath"), ""))
		} else if mountPaths.Has(m.MountPath) {
			errs = append(errs, field.Invalid(ip.Child("mountPath"), m.MountPath, "must be unique"))
		}
		mountPaths.Insert(m.MountPath)
		if m.SubPath != "" {
			errs = append(errs, validateLocalDescendingPath(m.SubPath, ip.Child("subPath"))...)
		}
		if m.SubPathExpr != "" {
			if m.SubPath != "" {
				errs = append(errs, field.Invalid(ip.Child("subPathExpr"), m.SubPathExpr, "subPathExpr and subPath are mutually exclusive"))
			}
			errs = append(errs, validateLocalDescendingPath(m.SubPathExpr, ip.Child("subPathExpr"))...)
		}
		if m.MountPropagation != nil {
			switch *m.MountPropagation {
			case corev1.MountPropagationNone, corev1.MountPropagationHostToContainer, corev1.MountPropagationBidirectional:
			default:
				errs = append(errs, field.NotSupported(ip.Child("mountPropagation"), *m.MountPropagation,
					[]string{string(corev1.MountPropagationBidirectional), string(corev1.MountPropagationHostToContainer), string(corev1.MountPropagationNone)}))
			}
		}
	}
	return errs
}

// validateLocalDescendingPath: a relative path with no ".." element.
func validateLocalDescendingPath(target string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if path.IsAbs(target) {
		errs = append(errs, field.Invalid(p, target, "must be a relative path"))
	}
	return append(errs, validatePathNoBacksteps(target, p)...)
}

// validatePathNoBacksteps: no ".." element (one error is enough).
func validatePathNoBacksteps(target string, p *field.Path) field.ErrorList {
	for _, item := range strings.Split(target, "/") {
		if item == ".." {
			return field.ErrorList{field.Invalid(p, target, "must not contain '..'")}
		}
	}
	return nil
}

// ValidateLocalNonReservedPath is a descending path whose first element
// does not start with ".." either: the kubelet keeps its "..data" and
// timestamped directories there.
func ValidateLocalNonReservedPath(target string, p *field.Path) field.ErrorList {
	errs := validateLocalDescendingPath(target, p)
	if strings.HasPrefix(target, "..") && !strings.HasPrefix(target, "../") {
		errs = append(errs, field.Invalid(p, target, "must not start with '..'"))
	}
	return errs
}
