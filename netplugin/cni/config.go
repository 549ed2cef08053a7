package cni

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/version"
)

// Defaults of the kubelet's --cni-conf-dir and --cni-bin-dir.
const (
	DefaultConfDir = "/etc/cni/net.d"
	DefaultBinDir  = "/opt/cni/bin"
)

// confExtensions are the files the kubelet (and containerd) read as
// network configurations.
var confExtensions = []string{".conflist", ".conf", ".json"}

// ErrUninitialized is wrapped by every error that means no usable network
// configuration exists: the node is not network-ready, in the kubelet's
// words.
var ErrUninitialized = errors.New("cni config uninitialized")

// network is a loaded configuration and the file it came from.
type network struct {
	file string
	list *libcni.NetworkConfigList
}

// HasConfig reports whether dir holds a file the CNI host would read as
// a network configuration (valid or not): what --pod-network=auto asks.
func HasConfig(dir string) bool {
	files, err := libcni.ConfFiles(dir, confExtensions)
	return err == nil && len(files) > 0
}

// loadNetwork reads the first configuration file of dir in lexical
// order and checks that every plugin it names is in binDirs. Later files
// are not looked at: the kubelet uses the first one.
func loadNetwork(dir string, binDirs []string) (*network, error) {
	files, err := libcni.ConfFiles(dir, confExtensions)
	if err != nil {
		return nil, fmt.Errorf("%w: read %s: %v", ErrUninitialized, dir, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%w: no network configuration (%s) in %s", ErrUninitialized, "*.conflist, *.conf, *.json", dir)
	}
	slices.Sort(files)
	file := files[0]
	list, err := parseConfFile(file)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUninitialized, file, err)
	}
	if err := checkVersion(list.CNIVersion); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUninitialized, file, err)
	}
	for _, p := range list.Plugins {
		if _, err := invoke.FindInPath(p.Network.Type, binDirs); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrUninitialized, file, err)
		}
	}
	return &network{file: file, list: list}, nil
}

// parseConfFile reads a .conflist (a plugin chain) or a .conf/.json (one
// plugin, made a chain of one).
func parseConfFile(file string) (*libcni.NetworkConfigList, error) {
	if filepath.Ext(file) == ".conflist" {
		list, err := libcni.NetworkConfFromFile(file)
		if err != nil {
			return nil, err
		}
		return list, checkList(list)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return parseConfBytes(b)
}

// parseConfBytes reads a chain or a single plugin's configuration, as the
// result cache holds either.
func parseConfBytes(b []byte) (*libcni.NetworkConfigList, error) {
	var probe struct {
		Plugins []any `json:"plugins"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return nil, fmt.Errorf("error parsing configuration: %w", err)
	}
	var list *libcni.NetworkConfigList
	var err error
	if probe.Plugins != nil {
		list, err = libcni.NetworkConfFromBytes(b)
	} else {
		var conf *libcni.PluginConfig
		if conf, err = libcni.NetworkPluginConfFromBytes(b); err == nil {
			list, err = libcni.ConfListFromConf(conf)
		}
	}
	if err != nil {
		return nil, err
	}
	return list, checkList(list)
}

func checkList(list *libcni.NetworkConfigList) error {
	if list.Name == "" {
		return errors.New("error parsing configuration: no name")
	}
	if len(list.Plugins) == 0 {
		return errors.New("error parsing configuration: no plugins")
	}
	for i, p := range list.Plugins {
		if p.Network.Type == "" {
			return fmt.Errorf("error parsing configuration: plugin %d has no type", i)
		}
	}
	return nil
}

// checkVersion accepts the spec versions libcni speaks (0.1.0 to 1.1.0).
func checkVersion(v string) error {
	if v == "" {
		return errors.New("no cniVersion")
	}
	if slices.Contains(version.All.SupportedVersions(), v) {
		return nil
	}
	return fmt.Errorf("cniVersion %q is not supported (want one of %v)", v, version.All.SupportedVersions())
}
