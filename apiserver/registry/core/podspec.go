package core

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The rules of a pod spec and of the workloads that template one: what
// the apps and batch groups share with pods.

// ValidatePodSpec checks a pod spec wherever it is written: a Pod, or
// the template of a workload.
func ValidatePodSpec(s *corev1.PodSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(s.Containers) == 0 {
		errs = append(errs, field.Required(path.Child("containers"), ""))
	}
	names := map[string]bool{}
	check := func(cs []corev1.Container, p *field.Path) {
		for i, c := range cs {
			cp := p.Index(i)
			if c.Name == "" {
				errs = append(errs, field.Required(cp.Child("name"), ""))
			} else {
				for _, msg := range validation.IsDNS1123Label(c.Name) {
					errs = append(errs, field.Invalid(cp.Child("name"), c.Name, msg))
				}
				if names[c.Name] {
					errs = append(errs, field.Duplicate(cp.Child("name"), c.Name))
				}
				names[c.Name] = true
			}
			if c.Image == "" {
				errs = append(errs, field.Required(cp.Child("image"), ""))
			}
			errs = append(errs, validateResources(c.Resources, cp.Child("resources"))...)
			for j, port := range c.Ports {
				pp := cp.Child("ports").Index(j)
				for _, msg := range validation.IsValidPortNum(int(port.ContainerPort)) {
					errs = append(errs, field.Invalid(pp.Child("containerPort"), port.ContainerPort, msg))
				}
				if port.HostPort != 0 {
					for _, msg := range validation.IsValidPortNum(int(port.HostPort)) {
						errs = append(errs, field.Invalid(pp.Child("hostPort"), port.HostPort, msg))
					}
				}
				if port.Name != "" {
					for _, msg := range validation.IsValidPortName(port.Name) {
						errs = append(errs, field.Invalid(pp.Child("name"), port.Name, msg))
					}
				}
				switch port.Protocol {
				case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
				default:
					errs = append(errs, field.NotSupported(pp.Child("protocol"), port.Protocol, []string{"SCTP", "TCP", "UDP"}))
				}
			}
		}
	}
	check(s.InitContainers, path.Child("initContainers"))
	check(s.Containers, path.Child("containers"))
	switch s.RestartPolicy {
	case corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever:
	default:
		errs = append(errs, field.NotSupported(path.Child("restartPolicy"), s.RestartPolicy, []string{"Always", "Never", "OnFailure"}))
	}
	switch s.DNSPolicy {
	case corev1.DNSClusterFirst, corev1.DNSClusterFirstWithHostNet, corev1.DNSDefault, corev1.DNSNone:
	default:
		errs = append(errs, field.NotSupported(path.Child("dnsPolicy"), s.DNSPolicy, []string{"ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"}))
	}
	vols, verrs := ValidateVolumes(s.Volumes, path.Child("volumes"))
	errs = append(errs, verrs...)
	for i, c := range s.InitContainers {
		errs = append(errs, ValidateVolumeMounts(c.VolumeMounts, vols, path.Child("initContainers").Index(i).Child("volumeMounts"))...)
	}
	for i, c := range s.Containers {
		errs = append(errs, ValidateVolumeMounts(c.VolumeMounts, vols, path.Child("containers").Index(i).Child("volumeMounts"))...)
	}
	for i, c := range s.EphemeralContainers {
		errs = append(errs, ValidateVolumeMounts(c.VolumeMounts, vols, path.Child("ephemeralContainers").Index(i).Child("volumeMounts"))...)
	}
	errs = append(errs, ValidateSecurityProfiles(s, path)...)
	errs = append(errs, ValidateSysctls(s, path.Child("securityContext", "sysctls"))...)
	return append(errs, validatePodResourceClaims(s, path)...)
}

// ValidateSelector validates a workload's selector against its template.
func ValidateSelector(sel *metav1.LabelSelector, template map[string]string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if sel == nil {
		return append(errs, field.Required(path.Child("selector"), ""))
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return append(errs, field.Invalid(path.Child("selector"), sel, err.Error()))
	}
	if s.Empty() {
		errs = append(errs, field.Invalid(path.Child("selector"), sel, "empty selector is invalid for deployment"))
	} else if !s.Matches(labels.Set(template)) {
		errs = append(errs, field.Invalid(path.Child("template", "metadata", "labels"), template, "`selector` does not match template `labels`"))
	}
	return errs
}

// ValidateSelectorImmutable refuses a changed selector.
func ValidateSelectorImmutable(sel, old *metav1.LabelSelector, path *field.Path) field.ErrorList {
	if !apiequality.Semantic.DeepEqual(sel, old) {
		return field.ErrorList{field.Invalid(path.Child("selector"), sel, "field is immutable")}
	}
	return nil
}

// ValidateReplicas refuses a negative replica count.
func ValidateReplicas(n *int32, path *field.Path) field.ErrorList {
	if n != nil && *n < 0 {
		return field.ErrorList{field.Invalid(path.Child("replicas"), *n, "must be greater than or equal to 0")}
	}
	return nil
}

// validateResources checks container requests and limits as Kubernetes
// does: no negative quantity, no request above its limit.
func validateResources(r corev1.ResourceRequirements, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, part := range []struct {
		name string
		list corev1.ResourceList
	}{{"limits", r.Limits}, {"requests", r.Requests}} {
		for name, q := range part.list {
			if q.Sign() < 0 {
				errs = append(errs, field.Invalid(path.Child(part.name).Key(string(name)), q.String(), "must be greater than or equal to 0"))
			}
		}
	}
	for name, req := range r.Requests {
		if lim, ok := r.Limits[name]; ok && req.Cmp(lim) > 0 {
			errs = append(errs, field.Invalid(path.Child("requests").Key(string(name)), req.String(), fmt.Sprintf("must be less than or equal to %s limit of %s", name, lim.String())))
		}
	}
	return errs
}

