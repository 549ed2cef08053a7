package kubelet

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"bonsai.dev/bonsai/kubelet/containerd"
	"bonsai.dev/bonsai/kubelet/cri"
)

// ensureImage makes the container's image present as its pull policy
// says, with Kubernetes' waiting reasons and events.
func (w *podWorker) ensureImage(ctx context.Context, pod *corev1.Pod, c *corev1.Container) error {
	img, err := w.m.rt.ImageStatus(ctx, c.Image)
	if err != nil {
		w.waiting[c.Name] = corev1.ContainerStateWaiting{Reason: "InvalidImageName", Message: err.Error()}
		w.event(ctx, pod, c.Name, corev1.EventTypeWarning, "InspectFailed", err.Error())
		return err
	}
	present := img != nil
	switch {
	case c.ImagePullPolicy == corev1.PullNever && !present:
		msg := fmt.Sprintf("Container image %q is not present with pull policy of Never", c.Image)
		w.waiting[c.Name] = corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull", Message: msg}
		w.event(ctx, pod, c.Name, corev1.EventTypeWarning, "ErrImageNeverPull", msg)
		return errors.New(msg)
	case present && c.ImagePullPolicy != corev1.PullAlways:
		w.event(ctx, pod, c.Name, corev1.EventTypeNormal, "Pulled", fmt.Sprintf("Container image %q already present on machine", c.Image))
		return nil
	}
	key := "pull/" + string(pod.UID) + "/" + c.Name
	if w.m.backoff.IsInBackOffSinceUpdate(key, time.Now()) {
		msg := fmt.Sprintf("Back-off pulling image %q", c.Image)
		w.waiting[c.Name] = corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: msg}
		w.event(ctx, pod, c.Name, corev1.EventTypeNormal, "BackOff", msg)
		return errors.New(msg)
	}
	w.event(ctx, pod, c.Name, corev1.EventTypeNormal, "Pulling", fmt.Sprintf("Pulling image %q", c.Image))
	start := time.Now()
	auth := w.pullAuth(ctx, pod, c.Image)
	got, err := w.m.rt.PullImage(ctx, c.Image, auth)
	if err != nil {
		w.m.backoff.Next(key, time.Now())
		w.pullRetryAt[c.Name] = time.Now().Add(w.m.backoff.Get(key))
		w.waiting[c.Name] = corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: err.Error()}
		w.event(ctx, pod, c.Name, corev1.EventTypeWarning, "Failed", fmt.Sprintf("Failed to pull image %q: %v", c.Image, err))
		w.event(ctx, pod, c.Name, corev1.EventTypeWarning, "Failed", "Error: ErrImagePull")
		return err
	}
	w.m.backoff.Reset(key)
	delete(w.pullRetryAt, c.Name)
	took := time.Since(start).Round(time.Millisecond)
	w.event(ctx, pod, c.Name, corev1.EventTypeNormal, "Pulled", fmt.Sprintf("Successfully pulled image %q in %s. Image size: %d bytes.", c.Image, took, got.Size))
	return nil
}

// pullAuth finds credentials for the image's registry in the pod's
// imagePullSecrets (dockerconfigjson or the older dockercfg).
func (w *podWorker) pullAuth(ctx context.Context, pod *corev1.Pod, image string) *cri.Auth {
	if len(pod.Spec.ImagePullSecrets) == 0 {
		return nil
	}
	name, err := containerd.NormalizeImage(image)
	if err != nil {
		return nil
	}
	host, _, _ := strings.Cut(name, "/")
	for _, ref := range pod.Spec.ImagePullSecrets {
		s, err := w.m.client.getSecret(ctx, pod.Namespace, ref.Name)
		if err != nil {
			continue
		}
		if a := dockerAuth(s, host); a != nil {
			return a
		}
	}
	return nil
}

type dockerAuthEntry struct {
	Username      string `json:"username"`
	Password      string `json:"password"`
	Auth          string `json:"auth"`
	IdentityToken string `json:"identitytoken"`
}

