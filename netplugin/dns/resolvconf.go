package dns

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Limits the kubelet applies to a pod's resolv.conf (with the expanded
// DNS config that is the default since Kubernetes 1.28).
const (
	maxNameservers     = 3
	maxSearchPaths     = 32
	maxSearchListChars = 2048
	// maxSearchPathLen drops longer search paths, which make some libcs
	// abort (the kubelet's own reason).
	maxSearchPathLen = 253
)

// ResolvConf is what a resolv.conf says, read as the kubelet reads it.
type ResolvConf struct {
	Nameservers []string
	Searches    []string
	Options     []string
}

// HostResolvConfCandidates are the node resolv.confs tried in order by
// HostResolvConfPath: the usual one, then systemd-resolved's list of real
// upstreams for when the usual one points at its loopback stub.
var HostResolvConfCandidates = []string{"/etc/resolv.conf", "/run/systemd/resolve/resolv.conf"}

// HostResolvConfPath picks the resolv.conf pods with dnsPolicy Default
// inherit, as k3s does: the first candidate with a nameserver a pod can
// reach, which a loopback one (127.0.0.53 of systemd-resolved) is not
// from the pod's network namespace. An error when none has one.
func HostResolvConfPath(candidates []string) (string, error) {
	for _, path := range candidates {
		rc, err := ReadResolvConf(path)
		if err != nil {
			continue
		}
		for _, ns := range rc.Nameservers {
			if ip, err := netip.ParseAddr(ns); err == nil && !ip.IsLoopback() && !ip.IsUnspecified() {
				return path, nil
			}
		}
	}
	return "", fmt.Errorf("none of %s has a nameserver pods can reach (not loopback)", strings.Join(candidates, ", "))
}

// ReadResolvConf reads the resolv.conf at path.
func ReadResolvConf(path string) (ResolvConf, error) {
	f, err := os.Open(path)
	if err != nil {
		return ResolvConf{}, fmt.Errorf("reading resolv.conf: %w", err)
	}
	defer f.Close()
	rc, err := ParseResolvConf(f)
	if err != nil {
		return ResolvConf{}, fmt.Errorf("reading %s: %w", path, err)
	}
	return rc, nil
}

// ParseResolvConf reads resolv.conf lines: nameservers accumulate; the
// last search and options lines win; search domains lose a trailing dot
// and the root domain "." is dropped, so they count once against the
// pod's limits.
func ParseResolvConf(r io.Reader) (ResolvConf, error) {
	var rc ResolvConf
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") || strings.HasPrefix(f[0], ";") {
			continue
		}
		switch f[0] {
		case "nameserver":
			if len(f) >= 2 {
				rc.Nameservers = append(rc.Nameservers, f[1])
			}
		case "search":
			rc.Searches = nil
			for _, s := range f[1:] {
				if s != "." {
					rc.Searches = append(rc.Searches, strings.TrimSuffix(s, "."))
				}
			}
		case "options":
			rc.Options = f[1:]
		}
	}
	return rc, sc.Err()
}

// PodResolvConf is the /etc/resolv.conf of pod, built as the kubelet
// builds it from the pod's dnsPolicy and dnsConfig, the node's resolv.conf
// (host), the cluster DNS addresses and the cluster domain:
//   - ClusterFirst (the default), and ClusterFirstWithHostNet: the cluster
//     DNS, search <ns>.svc.<domain> svc.<domain> <domain> then the host's,
//     options ndots:5; ClusterFirst on the host network, or with no cluster
//     DNS, falls back to Default;
//   - Default: the host's resolv.conf;
//   - None: only dnsConfig.
//
// dnsConfig is then merged in: nameservers and searches appended without
// duplicates, options by name with the pod's value winning. At most 3
// nameservers, 32 search paths and 2048 characters of search list are
// kept.
func PodResolvConf(pod *corev1.Pod, host ResolvConf, clusterDNS []string, domain string) string {
	var ns, search, opts []string
	policy := pod.Spec.DNSPolicy
	if policy == "" {
		policy = corev1.DNSClusterFirst
	}
	cluster := policy == corev1.DNSClusterFirstWithHostNet || (policy == corev1.DNSClusterFirst && !pod.Spec.HostNetwork)
	switch {
	case policy == corev1.DNSNone:
	case cluster && len(clusterDNS) > 0:
		ns = clusterDNS
		search = host.Searches
		if domain != "" {
			search = append([]string{pod.Namespace + ".svc." + domain, "svc." + domain, domain}, host.Searches...)
		}
		opts = []string{"ndots:5"}
	default:
		ns, search, opts = host.Nameservers, host.Searches, host.Options
	}
	var podOpts []corev1.PodDNSConfigOption
	if dc := pod.Spec.DNSConfig; dc != nil {
		ns = append(append([]string(nil), ns...), dc.Nameservers...)
		search = append(append([]string(nil), search...), dc.Searches...)
		podOpts = dc.Options
	}
	ns = dedupe(ns)
	if len(ns) > maxNameservers {
		ns = ns[:maxNameservers]
	}
	search = fitSearches(dedupe(search))
	opts = mergeOptions(opts, podOpts)

	var b strings.Builder
	for _, n := range ns {
		b.WriteString("nameserver " + n + "\n")
	}
	if len(search) > 0 {
		b.WriteString("search " + strings.Join(search, " ") + "\n")
	}
	if len(opts) > 0 {
		b.WriteString("options " + strings.Join(opts, " ") + "\n")
	}
	return b.String()
}

// fitSearches applies the kubelet's limits: the first 32 paths, without
// paths longer than 253 characters, then paths cut from the end until the
// line is at most 2048 characters.
func fitSearches(search []string) []string {
	if len(search) > maxSearchPaths {
		search = search[:maxSearchPaths]
	}
	var kept []string
	for _, s := range search {
		if len(s) <= maxSearchPathLen {
			kept = append(kept, s)
		}
	}
	for len(kept) > 0 && len(strings.Join(kept, " ")) > maxSearchListChars {
		kept = kept[:len(kept)-1]
	}
	return kept
}

// mergeOptions merges options by name: later base duplicates and then the
// pod's options replace earlier values in place; new names go last.
func mergeOptions(base []string, pod []corev1.PodDNSConfigOption) []string {
	var names []string
	values := map[string]string{}
	set := func(name, value string) {
		if _, ok := values[name]; !ok {
			names = append(names, name)
		}
		values[name] = value
	}
	for _, o := range base {
		name, value, _ := strings.Cut(o, ":")
		set(name, value)
	}
	for _, o := range pod {
		value := ""
		if o.Value != nil {
			value = *o.Value
		}
		set(o.Name, value)
	}
	out := make([]string, 0, len(names))
	for _, n := range names {
		if v := values[n]; v != "" {
			out = append(out, n+":"+v)
		} else {
			out = append(out, n)
		}
	}
	return out
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
