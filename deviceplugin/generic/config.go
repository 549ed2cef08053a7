// Package generic is bonsai's built-in device plugin for simple devices
// (serial ports, cameras, GPIO chips, sound cards): device nodes matched
// by paths or globs in <data-dir>/devices.yaml become an extended
// resource, with no plugin to write. It is a real v1beta1 device plugin
// on its own socket that registers through kubelet.sock like any other;
// it must not reach into the device manager.
package generic

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"

	"bonsai.dev/bonsai/deviceplugin"
)

// Config is devices.yaml.
//
//	resources:
//	- name: bonsai.dev/serial
//	  devices: ["/dev/ttyUSB*", "/dev/ttyACM*"]  # each node is one device
//	- name: bonsai.dev/camera
//	  devices: ["/dev/video*"]
//	  shared: 2                                   # two containers per camera
//	- name: bonsai.dev/sound
//	  group: ["/dev/snd"]                         # all of it is one device
type Config struct {
	Resources []Resource `json:"resources"`
}

// Resource is one extended resource made of host device nodes.
type Resource struct {
	// Name is vendor-domain/resourcetype.
	Name string `json:"name"`
	// Devices are paths or globs; every device node matched is one
	// device.
	Devices []string `json:"devices,omitempty"`
	// Group are paths or globs whose matches together are one device (a
	// directory gives every device node under it).
	Group []string `json:"group,omitempty"`
	// Shared is how many containers may use one device at a time
	// (default 1: exclusive).
	Shared int `json:"shared,omitempty"`
	// DRA publishes the devices in a ResourceSlice of the DRA driver
	// generic.bonsai.dev, for ResourceClaims, instead of as an extended
	// resource for resources.limits.
	DRA bool `json:"dra,omitempty"`
}

// maxShared bounds Shared: each share is a device ID in node status.
const maxShared = 1000

// Load reads and checks a devices.yaml.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(b, path)
}

// Parse checks a devices.yaml's content; every error names the file and
// the entry.
func Parse(b []byte, path string) (*Config, error) {
	var c Config
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return nil, fmt.Errorf("%s: %v", path, strings.ReplaceAll(err.Error(), "\n", " "))
	}
	seen := map[string]bool{}
	for i := range c.Resources {
		r := &c.Resources[i]
		where := fmt.Sprintf("%s: resources[%d]", path, i)
		if err := deviceplugin.ValidResourceName(r.Name); err != nil {
			return nil, fmt.Errorf("%s: %v", where, err)
		}
		if seen[r.Name] {
			return nil, fmt.Errorf("%s: resource %q is listed twice", where, r.Name)
		}
		seen[r.Name] = true
		if (len(r.Devices) == 0) == (len(r.Group) == 0) {
			return nil, fmt.Errorf("%s (%s): give exactly one of devices and group", where, r.Name)
		}
		for _, p := range append(append([]string(nil), r.Devices...), r.Group...) {
			if !filepath.IsAbs(p) {
				return nil, fmt.Errorf("%s (%s): path %q is not absolute", where, r.Name, p)
			}
			if _, err := filepath.Match(p, p); err != nil {
				return nil, fmt.Errorf("%s (%s): path %q is not a valid glob: %v", where, r.Name, p, err)
			}
		}
		switch {
		case r.Shared == 0:
			r.Shared = 1
		case r.Shared < 0 || r.Shared > maxShared:
			return nil, fmt.Errorf("%s (%s): shared %d must be between 1 and %d", where, r.Name, r.Shared, maxShared)
		}
		if r.DRA && r.Shared != 1 {
			return nil, fmt.Errorf("%s (%s): shared is not supported with dra (a claim can be shared by pods instead)", where, r.Name)
		}
	}
	if len(c.Resources) == 0 {
		return nil, errors.New(path + ": no resources")
	}
	return &c, nil
}