func dockerAuth(s *corev1.Secret, host string) *cri.Auth {
	var auths map[string]dockerAuthEntry
	switch s.Type {
	case corev1.SecretTypeDockerConfigJson:
		var cfg struct {
			Auths map[string]dockerAuthEntry `json:"auths"`
		}
		if json.Unmarshal(s.Data[corev1.DockerConfigJsonKey], &cfg) != nil {
			return nil
		}
		auths = cfg.Auths
	case corev1.SecretTypeDockercfg:
		if json.Unmarshal(s.Data[corev1.DockerConfigKey], &auths) != nil {
			return nil
		}
	default:
		return nil
	}
	for key, e := range auths {
		k := strings.TrimPrefix(strings.TrimPrefix(key, "https://"), "http://")
		k, _, _ = strings.Cut(k, "/")
		if k != host && !(host == "docker.io" && (k == "index.docker.io" || k == "registry-1.docker.io")) {
			continue
		}
		a := &cri.Auth{Username: e.Username, Password: e.Password, IdentityToken: e.IdentityToken}
		if e.Auth != "" {
			if raw, err := base64.StdEncoding.DecodeString(e.Auth); err == nil {
				a.Username, a.Password, _ = strings.Cut(string(raw), ":")
			}
		}
		return a
	}
	return nil
}

// containerConfig resolves a container spec into what the runtime runs:
// env with valueFrom and $(VAR) expansion, mounts, security context and
// cgroup limits.
func (w *podWorker) containerConfig(ctx context.Context, pod *corev1.Pod, c *corev1.Container, attempt uint32) (cri.ContainerConfig, error) {
	env, err := w.envFor(ctx, pod, c)
	if err != nil {
		return cri.ContainerConfig{}, err
	}
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	mounts, err := w.mountsFor(pod, c, attempt, vars)
	if err != nil {
		return cri.ContainerConfig{}, err
	}
	cfg := cri.ContainerConfig{
		Name: c.Name, Attempt: attempt, Image: c.Image,
		Command: expandAll(c.Command, vars), Args: expandAll(c.Args, vars),
		Env: env, WorkingDir: c.WorkingDir, Mounts: mounts,
		Labels: map[string]string{
			cri.LabelPodUID: string(pod.UID), cri.LabelPodName: pod.Name,
			cri.LabelPodNamespace: pod.Namespace, cri.LabelContainerName: c.Name,
		},
		LogPath: filepath.Join(w.m.logsDir(), fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID), c.Name, fmt.Sprintf("%d.log", attempt)),
		Stdin:   c.Stdin, StdinOnce: c.StdinOnce, TTY: c.TTY,
		CgroupParent: podCgroup(string(pod.UID)),
	}
	if err := w.applySecurity(ctx, pod, c, &cfg); err != nil {
		return cri.ContainerConfig{}, err
	}
	applyResources(pod, c, &cfg, w.m.cfg.nodeMemory)
	if err := w.applyDevices(ctx, pod, c, &cfg); err != nil {
		return cri.ContainerConfig{}, err
	}
	return cfg, nil
}

