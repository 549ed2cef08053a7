package containerd

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/containerd/containerd/containers"
	"github.com/containerd/containerd/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"bonsai.dev/bonsai/kubelet/cri"
)

// withDevices gives the container the host's device nodes at their
// container paths, each with a cgroup rule allowing exactly its access, as
// containerd's CRI plugin does for a CRI ContainerConfig's devices. A
// directory (/dev/snd) gives every device node under it.
func withDevices(devs []cri.Device) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *specs.Spec) error {
		if s.Linux == nil {
			s.Linux = &specs.Linux{}
		}
		if s.Linux.Resources == nil {
			s.Linux.Resources = &specs.LinuxResources{}
		}
		for _, d := range devs {
			host, err := filepath.EvalSymlinks(d.HostPath)
			if err != nil {
				return fmt.Errorf("device %s: %w", d.HostPath, err)
			}
			perm := d.Permissions
			if perm == "" {
				perm = "rwm"
			}
			add := func(hostPath, containerPath string) error {
				dev, err := oci.DeviceFromPath(hostPath)
				if err != nil {
					return fmt.Errorf("device %s: %w", hostPath, err)
				}
				dev.Path = containerPath
				s.Linux.Devices = append(s.Linux.Devices, *dev)
				s.Linux.Resources.Devices = append(s.Linux.Resources.Devices, specs.LinuxDeviceCgroup{
					Allow: true, Type: dev.Type, Major: &dev.Major, Minor: &dev.Minor, Access: perm,
				})
				return nil
			}
			if _, err := oci.DeviceFromPath(host); err == oci.ErrNotADevice {
				err := filepath.WalkDir(host, func(p string, e fs.DirEntry, err error) error {
					if err != nil || e.IsDir() {
						return err
					}
					if _, derr := oci.DeviceFromPath(p); derr != nil {
						return nil // not a device node (a symlink, a file)
					}
					rel, _ := filepath.Rel(host, p)
					return add(p, filepath.Join(d.ContainerPath, rel))
				})
				if err != nil {
					return err
				}
				continue
			}
			if err := add(host, d.ContainerPath); err != nil {
				return err
			}
		}
		return nil
	}
}
