package core

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func ptr[T any](v T) *T { return &v }

// Each case is one way a pod could name a path outside its volume, or a
// value the kubelet cannot use, with kube-apiserver's error for it.
func TestValidateVolumesRefusesEscapes(t *testing.T) {
	cm := func(items ...corev1.KeyToPath) corev1.VolumeSource {
		return corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}, Items: items}}
	}
	for _, tc := range []struct {
		name string
		src  corev1.VolumeSource
		want string // "" for valid
	}{
		{"configMap item", cm(corev1.KeyToPath{Key: "k", Path: "a/b"}), ""},
		{"configMap item with ..", cm(corev1.KeyToPath{Key: "k", Path: "../../etc/passwd"}), `v[0].configMap.items[0].path: Invalid value: "../../etc/passwd": must not contain '..'`},
		{"configMap item absolute", cm(corev1.KeyToPath{Key: "k", Path: "/etc/passwd"}), `v[0].configMap.items[0].path: Invalid value: "/etc/passwd": must be a relative path`},
		{"configMap item reserved", cm(corev1.KeyToPath{Key: "k", Path: "..data"}), `v[0].configMap.items[0].path: Invalid value: "..data": must not start with '..'`},
		{"configMap item mode", cm(corev1.KeyToPath{Key: "k", Path: "a", Mode: ptr(int32(0o1777))}), `v[0].configMap.items[0].mode: Invalid value: 1023: must be a number between 0 and 0777 (octal), both inclusive`},
		{"secret default mode", corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s", DefaultMode: ptr(int32(-1))}}, `v[0].secret.defaultMode: Invalid value: -1: must be a number between 0 and 0777`},
		{"secret item", corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s", Items: []corev1.KeyToPath{{Key: "k", Path: "x/../../y"}}}}, `v[0].secret.items[0].path: Invalid value: "x/../../y": must not contain '..'`},
		{"downwardAPI path", corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{{Path: "../labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}}, `v[0].downwardAPI.items[0].path: Invalid value: "../labels": must not contain '..'`},
		{"projected token path", corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "/tmp/token"}}}}}, `v[0].projected.sources[0].serviceAccountToken.path: Invalid value: "/tmp/token": must be a relative path`},
		{"projected configMap path", corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}, Items: []corev1.KeyToPath{{Key: "k", Path: ".."}}}}}}}, `v[0].projected.sources[0].configMap.items[0].path: Invalid value: "..": must not contain '..'`},
		{"projected duplicate paths", corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "t"}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}, Items: []corev1.KeyToPath{{Key: "k", Path: "t"}}}},
		}}}, `v[0].projected.sources[1].configMap.items[0].path: Invalid value: "t": conflicting duplicate paths`},
		{"hostPath type", corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/srv", Type: ptr(corev1.HostPathType("Folder"))}}, `v[0].hostPath.type: Unsupported value: "Folder"`},
		{"hostPath with ..", corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/srv/../etc"}}, `v[0].hostPath.path: Invalid value: "/srv/../etc": must not contain '..'`},
		{"hostPath", corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/srv", Type: ptr(corev1.HostPathDirectoryOrCreate)}}, ""},
		{"two sources", corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}, HostPath: &corev1.HostPathVolumeSource{Path: "/srv"}}, `v[0].hostPath: Forbidden: may not specify more than 1 volume type`},
		{"no source", corev1.VolumeSource{}, `v[0]: Required value: must specify a volume type`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			names, errs := ValidateVolumes([]corev1.Volume{{Name: "v", VolumeSource: tc.src}}, field.NewPath("v"))
			got := errs.ToAggregate()
			switch {
			case tc.want == "" && got != nil:
				t.Fatalf("valid volume refused: %v", got)
			case tc.want != "" && (got == nil || !strings.Contains(got.Error(), tc.want)):
				t.Fatalf("got %v, want an error containing %q", got, tc.want)
			case tc.want == "" && !names.Has("v"):
				t.Fatalf("valid volume's name not returned")
			case tc.want != "" && names.Has("v"):
				t.Fatalf("invalid volume's name returned as valid")
			}
		})
	}
}