func (w *podWorker) applySecurity(ctx context.Context, pod *corev1.Pod, c *corev1.Container, cfg *cri.ContainerConfig) error {
	psc := pod.Spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	sc := c.SecurityContext
	if sc == nil {
		sc = &corev1.SecurityContext{}
	}
	cfg.RunAsUser, cfg.RunAsGroup = psc.RunAsUser, psc.RunAsGroup
	if sc.RunAsUser != nil {
		cfg.RunAsUser = sc.RunAsUser
	}
	if sc.RunAsGroup != nil {
		cfg.RunAsGroup = sc.RunAsGroup
	}
	cfg.SupplementalGroups = psc.SupplementalGroups
	if psc.FSGroup != nil {
		cfg.SupplementalGroups = append(cfg.SupplementalGroups, *psc.FSGroup)
	}
	nonRoot := psc.RunAsNonRoot
	if sc.RunAsNonRoot != nil {
		nonRoot = sc.RunAsNonRoot
	}
	if nonRoot != nil && *nonRoot {
		switch {
		case cfg.RunAsUser != nil && *cfg.RunAsUser == 0:
			return errors.New("container's runAsUser breaks non-root policy")
		case cfg.RunAsUser == nil:
			img, err := w.m.rt.ImageStatus(ctx, c.Image)
			if err != nil || img == nil {
				return errors.New("container has runAsNonRoot and image will run as root")
			}
			user, _, _ := strings.Cut(img.User, ":")
			uid, err := strconv.ParseInt(user, 10, 64)
			if user != "" && err != nil {
				return fmt.Errorf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root", user)
			}
			if user == "" || uid == 0 {
				return errors.New("container has runAsNonRoot and image will run as root")
			}
		}
	}
	if sc.Privileged != nil {
		cfg.Privileged = *sc.Privileged
	}
	if sc.Capabilities != nil {
		for _, cp := range sc.Capabilities.Add {
			cfg.CapAdd = append(cfg.CapAdd, string(cp))
		}
		for _, cp := range sc.Capabilities.Drop {
			cfg.CapDrop = append(cfg.CapDrop, string(cp))
		}
	}
	if sc.ReadOnlyRootFilesystem != nil {
		cfg.ReadOnlyRootfs = *sc.ReadOnlyRootFilesystem
	}
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		cfg.NoNewPrivileges = true
	}
	prof, err := w.m.seccompProfile(psc.SeccompProfile, sc.SeccompProfile, cfg.Privileged)
	if err != nil {
		return err
	}
	cfg.Seccomp = prof
	if !cfg.Privileged {
		cfg.AppArmor = appArmorProfile(pod, c)
	}
	return nil
}

// seccompProfile resolves a container's seccomp profile, the container's
// field over the pod's, as the kubelet does: unset is Unconfined (the
// kubelet's default without --seccomp-default), and a privileged
// container runs unconfined whatever it asks. A Localhost profile is a
// file under the kubelet's seccomp dir; a missing one refuses the
// container.
func (m *podManager) seccompProfile(pod, ctr *corev1.SeccompProfile, privileged bool) (cri.SeccompProfile, error) {
	p := pod
	if ctr != nil {
		p = ctr
	}
	if p == nil || privileged {
		return cri.SeccompProfile{}, nil
	}
	switch p.Type {
	case corev1.SeccompProfileTypeUnconfined:
		return cri.SeccompProfile{}, nil
	case corev1.SeccompProfileTypeRuntimeDefault:
		return cri.SeccompProfile{Type: cri.SeccompRuntimeDefault}, nil
	case corev1.SeccompProfileTypeLocalhost:
		if p.LocalhostProfile == nil {
			return cri.SeccompProfile{}, errors.New("localhostProfile must be set if seccompProfile type is Localhost")
		}
		if err := checkRelativePath(*p.LocalhostProfile); err != nil {
			return cri.SeccompProfile{}, fmt.Errorf("seccomp profile: %w", err)
		}
		path := filepath.Join(m.seccompDir(), *p.LocalhostProfile)
		if st, err := os.Stat(path); err != nil || !st.Mode().IsRegular() {
			return cri.SeccompProfile{}, fmt.Errorf("failed to load localhost seccomp profile %q: not a file under %s", *p.LocalhostProfile, m.seccompDir())
		}
		return cri.SeccompProfile{Type: cri.SeccompLocalhost, LocalhostPath: path}, nil
	}
	return cri.SeccompProfile{}, fmt.Errorf("unsupported seccomp profile type %q", p.Type)
}

