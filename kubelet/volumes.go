package kubelet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"bonsai.dev/bonsai/netplugin"
	"bonsai.dev/bonsai/netplugin/dns"
)

// Volumes live under <pod dir>/volumes/<kind>/<name>. configMap, secret,
// downwardAPI and projected volumes are written the way the kubelet's
// atomic writer does: the files sit in a timestamped directory that the
// "..data" symlink points at, and each visible name is a symlink through
// "..data", so an update swaps one symlink and a reader never sees half
// of it.

func (w *podWorker) volumeDir(kind, name string) string {
	return filepath.Join(w.podDir(), "volumes", kind, name)
}

// volumePath is the host path a volume mounts from.
func (w *podWorker) volumePath(pod *corev1.Pod, name string) (string, bool) {
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if v.Name != name {
			continue
		}
		switch kind := volumeKind(v); {
		case v.HostPath != nil:
			return v.HostPath.Path, true
		case kind != "":
			return w.volumeDir(kind, name), true
		case v.PersistentVolumeClaim != nil, v.Ephemeral != nil, v.CSI != nil:
			return w.claimPath(name)
		}
		return "", false
	}
	return "", false
}

// volumeKind names the directory under the pod's volumes of a volume the
// kubelet makes itself; "" for the others.
func volumeKind(v *corev1.Volume) string {
	switch {
	case v.EmptyDir != nil:
		return "empty-dir"
	case v.ConfigMap != nil:
		return "configmap"
	case v.Secret != nil:
		return "secret"
	case v.DownwardAPI != nil:
		return "downward-api"
	case v.Projected != nil:
		return "projected"
	}
	return ""
}

// kubeletWritten reports whether the volume holds files the kubelet
// writes (configMap, secret, downwardAPI, projected): those are mounted
// read-only whatever the pod asks, as the kubelet does, so no container
// can plant a symlink the next update would write through.
func (w *podWorker) kubeletWritten(pod *corev1.Pod, name string) bool {
	for _, v := range pod.Spec.Volumes {
		if v.Name == name {
			return v.ConfigMap != nil || v.Secret != nil || v.DownwardAPI != nil || v.Projected != nil
		}
	}
	return false
}

// setupVolumes prepares every volume; it runs on each sync, so changed
// configMaps and secrets reach running containers in place.
func (w *podWorker) setupVolumes(ctx context.Context, pod *corev1.Pod) error {
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if err := w.setupVolume(ctx, pod, v); err != nil {
			return fmt.Errorf("MountVolume.SetUp failed for volume %q : %v", v.Name, err)
		}
	}
	return nil
}

func (w *podWorker) setupVolume(ctx context.Context, pod *corev1.Pod, v *corev1.Volume) error {
	switch {
	case v.HostPath != nil:
		return checkHostPath(v.HostPath)
	case v.PersistentVolumeClaim != nil, v.Ephemeral != nil:
		return w.setupClaimVolume(ctx, pod, v)
	case v.CSI != nil:
		return w.setupInlineCSI(ctx, pod, v)
	case v.EmptyDir != nil:
		dir := w.volumeDir("empty-dir", v.Name)
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return err
		}
		os.Chmod(dir, 0o777)
		if v.EmptyDir.Medium == corev1.StorageMediumMemory && !isMountPoint(dir) {
			opts := "mode=0777"
			if v.EmptyDir.SizeLimit != nil && !v.EmptyDir.SizeLimit.IsZero() {
				opts += fmt.Sprintf(",size=%d", v.EmptyDir.SizeLimit.Value())
			}
			if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
				return fmt.Errorf("mount tmpfs: %w", err)
			}
		}
		return nil
	case v.ConfigMap != nil:
		files, err := w.configMapFiles(ctx, pod, v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.Optional, v.ConfigMap.DefaultMode)
		if err != nil {
			return err
		}
		return writeVolume(w.volumeDir("configmap", v.Name), files)
	case v.Secret != nil:
		files, err := w.secretFiles(ctx, pod, v.Secret.SecretName, v.Secret.Items, v.Secret.Optional, v.Secret.DefaultMode)
		if err != nil {
			return err
		}
		return writeVolume(w.volumeDir("secret", v.Name), files)
	case v.DownwardAPI != nil:
		files, err := w.downwardFiles(pod, v.DownwardAPI.Items, v.DownwardAPI.DefaultMode)
		if err != nil {
			return err
		}
		return writeVolume(w.volumeDir("downward-api", v.Name), files)
	case v.Projected != nil:
		files := map[string]volumeFile{}
		for _, src := range v.Projected.Sources {
			var part map[string]volumeFile
			var err error
			switch {
			case src.ConfigMap != nil:
				part, err = w.configMapFiles(ctx, pod, src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.Optional, v.Projected.DefaultMode)
			case src.Secret != nil:
				part, err = w.secretFiles(ctx, pod, src.Secret.Name, src.Secret.Items, src.Secret.Optional, v.Projected.DefaultMode)
			case src.DownwardAPI != nil:
				part, err = w.downwardFiles(pod, src.DownwardAPI.Items, v.Projected.DefaultMode)
			case src.ServiceAccountToken != nil:
				part, err = w.serviceAccountTokenFiles(ctx, pod, src.ServiceAccountToken, v.Projected.DefaultMode)
			}
			if err != nil {
				return err
			}
			for k, f := range part {
				files[k] = f
			}
		}
		return writeVolume(w.volumeDir("projected", v.Name), files)
	}
	return fmt.Errorf("volume type is not supported on this node")
}