func TestValidateVolumeMountsRefusesEscapes(t *testing.T) {
	vols := sets.New("data")
	for _, tc := range []struct {
		name  string
		mount corev1.VolumeMount
		want  string
	}{
		{"subPath", corev1.VolumeMount{Name: "data", MountPath: "/d", SubPath: "a/b"}, ""},
		{"subPathExpr", corev1.VolumeMount{Name: "data", MountPath: "/d", SubPathExpr: "$(POD_NAME)"}, ""},
		{"subPath traversal", corev1.VolumeMount{Name: "data", MountPath: "/d", SubPath: "../../../../../../../../tmp/target"}, `m[0].subPath: Invalid value: "../../../../../../../../tmp/target": must not contain '..'`},
		{"subPath absolute", corev1.VolumeMount{Name: "data", MountPath: "/d", SubPath: "/etc"}, `m[0].subPath: Invalid value: "/etc": must be a relative path`},
		{"subPathExpr traversal", corev1.VolumeMount{Name: "data", MountPath: "/d", SubPathExpr: "$(X)/../.."}, `m[0].subPathExpr: Invalid value: "$(X)/../..": must not contain '..'`},
		{"both", corev1.VolumeMount{Name: "data", MountPath: "/d", SubPath: "a", SubPathExpr: "b"}, `m[0].subPathExpr: Invalid value: "b": subPathExpr and subPath are mutually exclusive`},
		{"unknown volume", corev1.VolumeMount{Name: "other", MountPath: "/d"}, `m[0].name: Not found: "other"`},
		{"no mountPath", corev1.VolumeMount{Name: "data"}, `m[0].mountPath: Required value`},
		{"propagation", corev1.VolumeMount{Name: "data", MountPath: "/d", MountPropagation: ptr(corev1.MountPropagationMode("Shared"))}, `m[0].mountPropagation: Unsupported value: "Shared"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ValidateVolumeMounts([]corev1.VolumeMount{tc.mount}, vols, field.NewPath("m")).ToAggregate()
			if tc.want == "" && got != nil {
				t.Fatalf("valid mount refused: %v", got)
			}
			if tc.want != "" && (got == nil || !strings.Contains(got.Error(), tc.want)) {
				t.Fatalf("got %v, want an error containing %q", got, tc.want)
			}
		})
	}
	dup := []corev1.VolumeMount{{Name: "data", MountPath: "/d"}, {Name: "data", MountPath: "/d"}}
	if got := ValidateVolumeMounts(dup, vols, field.NewPath("m")).ToAggregate(); got == nil || !strings.Contains(got.Error(), `m[1].mountPath: Invalid value: "/d": must be unique`) {
		t.Fatalf("duplicate mountPath: %v", got)
	}
}

func TestValidateHostPortsReserved(t *testing.T) {
	reserved := []ReservedPort{{Port: 6443, Protocol: corev1.ProtocolTCP, For: "the API server"}, {Port: 53, Protocol: corev1.ProtocolUDP, For: "cluster DNS"}}
	for _, tc := range []struct {
		name string
		spec corev1.PodSpec
		want string
	}{
		{"hostPort on the API port", corev1.PodSpec{Containers: []corev1.Container{{Ports: []corev1.ContainerPort{{ContainerPort: 80, HostPort: 6443, Protocol: corev1.ProtocolTCP}}}}},
			`s.containers[0].ports[0].hostPort: Forbidden: port 6443/TCP of the node is reserved for the API server`},
		{"hostPort with the protocol unset", corev1.PodSpec{Containers: []corev1.Container{{Ports: []corev1.ContainerPort{{ContainerPort: 80, HostPort: 6443}}}}},
			`port 6443/TCP of the node is reserved`},
		{"hostPort 53 UDP in an init container", corev1.PodSpec{InitContainers: []corev1.Container{{Ports: []corev1.ContainerPort{{ContainerPort: 53, HostPort: 53, Protocol: corev1.ProtocolUDP}}}}},
			`s.initContainers[0].ports[0].hostPort: Forbidden: port 53/UDP of the node is reserved for cluster DNS`},
		{"host network container port", corev1.PodSpec{HostNetwork: true, Containers: []corev1.Container{{Ports: []corev1.ContainerPort{{ContainerPort: 6443, Protocol: corev1.ProtocolTCP}}}}},
			`s.containers[0].ports[0].containerPort: Forbidden: port 6443/TCP`},
		{"same number, other protocol", corev1.PodSpec{Containers: []corev1.Container{{Ports: []corev1.ContainerPort{{ContainerPort: 80, HostPort: 6443, Protocol: corev1.ProtocolUDP}}}}}, ""},
		{"container port only", corev1.PodSpec{Containers: []corev1.Container{{Ports: []corev1.ContainerPort{{ContainerPort: 6443, Protocol: corev1.ProtocolTCP}}}}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ValidateHostPorts(&tc.spec, reserved, field.NewPath("s")).ToAggregate()
			if tc.want == "" && got != nil {
				t.Fatalf("allowed port refused: %v", got)
			}
			if tc.want != "" && (got == nil || !strings.Contains(got.Error(), tc.want)) {
				t.Fatalf("got %v, want an error containing %q", got, tc.want)
			}
		})
	}
}

func TestValidateSecurityProfiles(t *testing.T) {
	local := func(p string) *string { return &p }
	for _, tc := range []struct {
		name string
		sc   *corev1.SecurityContext
		want string
	}{
		{"runtime default", &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}, ""},
		{"localhost", &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: local("profiles/audit.json")}}, ""},
		{"localhost traversal", &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: local("../../etc/shadow")}},
			`s.containers[0].securityContext.seccompProfile.localhostProfile: Invalid value: "../../etc/shadow": must not contain '..'`},
		{"localhost absolute", &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: local("/etc/p.json")}}, "must be a relative path"},
		{"localhost unset", &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost}}, "localhostProfile: Required value: must be set when seccomp type is Localhost"},
		{"profile without localhost", &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault, LocalhostProfile: local("p")}}, "can only be set when seccomp type is Localhost"},
		{"seccomp type", &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: "Strict"}}, `seccompProfile.type: Unsupported value: "Strict"`},
		{"seccomp no type", &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{}}, "type is required when seccompProfile is set"},
		{"apparmor localhost", &corev1.SecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: local("k8s-nginx")}}, ""},
		{"apparmor localhost unset", &corev1.SecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost}}, "must be set when AppArmor type is Localhost"},
		{"apparmor padded", &corev1.SecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: local(" p")}}, "must not be padded with whitespace"},
		{"apparmor type", &corev1.SecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: "Complain"}}, `appArmorProfile.type: Unsupported value: "Complain"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "c", SecurityContext: tc.sc}}}
			got := ValidateSecurityProfiles(&spec, field.NewPath("s")).ToAggregate()
			if tc.want == "" && got != nil {
				t.Fatalf("valid profile refused: %v", got)
			}
			if tc.want != "" && (got == nil || !strings.Contains(got.Error(), tc.want)) {
				t.Fatalf("got %v, want an error containing %q", got, tc.want)
			}
		})
	}
	pod := corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: local("../x")}}}
	if got := ValidateSecurityProfiles(&pod, field.NewPath("s")).ToAggregate(); got == nil || !strings.Contains(got.Error(), "s.securityContext.seccompProfile.localhostProfile") {
		t.Fatalf("pod-level profile: %v", got)
	}
}