// applyResources turns requests and limits into cgroup settings and the
// OOM score the kubelet gives each QoS class.
func applyResources(pod *corev1.Pod, c *corev1.Container, cfg *cri.ContainerConfig, nodeMemory int64) {
	req, lim := c.Resources.Requests, c.Resources.Limits
	if q, ok := req[corev1.ResourceCPU]; ok {
		cfg.CPUShares = max(q.MilliValue()*1024/1000, 2)
	} else if q, ok := lim[corev1.ResourceCPU]; ok {
		cfg.CPUShares = max(q.MilliValue()*1024/1000, 2)
	} else {
		cfg.CPUShares = 2
	}
	if q, ok := lim[corev1.ResourceCPU]; ok {
		cfg.CPUPeriod = 100000
		cfg.CPUQuota = max(q.MilliValue()*cfg.CPUPeriod/1000, 1000)
	}
	if q, ok := lim[corev1.ResourceMemory]; ok {
		cfg.MemoryLimit = q.Value()
	}
	switch pod.Status.QOSClass {
	case corev1.PodQOSGuaranteed:
		cfg.OOMScoreAdj = -997
	case corev1.PodQOSBestEffort:
		cfg.OOMScoreAdj = 1000
	default:
		adj := 1000
		if q, ok := req[corev1.ResourceMemory]; ok && nodeMemory > 0 {
			adj = 1000 - int(1000*q.Value()/nodeMemory)
		}
		cfg.OOMScoreAdj = min(max(adj, 2), 999)
	}
}

// envFor builds the container's environment in Kubernetes' order: envFrom
// sources, then env entries (later ones win), each value expanded against
// what came before.
func (w *podWorker) envFor(ctx context.Context, pod *corev1.Pod, c *corev1.Container) ([]string, error) {
	var order []string
	vals := map[string]string{}
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			order = append(order, k)
		}
		vals[k] = v
	}
	for _, kv := range w.serviceEnv(ctx, pod) {
		set(kv[0], kv[1])
	}
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			cm, err := w.m.client.getConfigMap(ctx, pod.Namespace, from.ConfigMapRef.Name)
			if err != nil {
				if optional(from.ConfigMapRef.Optional) {
					continue
				}
				return nil, fmt.Errorf("configmap %q not found", from.ConfigMapRef.Name)
			}
			for k, v := range cm.Data {
				set(from.Prefix+k, v)
			}
		case from.SecretRef != nil:
			s, err := w.m.client.getSecret(ctx, pod.Namespace, from.SecretRef.Name)
			if err != nil {
				if optional(from.SecretRef.Optional) {
					continue
				}
				return nil, fmt.Errorf("secret %q not found", from.SecretRef.Name)
			}
			for k, v := range s.Data {
				set(from.Prefix+k, string(v))
			}
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			set(e.Name, expand(e.Value, vals))
			continue
		}
		v, ok, err := w.envValueFrom(ctx, pod, c, e.ValueFrom)
		if err != nil {
			return nil, err
		}
		if ok {
			set(e.Name, v)
		}
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+vals[k])
	}
	return out, nil
}

func optional(b *bool) bool { return b != nil && *b }

// serviceEnv is the Docker-links style variables for the services of the
// pod's namespace (with enableServiceLinks, the default) and the master
// service "kubernetes" always, as the kubelet sets them.
func (w *podWorker) serviceEnv(ctx context.Context, pod *corev1.Pod) [][2]string {
	var svcs []corev1.Service
	links := pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks
	if links {
		if l, err := w.m.client.listServices(ctx, pod.Namespace); err == nil {
			svcs = append(svcs, l.Items...)
		}
	}
	if pod.Namespace != metav1.NamespaceDefault || !links {
		if l, err := w.m.client.listServices(ctx, metav1.NamespaceDefault); err == nil {
			for _, s := range l.Items {
				if s.Name == "kubernetes" {
					svcs = append(svcs, s)
				}
			}
		}
	}
	sort.Slice(svcs, func(i, j int) bool { return svcs[i].Name < svcs[j].Name })
	var out [][2]string
	for _, s := range svcs {
		ip := s.Spec.ClusterIP
		if ip == "" || ip == corev1.ClusterIPNone || len(s.Spec.Ports) == 0 {
			continue
		}
		name := strings.ToUpper(strings.ReplaceAll(s.Name, "-", "_"))
		first := s.Spec.Ports[0]
		out = append(out, [2]string{name + "_SERVICE_HOST", ip}, [2]string{name + "_SERVICE_PORT", strconv.Itoa(int(first.Port))})
		for _, p := range s.Spec.Ports {
			if p.Name != "" {
				out = append(out, [2]string{name + "_SERVICE_PORT_" + strings.ToUpper(strings.ReplaceAll(p.Name, "-", "_")), strconv.Itoa(int(p.Port))})
			}
		}
		proto := strings.ToLower(string(first.Protocol))
		if proto == "" {
			proto = "tcp"
		}
		out = append(out, [2]string{name + "_PORT", fmt.Sprintf("%s://%s", proto, net.JoinHostPort(ip, strconv.Itoa(int(first.Port))))})
		for _, p := range s.Spec.Ports {
			pr := strings.ToLower(string(p.Protocol))
			if pr == "" {
				pr = "tcp"
			}
			prefix := fmt.Sprintf("%s_PORT_%d_%s", name, p.Port, strings.ToUpper(pr))
			out = append(out,
				[2]string{prefix, fmt.Sprintf("%s://%s", pr, net.JoinHostPort(ip, strconv.Itoa(int(p.Port))))},
				[2]string{prefix + "_PROTO", pr},
				[2]string{prefix + "_PORT", strconv.Itoa(int(p.Port))},
				[2]string{prefix + "_ADDR", ip})
		}
	}
	return out
}