func checkHostPath(hp *corev1.HostPathVolumeSource) error {
	t := corev1.HostPathUnset
	if hp.Type != nil {
		t = *hp.Type
	}
	st, err := os.Stat(hp.Path)
	switch t {
	case corev1.HostPathUnset:
		return nil
	case corev1.HostPathDirectoryOrCreate:
		if os.IsNotExist(err) {
			return os.MkdirAll(hp.Path, 0o755)
		}
		if err == nil && !st.IsDir() {
			return fmt.Errorf("hostPath type check failed: %s is not a directory", hp.Path)
		}
		return err
	case corev1.HostPathFileOrCreate:
		if os.IsNotExist(err) {
			if err := os.MkdirAll(filepath.Dir(hp.Path), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(hp.Path, os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return err
			}
			return f.Close()
		}
		if err == nil && st.IsDir() {
			return fmt.Errorf("hostPath type check failed: %s is not a file", hp.Path)
		}
		return err
	}
	if err != nil {
		return fmt.Errorf("hostPath type check failed: %s does not exist", hp.Path)
	}
	mode := st.Mode()
	ok := map[corev1.HostPathType]bool{
		corev1.HostPathDirectory: mode.IsDir(),
		corev1.HostPathFile:      mode.IsRegular(),
		corev1.HostPathSocket:    mode&os.ModeSocket != 0,
		corev1.HostPathCharDev:   mode&os.ModeCharDevice != 0,
		corev1.HostPathBlockDev:  mode&os.ModeDevice != 0 && mode&os.ModeCharDevice == 0,
	}[t]
	if !ok {
		return fmt.Errorf("hostPath type check failed: %s is not a %s", hp.Path, strings.ToLower(string(t)))
	}
	return nil
}

type volumeFile struct {
	data []byte
	mode os.FileMode
}

func fileMode(item *int32, def *int32) os.FileMode {
	if item != nil {
		return os.FileMode(*item)
	}
	if def != nil {
		return os.FileMode(*def)
	}
	return 0o644
}

// keyFiles maps a configMap's or secret's keys to files, honouring items.
func keyFiles(kind, name string, data map[string][]byte, items []corev1.KeyToPath, def *int32, optional bool) (map[string]volumeFile, error) {
	files := map[string]volumeFile{}
	if len(items) == 0 {
		for k, v := range data {
			files[k] = volumeFile{v, fileMode(nil, def)}
		}
		return files, nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return nil, fmt.Errorf("configmap references non-existent config key: %s", it.Key)
		}
		files[it.Path] = volumeFile{v, fileMode(it.Mode, def)}
	}
	_ = kind
	_ = name
	return files, nil
}