// The podCertificate projection's rules, with kube-apiserver's errors
// (the conformance suite checks the 91-day bound's message).
func TestValidatePodCertificateProjection(t *testing.T) {
	pc := func(f func(*corev1.PodCertificateProjection)) []corev1.Volume {
		p := &corev1.PodCertificateProjection{SignerName: "example.com/signer", KeyType: "ED25519", CredentialBundlePath: "creds.pem"}
		f(p)
		return []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{PodCertificate: p}}}}}}
	}
	for _, tc := range []struct {
		name string
		vols []corev1.Volume
		want string // "" for valid
	}{
		{"valid", pc(func(p *corev1.PodCertificateProjection) { p.MaxExpirationSeconds = ptr(int32(91 * 24 * 3600)) }), ""},
		{"longer than 91 days", pc(func(p *corev1.PodCertificateProjection) { p.MaxExpirationSeconds = ptr(int32(91*24*3600 + 1)) }),
			`v[0].projected.sources[0].podCertificate.maxExpirationSeconds: Invalid value: 7862401: if provided, maxExpirationSeconds must be <= 7862400`},
		{"kubernetes.io signer longer than a day", pc(func(p *corev1.PodCertificateProjection) {
			p.SignerName, p.MaxExpirationSeconds = "kubernetes.io/kube-apiserver-client-pod", ptr(int32(86401))
		}), `maxExpirationSeconds: Invalid value: 86401: if provided, maxExpirationSeconds must be <= 86400`},
		{"shorter than an hour", pc(func(p *corev1.PodCertificateProjection) { p.MaxExpirationSeconds = ptr(int32(3599)) }),
			`maxExpirationSeconds: Invalid value: 3599: if provided, maxExpirationSeconds must be >= 3600`},
		{"no signer", pc(func(p *corev1.PodCertificateProjection) { p.SignerName = "" }), `podCertificate.signerName: Required value`},
		{"key type", pc(func(p *corev1.PodCertificateProjection) { p.KeyType = "DSA" }), `podCertificate.keyType: Unsupported value: "DSA"`},
		{"no path", pc(func(p *corev1.PodCertificateProjection) { p.CredentialBundlePath = "" }), `specify at least one of credentialBundlePath, keyPath, and certificateChainPath`},
		{"path escapes", pc(func(p *corev1.PodCertificateProjection) { p.KeyPath = "../key" }), `podCertificate.keyPath: Invalid value: "../key": must not contain '..'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errs := ValidateVolumes(tc.vols, field.NewPath("v"))
			got := errs.ToAggregate()
			switch {
			case tc.want == "" && got != nil:
				t.Fatalf("refused: %v", got)
			case tc.want != "" && (got == nil || !strings.Contains(got.Error(), tc.want)):
				t.Fatalf("error %v, want it to contain %q", got, tc.want)
			}
		})
	}
}

// Sysctl names as kube-apiserver checks them: the conformance suite's
// case (two malformed names refused, a well-formed unknown one and a
// known one let through to the kubelet), and the host-namespace rules.
func TestValidateSysctls(t *testing.T) {
	spec := func(hostNet, hostIPC bool, names ...string) *corev1.PodSpec {
		s := &corev1.PodSpec{HostNetwork: hostNet, HostIPC: hostIPC, SecurityContext: &corev1.PodSecurityContext{}}
		for _, n := range names {
			s.SecurityContext.Sysctls = append(s.SecurityContext.Sysctls, corev1.Sysctl{Name: n, Value: "1"})
		}
		return s
	}
	p := field.NewPath("spec", "securityContext", "sysctls")
	got := ValidateSysctls(spec(false, false, "foo-", "kernel.shmmax", "safe-and-unsafe", "bar.."), p).ToAggregate()
	if got == nil {
		t.Fatal("malformed sysctl names accepted")
	}
	for _, want := range []string{`spec.securityContext.sysctls[0].name: Invalid value: "foo-"`, `spec.securityContext.sysctls[3].name: Invalid value: "bar.."`} {
		if !strings.Contains(got.Error(), want) {
			t.Errorf("error %v, want it to contain %q", got, want)
		}
	}
	for _, not := range []string{"safe-and-unsafe", "kernel.shmmax"} {
		if strings.Contains(got.Error(), not) {
			t.Errorf("error %v refuses the well-formed %q", got, not)
		}
	}
	for _, tc := range []struct {
		spec *corev1.PodSpec
		want string
	}{
		{spec(false, false, "net.ipv4.ip_forward", "kernel/shm_rmid_forced"), ""},
		{spec(false, false, "net.core.somaxconn", "net.core.somaxconn"), `sysctls[1].name: Duplicate value: "net.core.somaxconn"`},
		{spec(false, false, ""), `sysctls[0].name: Required value`},
		{spec(true, false, "net.ipv4.ip_forward"), `may not be specified when 'hostNetwork' is true`},
		{spec(false, true, "kernel.shmmax"), `may not be specified when 'hostIPC' is true`},
		{spec(true, false, "kernel.shmmax"), ""},
	} {
		got := ValidateSysctls(tc.spec, p).ToAggregate()
		switch {
		case tc.want == "" && got != nil:
			t.Errorf("%v refused: %v", tc.spec.SecurityContext.Sysctls, got)
		case tc.want != "" && (got == nil || !strings.Contains(got.Error(), tc.want)):
			t.Errorf("%v: error %v, want it to contain %q", tc.spec.SecurityContext.Sysctls, got, tc.want)
		}
	}
}