func (w *podWorker) envValueFrom(ctx context.Context, pod *corev1.Pod, c *corev1.Container, src *corev1.EnvVarSource) (string, bool, error) {
	switch {
	case src.ConfigMapKeyRef != nil:
		ref := src.ConfigMapKeyRef
		cm, err := w.m.client.getConfigMap(ctx, pod.Namespace, ref.Name)
		if err != nil {
			if optional(ref.Optional) {
				return "", false, nil
			}
			return "", false, fmt.Errorf("configmap %q not found", ref.Name)
		}
		v, ok := cm.Data[ref.Key]
		if !ok {
			if optional(ref.Optional) {
				return "", false, nil
			}
			return "", false, fmt.Errorf("couldn't find key %s in ConfigMap %s/%s", ref.Key, pod.Namespace, ref.Name)
		}
		return v, true, nil
	case src.SecretKeyRef != nil:
		ref := src.SecretKeyRef
		s, err := w.m.client.getSecret(ctx, pod.Namespace, ref.Name)
		if err != nil {
			if optional(ref.Optional) {
				return "", false, nil
			}
			return "", false, fmt.Errorf("secret %q not found", ref.Name)
		}
		v, ok := s.Data[ref.Key]
		if !ok {
			if optional(ref.Optional) {
				return "", false, nil
			}
			return "", false, fmt.Errorf("couldn't find key %s in Secret %s/%s", ref.Key, pod.Namespace, ref.Name)
		}
		return string(v), true, nil
	case src.FieldRef != nil:
		v, err := w.fieldValue(pod, src.FieldRef.FieldPath)
		return v, err == nil, err
	case src.ResourceFieldRef != nil:
		v, err := w.resourceValue(pod, c, src.ResourceFieldRef)
		return v, err == nil, err
	}
	return "", false, nil
}

// fieldValue serves the downward API's fieldRef paths.
func (w *podWorker) fieldValue(pod *corev1.Pod, path string) (string, error) {
	if k, ok := strings.CutPrefix(path, "metadata.labels['"); ok {
		return pod.Labels[strings.TrimSuffix(k, "']")], nil
	}
	if k, ok := strings.CutPrefix(path, "metadata.annotations['"); ok {
		return pod.Annotations[strings.TrimSuffix(k, "']")], nil
	}
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "metadata.labels":
		return formatMap(pod.Labels), nil
	case "metadata.annotations":
		return formatMap(pod.Annotations), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP", "status.hostIPs":
		return w.m.cfg.Address.String(), nil
	case "status.podIP":
		if len(w.podIPs) > 0 {
			return w.podIPs[0], nil
		}
		return "", nil
	case "status.podIPs":
		return strings.Join(w.podIPs, ","), nil
	}
	return "", fmt.Errorf("unsupported fieldRef path %q", path)
}

func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sortStrings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(k + "=" + strconv.Quote(m[k]))
	}
	return b.String()
}