func (w *podWorker) configMapFiles(ctx context.Context, pod *corev1.Pod, name string, items []corev1.KeyToPath, opt *bool, def *int32) (map[string]volumeFile, error) {
	cm, err := w.m.client.getConfigMap(ctx, pod.Namespace, name)
	if err != nil {
		if optional(opt) {
			return map[string]volumeFile{}, nil
		}
		return nil, fmt.Errorf("configmap %q not found", name)
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return keyFiles("configmap", name, data, items, def, optional(opt))
}

func (w *podWorker) secretFiles(ctx context.Context, pod *corev1.Pod, name string, items []corev1.KeyToPath, opt *bool, def *int32) (map[string]volumeFile, error) {
	s, err := w.m.client.getSecret(ctx, pod.Namespace, name)
	if err != nil {
		if optional(opt) {
			return map[string]volumeFile{}, nil
		}
		return nil, fmt.Errorf("secret %q not found", name)
	}
	return keyFiles("secret", name, s.Data, items, def, optional(opt))
}

func (w *podWorker) downwardFiles(pod *corev1.Pod, items []corev1.DownwardAPIVolumeFile, def *int32) (map[string]volumeFile, error) {
	files := map[string]volumeFile{}
	for _, it := range items {
		var v string
		var err error
		switch {
		case it.FieldRef != nil:
			v, err = w.fieldValue(pod, it.FieldRef.FieldPath)
		case it.ResourceFieldRef != nil:
			c := &corev1.Container{}
			if len(pod.Spec.Containers) > 0 {
				c = &pod.Spec.Containers[0]
			}
			v, err = w.resourceValue(pod, c, it.ResourceFieldRef)
		}
		if err != nil {
			return nil, err
		}
		files[it.Path] = volumeFile{[]byte(v), fileMode(it.Mode, def)}
	}
	return files, nil
}

// writeVolume writes a configMap, secret, downwardAPI or projected volume
// onto a tmpfs of its own, as the kubelet does for secrets and tokens:
// their contents never touch the disk, and a volume cannot fill it.
func writeVolume(dir string, files map[string]volumeFile) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// Room for two copies (the atomic swap) and their inodes, at least
	// 1 MiB.
	size := int64(1 << 20)
	for _, f := range files {
		size += 2 * (int64(len(f.data)) + 4096)
	}
	const flags = syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC
	switch {
	case isMountPoint(dir):
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err != nil {
			return err
		}
		if int64(st.Blocks)*st.Bsize < size {
			if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_REMOUNT|flags, fmt.Sprintf("size=%d", size)); err != nil {
				return fmt.Errorf("grow tmpfs: %w", err)
			}
		}
	case isEmptyDir(dir):
		// A volume that an older bonsai wrote to disk stays there:
		// mounting over it would hide it from the containers that
		// already mount it.
		if err := syscall.Mount("tmpfs", dir, "tmpfs", flags, fmt.Sprintf("mode=0755,size=%d", size)); err != nil {
			return fmt.Errorf("mount tmpfs: %w", err)
		}
	}
	return writeAtomic(dir, files)
}

func isEmptyDir(dir string) bool {
	entries, err := os.ReadDir(dir)
	return err == nil && len(entries) == 0
}

// writeAtomic makes dir hold exactly files, swapping them in at once.
// Unchanged content writes nothing. Every path is checked again here, for
// pods stored before the API refused paths that leave the volume.
func writeAtomic(dir string, files map[string]volumeFile) error {
	for p := range files {
		if err := checkRelativePath(p); err != nil {
			return err
		}
		if strings.HasPrefix(p, "..") {
			return fmt.Errorf("invalid path %q: must not start with '..'", p)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	current := filepath.Join(dir, "..data")
	if target, err := os.Readlink(current); err == nil && sameFiles(filepath.Join(dir, target), files) {
		return nil
	}
	ts := filepath.Join(dir, "..", "."+filepath.Base(dir)+".tmp")
	os.RemoveAll(ts)
	name := ".." + time.Now().UTC().Format("2006_01_02_15_04_05.000000000")
	data := filepath.Join(dir, name)
	for p, f := range files {
		full := filepath.Join(data, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, f.data, f.mode); err != nil {
			return err
		}
		os.Chmod(full, f.mode)
	}
	if err := os.MkdirAll(data, 0o755); err != nil {
		return err
	}
	tmpLink := filepath.Join(dir, "..data_tmp")
	os.Remove(tmpLink)
	if err := os.Symlink(name, tmpLink); err != nil {
		return err
	}
	old, _ := os.Readlink(current)
	if err := os.Rename(tmpLink, current); err != nil {
		return err
	}
	// Visible names: one symlink per top-level entry, through ..data.
	top := map[string]bool{}
	for p := range files {
		first, _, _ := strings.Cut(p, "/")
		top[first] = true
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "..") && !top[e.Name()] {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	for name := range top {
		link := filepath.Join(dir, name)
		if t, err := os.Readlink(link); err == nil && t == filepath.Join("..data", name) {
			continue
		}
		os.RemoveAll(link)
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			return err
		}
	}
	if old != "" && old != name {
		os.RemoveAll(filepath.Join(dir, old))
	}
	return nil
}

func sameFiles(dir string, files map[string]volumeFile) bool {
	n := 0
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if info.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		f, ok := files[rel]
		if !ok || info.Mode().Perm() != f.mode.Perm() {
			return fmt.Errorf("differs")
		}
		b, err := os.ReadFile(p)
		if err != nil || string(b) != string(f.data) {
			return fmt.Errorf("differs")
		}
		n++
		return nil
	})
	return err == nil && n == len(files)
}

