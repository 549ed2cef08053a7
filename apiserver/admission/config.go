// Package admission is the API server's admission: the Plugin contract
// (Attributes, MutationInterface, ValidationInterface) and the Chain that
// runs an ordered list of plugins, mutating phase then validating phase,
// as kube-apiserver's admission does; the plugins' configuration, the
// AdmissionConfiguration file of --admission-control-config-file
// (apiserver.config.k8s.io/v1, as kube-apiserver reads it) with each
// configurable plugin's own configuration in it, decoded and checked
// before the server starts; and the plugins that need nothing of the
// server (Priority, DefaultTolerationSeconds, DefaultStorageClass,
// StorageObjectInUseProtection here, PodSecurity in its sub-package), as
// pure logic. The API server defines the plugins that read its state and
// the one ordered list (apiserver/admission_chain.go).
package admission

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	apiserverapi "k8s.io/apiserver/pkg/apis/apiserver"
	apiserverinstall "k8s.io/apiserver/pkg/apis/apiserver/install"

	"bonsai.dev/bonsai/apiserver/admission/podsecurity"
)

// Config is the plugins' configuration.
type Config struct {
	// PodSecurity is the PodSecurity plugin's configuration; upstream's
	// defaults (privileged, no exemptions) without an entry.
	PodSecurity *podsecurity.Configuration
	// Unused names the file's entries for plugins bonsai has no
	// configuration for (kube-apiserver reads an entry only when its
	// plugin is enabled), for the server to say so.
	Unused []string
}

var configScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	apiserverinstall.Install(s)
	return s
}()

// LoadConfig reads the AdmissionConfiguration file at path ("" for
// none) and every configuration it gives a plugin bonsai has.
func LoadConfig(path string) (*Config, error) {
	plugins, err := readAdmissionConfiguration(path)
	if err != nil {
		return nil, err
	}
	cfg := &Config{}
	known := map[string]bool{podsecurity.PluginName: true}
	seen := map[string]bool{}
	for _, p := range plugins {
		if !known[p.Name] && !seen[p.Name] {
			cfg.Unused = append(cfg.Unused, p.Name)
		}
		seen[p.Name] = true
	}
	sort.Strings(cfg.Unused)
	data, err := pluginConfig(plugins, podsecurity.PluginName)
	if err != nil {
		return nil, err
	}
	if cfg.PodSecurity, err = podsecurity.LoadConfiguration(data); err != nil {
		return nil, fmt.Errorf("plugin %s: %w", podsecurity.PluginName, err)
	}
	return cfg, nil
}

// readAdmissionConfiguration decodes the file strictly, as kube-apiserver
// does, with relative plugin paths taken from the file's directory.
// kube-apiserver's fallback for the legacy unversioned files of
// ImagePolicyWebhook and PodNodeSelector is left out: bonsai has neither
// plugin.
func readAdmissionConfiguration(path string) ([]apiserverapi.AdmissionPluginConfiguration, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("unable to read admission control configuration from %q [%v]", path, err)
	}
	codecs := serializer.NewCodecFactory(configScheme, serializer.EnableStrict)
	obj, err := runtime.Decode(codecs.UniversalDecoder(), data)
	if err != nil {
		return nil, err
	}
	decoded, ok := obj.(*apiserverapi.AdmissionConfiguration)
	if !ok {
		return nil, fmt.Errorf("unexpected type: %T", obj)
	}
	base := filepath.Dir(path)
	for i, p := range decoded.Plugins {
		if p.Path != "" && !filepath.IsAbs(p.Path) {
			decoded.Plugins[i].Path = filepath.Join(base, p.Path)
		}
	}
	return decoded.Plugins, nil
}

// pluginConfig is the first entry for name: its embedded configuration,
// else the file its path names; nil when there is neither.
func pluginConfig(plugins []apiserverapi.AdmissionPluginConfiguration, name string) ([]byte, error) {
	for _, p := range plugins {
		if p.Name != name {
			continue
		}
		if p.Configuration != nil {
			return bytes.Clone(p.Configuration.Raw), nil
		}
		if p.Path != "" {
			data, err := os.ReadFile(p.Path)
			if err != nil {
				return nil, fmt.Errorf("plugin %s: %v", name, err)
			}
			return data, nil
		}
		return nil, nil
	}
	return nil, nil
}