// resourceValue serves resourceFieldRef: a container's requests or limits
// (limits default to the node's allocatable), divided by the divisor and
// rounded up, as the kubelet does.
func (w *podWorker) resourceValue(pod *corev1.Pod, c *corev1.Container, ref *corev1.ResourceFieldSelector) (string, error) {
	target := c
	if ref.ContainerName != "" {
		target = nil
		for i := range pod.Spec.Containers {
			if pod.Spec.Containers[i].Name == ref.ContainerName {
				target = &pod.Spec.Containers[i]
			}
		}
		if target == nil {
			return "", fmt.Errorf("container %q not found", ref.ContainerName)
		}
	}
	kind, name, _ := strings.Cut(ref.Resource, ".")
	list := target.Resources.Limits
	if kind == "requests" {
		list = target.Resources.Requests
	}
	q, ok := list[corev1.ResourceName(name)]
	if !ok {
		if kind == "requests" {
			q = resource.Quantity{}
		} else {
			q = w.m.cfg.allocatable(corev1.ResourceName(name))
		}
	}
	div := ref.Divisor
	if div.IsZero() {
		div = resource.MustParse("1")
	}
	if name == "cpu" {
		v := (q.MilliValue() + div.MilliValue() - 1) / div.MilliValue()
		return strconv.FormatInt(v, 10), nil
	}
	v := (q.Value() + div.Value() - 1) / div.Value()
	return strconv.FormatInt(v, 10), nil
}

// expand replaces $(VAR) with earlier variables' values; $$ escapes a $
// and unknown references stay as written, as Kubernetes does.
func expand(s string, vars map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + name + ")")
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

func expandAll(in []string, vars map[string]string) []string {
	if in == nil {
		return nil
	}
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = expand(s, vars)
	}
	return out
}

// mountsFor binds the pod's volumes and the kubelet-managed files
// (/etc/hosts, /etc/resolv.conf, /etc/hostname, the termination log).
// vars are the container's environment, for subPathExpr.
func (w *podWorker) mountsFor(pod *corev1.Pod, c *corev1.Container, attempt uint32, vars map[string]string) ([]cri.Mount, error) {
	var out []cri.Mount
	for i, vm := range c.VolumeMounts {
		host, ok := w.volumePath(pod, vm.Name)
		if !ok {
			return nil, fmt.Errorf("cannot find volume %q to mount into container %q", vm.Name, c.Name)
		}
		sub := vm.SubPath
		if vm.SubPathExpr != "" {
			var err error
			if sub, err = expandSubPath(vm.SubPathExpr, vars); err != nil {
				return nil, fmt.Errorf("failed to prepare subPath for volumeMount %q of container %q: %v", vm.Name, c.Name, err)
			}
		}
		if sub != "" {
			target := filepath.Join(w.podDir(), "volume-subpaths", vm.Name, c.Name, strconv.Itoa(i))
			if err := bindSubPath(host, sub, target); err != nil {
				return nil, fmt.Errorf("failed to prepare subPath for volumeMount %q of container %q: %v", vm.Name, c.Name, err)
			}
			host = target
		}
		out = append(out, cri.Mount{HostPath: host, ContainerPath: vm.MountPath, ReadOnly: vm.ReadOnly || w.claimReadOnly(vm.Name) || w.kubeletWritten(pod, vm.Name)})
	}
	dir := w.podDir()
	has := func(p string) bool {
		for _, m := range out {
			if m.ContainerPath == p {
				return true
			}
		}
		return false
	}
	for _, f := range []struct{ file, path string }{{"etc-hosts", "/etc/hosts"}, {"resolv.conf", "/etc/resolv.conf"}, {"hostname", "/etc/hostname"}} {
		if !has(f.path) {
			out = append(out, cri.Mount{HostPath: filepath.Join(dir, f.file), ContainerPath: f.path})
		}
	}
	if p := c.TerminationMessagePath; p != "" && !has(p) {
		host := w.terminationLogPath(c.Name, attempt)
		if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(host, nil, 0o666); err != nil {
			return nil, err
		}
		os.Chmod(host, 0o666)
		out = append(out, cri.Mount{HostPath: host, ContainerPath: p})
	}
	return out, nil
}