func isMountPoint(dir string) bool {
	var st, parent syscall.Stat_t
	if syscall.Stat(dir, &st) != nil || syscall.Stat(filepath.Dir(dir), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// removePodDir unmounts what the pod's dir holds (memory-backed volumes,
// subPath binds) and removes it. A mount that stays is never removed
// through: a subPath bind of a hostPath shows the host's files.
func removePodDir(dir string) error {
	if err := unmountUnder(dir); err != nil {
		return fmt.Errorf("keep pod dir %s: %w", dir, err)
	}
	return os.RemoveAll(dir)
}

// writeDNSFiles writes the pod's /etc/hosts, /etc/resolv.conf and
// /etc/hostname.
func (w *podWorker) writeDNSFiles(pod *corev1.Pod) {
	dir := w.podDir()
	os.MkdirAll(dir, 0o755)
	hostname := podHostname(pod)
	var hosts strings.Builder
	if pod.Spec.HostNetwork {
		b, _ := os.ReadFile("/etc/hosts")
		hosts.Write(b)
	} else {
		hosts.WriteString("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n")
		for _, ip := range w.podIPs {
			if pod.Spec.Subdomain != "" {
				fmt.Fprintf(&hosts, "%s\t%s.%s.%s.svc.%s\t%s\n", ip, hostname, pod.Spec.Subdomain, pod.Namespace, w.m.cfg.ClusterDomain, hostname)
			} else {
				fmt.Fprintf(&hosts, "%s\t%s\n", ip, hostname)
			}
		}
	}
	if len(pod.Spec.HostAliases) > 0 {
		hosts.WriteString("\n# Entries added by HostAliases.\n")
		for _, a := range pod.Spec.HostAliases {
			fmt.Fprintf(&hosts, "%s\t%s\n", a.IP, strings.Join(a.Hostnames, "\t"))
		}
	}
	writeIfChanged(filepath.Join(dir, "etc-hosts"), hosts.String())
	writeIfChanged(filepath.Join(dir, "resolv.conf"), podResolvConf(pod, w.m.cfg.ClusterDNS, w.m.cfg.ClusterDomain))
	writeIfChanged(filepath.Join(dir, "hostname"), hostname+"\n")
}

func writeIfChanged(path, content string) {
	if b, err := os.ReadFile(path); err == nil && string(b) == content {
		return
	}
	tmp := path + ".tmp"
	if os.WriteFile(tmp, []byte(content), 0o644) == nil {
		os.Rename(tmp, path)
	}
}

// podResolvConf is the pod's /etc/resolv.conf from its dnsPolicy and
// dnsConfig, with the node's resolv.conf read at each write (the host's
// may change: DHCP, a VPN).
func podResolvConf(pod *corev1.Pod, clusterDNS, domain string) string {
	var host dns.ResolvConf
	if path, err := dns.HostResolvConfPath(dns.HostResolvConfCandidates); err == nil {
		host, _ = dns.ReadResolvConf(path)
	}
	var servers []string
	if clusterDNS != "" {
		servers = []string{clusterDNS}
	}
	return dns.PodResolvConf(pod, host, servers, domain)
}

// podDNS is the pod's resolv.conf as the CNI dns capability carries it.
func (w *podWorker) podDNS(pod *corev1.Pod) netplugin.DNS {
	rc, err := dns.ParseResolvConf(strings.NewReader(podResolvConf(pod, w.m.cfg.ClusterDNS, w.m.cfg.ClusterDomain)))
	if err != nil {
		return netplugin.DNS{}
	}
	return netplugin.DNS{Servers: rc.Nameservers, Searches: rc.Searches, Options: rc.Options}
}

func sortStrings(s []string) { sort.Strings(s) }