// DefaultPodSpec applies a pod spec's defaults wherever it is written.
func DefaultPodSpec(s *corev1.PodSpec) {
	if s.RestartPolicy == "" {
		s.RestartPolicy = corev1.RestartPolicyAlways
	}
	if s.DNSPolicy == "" {
		s.DNSPolicy = corev1.DNSClusterFirst
	}
	if s.SchedulerName == "" {
		s.SchedulerName = corev1.DefaultSchedulerName
	}
	if s.TerminationGracePeriodSeconds == nil {
		s.TerminationGracePeriodSeconds = ptrTo[int64](corev1.DefaultTerminationGracePeriodSeconds)
	}
	if s.SecurityContext == nil {
		s.SecurityContext = &corev1.PodSecurityContext{}
	}
	if s.EnableServiceLinks == nil {
		s.EnableServiceLinks = ptrTo(corev1.DefaultEnableServiceLinks)
	}
	if s.HostNetwork {
		for i := range s.Containers {
			defaultHostNetworkPorts(s.Containers[i].Ports)
		}
		for i := range s.InitContainers {
			defaultHostNetworkPorts(s.InitContainers[i].Ports)
		}
	}
	for i := range s.InitContainers {
		defaultContainer(&s.InitContainers[i])
	}
	for i := range s.Containers {
		defaultContainer(&s.Containers[i])
	}
	for i := range s.EphemeralContainers {
		// EphemeralContainerCommon has exactly Container's fields.
		defaultContainer((*corev1.Container)(&s.EphemeralContainers[i].EphemeralContainerCommon))
	}
	for i := range s.Volumes {
		defaultVolume(&s.Volumes[i])
	}
}

// defaultHostNetworkPorts: with host networking the host port is the
// container port.
func defaultHostNetworkPorts(ports []corev1.ContainerPort) {
	for i := range ports {
		if ports[i].HostPort == 0 {
			ports[i].HostPort = ports[i].ContainerPort
		}
	}
}

func defaultPullPolicy(image string) corev1.PullPolicy {
	// The tag is what follows the last ":" after the last "/"; a digest
	// pins the image.
	if strings.Contains(image, "@") {
		return corev1.PullIfNotPresent
	}
	name := image[strings.LastIndex(image, "/")+1:]
	if i := strings.LastIndex(name, ":"); i < 0 || name[i+1:] == "latest" {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}

func defaultContainer(c *corev1.Container) {
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = corev1.TerminationMessagePathDefault
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	}
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = defaultPullPolicy(c.Image)
	}
	for i := range c.Ports {
		if c.Ports[i].Protocol == "" {
			c.Ports[i].Protocol = corev1.ProtocolTCP
		}
	}
	for i := range c.Env {
		if f := c.Env[i].ValueFrom; f != nil && f.FieldRef != nil && f.FieldRef.APIVersion == "" {
			f.FieldRef.APIVersion = "v1"
		}
	}
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		defaultProbe(p)
	}
}

func defaultProbe(p *corev1.Probe) {
	if p == nil {
		return
	}
	if p.TimeoutSeconds == 0 {
		p.TimeoutSeconds = 1
	}
	if p.PeriodSeconds == 0 {
		p.PeriodSeconds = 10
	}
	if p.SuccessThreshold == 0 {
		p.SuccessThreshold = 1
	}
	if p.FailureThreshold == 0 {
		p.FailureThreshold = 3
	}
	if h := p.HTTPGet; h != nil {
		if h.Path == "" {
			h.Path = "/"
		}
		if h.Scheme == "" {
			h.Scheme = corev1.URISchemeHTTP
		}
	}
	if g := p.GRPC; g != nil && g.Service == nil {
		g.Service = ptrTo("")
	}
}

func defaultVolume(v *corev1.Volume) {
	mode := ptrTo[int32](corev1.SecretVolumeSourceDefaultMode)
	switch {
	case v.ConfigMap != nil && v.ConfigMap.DefaultMode == nil:
		v.ConfigMap.DefaultMode = mode
	case v.Secret != nil && v.Secret.DefaultMode == nil:
		v.Secret.DefaultMode = mode
	case v.Projected != nil && v.Projected.DefaultMode == nil:
		v.Projected.DefaultMode = mode
	case v.DownwardAPI != nil && v.DownwardAPI.DefaultMode == nil:
		v.DownwardAPI.DefaultMode = mode
	case v.HostPath != nil && v.HostPath.Type == nil:
		v.HostPath.Type = ptrTo(corev1.HostPathUnset)
	case v.EmptyDir == nil && v.VolumeSource == (corev1.VolumeSource{}):
		v.EmptyDir = &corev1.EmptyDirVolumeSource{}
	}
	if v.DownwardAPI != nil {
		for i := range v.DownwardAPI.Items {
			if f := v.DownwardAPI.Items[i].FieldRef; f != nil && f.APIVersion == "" {
				f.APIVersion = "v1"
			}
		}
	}
	if v.Projected != nil {
		for i := range v.Projected.Sources {
			src := &v.Projected.Sources[i]
			if t := src.ServiceAccountToken; t != nil && t.ExpirationSeconds == nil {
				t.ExpirationSeconds = ptrTo[int64](3600)
			}
			if d := src.DownwardAPI; d != nil {
				for j := range d.Items {
					if f := d.Items[j].FieldRef; f != nil && f.APIVersion == "" {
						f.APIVersion = "v1"
					}
				}
			}
		}
	}
}

func ptrTo[T any](v T) *T { return &v }