// expandSubPath expands a subPathExpr with the container's environment;
// a variable it names that is unset or empty is an error, as in the
// kubelet, and so is a result that leaves the volume.
func expandSubPath(expr string, vars map[string]string) (string, error) {
	var missing []string
	for i := 0; i+1 < len(expr); i++ {
		if expr[i] == '$' && expr[i+1] == '$' {
			i++
			continue
		}
		if expr[i] == '$' && expr[i+1] == '(' {
			if end := strings.IndexByte(expr[i+2:], ')'); end >= 0 {
				if name := expr[i+2 : i+2+end]; vars[name] == "" {
					missing = append(missing, name)
				}
			}
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return "", fmt.Errorf("missing value for %s", strings.Join(missing, ", "))
	}
	sub := expand(expr, vars)
	if err := checkRelativePath(sub); err != nil {
		return "", err
	}
	return sub, nil
}

func (w *podWorker) terminationLogPath(name string, attempt uint32) string {
	return filepath.Join(w.podDir(), "containers", name, fmt.Sprintf("%d-termination-log", attempt))
}

// runHandler runs a lifecycle hook.
func (w *podWorker) runHandler(ctx context.Context, pod *corev1.Pod, c *corev1.Container, id string, h *corev1.LifecycleHandler) (string, error) {
	switch {
	case h.Exec != nil:
		out, errOut, code, err := w.m.rt.ExecSync(ctx, id, h.Exec.Command, 0)
		if err != nil {
			return "", err
		}
		if code != 0 {
			return string(out) + string(errOut), fmt.Errorf("command '%s' exited with %d: %s", strings.Join(h.Exec.Command, " "), code, errOut)
		}
		return "", nil
	case h.HTTPGet != nil:
		url, err := w.httpURL(pod, c, h.HTTPGet)
		if err != nil {
			return "", err
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		for _, hd := range h.HTTPGet.HTTPHeaders {
			req.Header.Add(hd.Name, hd.Value)
		}
		resp, err := hookClient.Do(req)
		if err != nil {
			return "", err
		}
		resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			return "", fmt.Errorf("HTTP lifecycle hook (%s) for Container %q in Pod %q failed - error: status %d", h.HTTPGet.Path, c.Name, pod.Name, resp.StatusCode)
		}
		return "", nil
	case h.Sleep != nil:
		select {
		case <-time.After(time.Duration(h.Sleep.Seconds) * time.Second):
		case <-ctx.Done():
		}
		return "", nil
	case h.TCPSocket != nil:
		port, err := resolvePort(h.TCPSocket.Port, c)
		if err != nil {
			return "", err
		}
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(w.hostFor(h.TCPSocket.Host), strconv.Itoa(port)), 5*time.Second)
		if err != nil {
			return "", err
		}
		conn.Close()
		return "", nil
	}
	return "", errors.New("lifecycle handler has no action")
}

var hookClient = &http.Client{Timeout: 30 * time.Second}

func (w *podWorker) hostFor(host string) string {
	if host != "" {
		return host
	}
	if len(w.podIPs) > 0 {
		return w.podIPs[0]
	}
	return "127.0.0.1"
}

func (w *podWorker) httpURL(pod *corev1.Pod, c *corev1.Container, g *corev1.HTTPGetAction) (string, error) {
	port, err := resolvePort(g.Port, c)
	if err != nil {
		return "", err
	}
	scheme := strings.ToLower(string(g.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	path := g.Path
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	return fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(w.hostFor(g.Host), strconv.Itoa(port)), path), nil
}

// resolvePort turns a probe's or hook's port (number or container port
// name) into a number.
func resolvePort(p intstr.IntOrString, c *corev1.Container) (int, error) {
	if p.Type == intstr.Int {
		if p.IntVal <= 0 || p.IntVal > 65535 {
			return 0, fmt.Errorf("invalid port number: %d", p.IntVal)
		}
		return int(p.IntVal), nil
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil {
		return n, nil
	}
	return 0, fmt.Errorf("couldn't find port: %v in %v", p.StrVal, c.Name)
}
