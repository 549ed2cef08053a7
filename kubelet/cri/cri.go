// Package cri is the node agent's runtime interface: the calls the pod
// workers make, shaped like CRI's RuntimeService and ImageService so a
// backend is a thin adapter. It owns only types; backends live in their
// own packages (kubelet/containerd) and must not reach back into the
// kubelet.
package cri

import (
	"context"
	"io"
	"time"

	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
)

// Runtime runs pod sandboxes and their containers.
type Runtime interface {
	// Version names the runtime as nodeInfo reports it, e.g.
	// "containerd://1.7.2".
	Version(ctx context.Context) (string, error)

	ImageService

	RunPodSandbox(ctx context.Context, cfg SandboxConfig) (string, error)
	// RemovePodSandbox forgets a sandbox whose containers are all removed.
	RemovePodSandbox(ctx context.Context, id string) error
	ListPodSandboxes(ctx context.Context) ([]Sandbox, error)

	CreateContainer(ctx context.Context, sandboxID string, cfg ContainerConfig) (string, error)
	StartContainer(ctx context.Context, id string) error
	// StopContainer sends the stop signal, then SIGKILL after timeout.
	StopContainer(ctx context.Context, id string, timeout time.Duration) error
	RemoveContainer(ctx context.Context, id string) error
	ListContainers(ctx context.Context) ([]ContainerStatus, error)
	// PodContainers lists the containers of one pod (by LabelPodUID):
	// what a pod worker asks on every sync, without reading the rest.
	PodContainers(ctx context.Context, podUID string) ([]ContainerStatus, error)
	ContainerStatus(ctx context.Context, id string) (ContainerStatus, error)
	// ExecSync runs cmd in the container and collects its output, for
	// exec probes and lifecycle hooks.
	ExecSync(ctx context.Context, id string, cmd []string, timeout time.Duration) (stdout, stderr []byte, exitCode int, err error)

	// Exec, Attach and PortForward serve kubectl's streams. A non-zero
	// exit of an exec'd command is a k8s.io/utils/exec.ExitError.
	Exec(ctx context.Context, containerID string, cmd []string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error
	Attach(ctx context.Context, containerID string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error
	PortForward(ctx context.Context, sandboxID string, port int32, stream io.ReadWriteCloser) error

	// Events wakes the caller when a container exits, so a pod worker
	// need not poll. The channel carries container ids.
	Events() <-chan string
	Close() error
}

// LayerUsage is what a runtime that can measure its containers'
// writable layers offers: the bytes and inodes the container has written
// to its root file system, as CRI's ContainerStats writable layer.
type LayerUsage interface {
	ContainerLayerUsage(ctx context.Context, id string) (bytes, inodes uint64, err error)
}

// ImageService pulls, lists and removes images.
type ImageService interface {
	PullImage(ctx context.Context, ref string, auth *Auth) (Image, error)
	// ImageStatus returns nil, nil when the image is absent.
	ImageStatus(ctx context.Context, ref string) (*Image, error)
	ListImages(ctx context.Context) ([]Image, error)
	RemoveImage(ctx context.Context, ref string) error
	// ImportImages reads an OCI or Docker image archive.
	ImportImages(ctx context.Context, r io.Reader) ([]Image, error)
}

// Auth is one registry's credentials for a pull.
type Auth struct {
	Username, Password, IdentityToken string
}

// Image is an image the runtime holds.
type Image struct {
	// ID is the digest of the image's config, as kubelets report imageID.
	ID          string
	RepoTags    []string
	RepoDigests []string
	Size        int64
	// CreatedAt is when the runtime stored it (image GC spares young ones).
	CreatedAt time.Time
	// User is the image's configured user ("" = root).
	User string
}

// SandboxConfig is what a pod's shared context needs.
type SandboxConfig struct {
	PodUID, Namespace, Name string
	Attempt                 uint32
	Hostname                string
	// NetnsPath is the pod's network namespace; empty means the host's.
	NetnsPath string
	IP        string
	Labels    map[string]string
}

// Sandbox is a pod's shared context as the runtime holds it.
type Sandbox struct {
	ID        string
	Config    SandboxConfig
	CreatedAt time.Time
}

// Mount binds a host path into a container.
type Mount struct {
	HostPath, ContainerPath string
	ReadOnly                bool
}

// Device is a host device node given to a container at ContainerPath,
// with the cgroup access it allows ("rwm" or a subset).
type Device struct {
	HostPath, ContainerPath, Permissions string
}

// ContainerConfig is one container of a pod, resolved by the kubelet.
type ContainerConfig struct {
	Name    string
	Attempt uint32
	Image   string
	// Command and Args follow Kubernetes: Command replaces the image's
	// entrypoint (and drops its cmd), Args replaces the cmd.
	Command, Args []string
	Env           []string // KEY=value
	WorkingDir    string
	Mounts        []Mount
	Labels        map[string]string
	LogPath       string
	Stdin         bool
	StdinOnce     bool
	TTY           bool

	RunAsUser, RunAsGroup *int64
	SupplementalGroups    []int64
	Privileged            bool
	CapAdd, CapDrop       []string
	ReadOnlyRootfs        bool
	NoNewPrivileges       bool
	// Seccomp is the container's seccomp profile.
	Seccomp SeccompProfile
	// AppArmor is the container's AppArmor profile: "" (unconfined),
	// AppArmorRuntimeDefault, or the name of a profile loaded on the host.
	AppArmor string `json:",omitempty"`
	// Resources; zero means unset.
	CPUShares, CPUQuota, CPUPeriod, MemoryLimit int64
	OOMScoreAdj                                 int
	CgroupParent                                string
	StopSignal                                  string
	// Devices, Annotations and CDIDevices come from device plugins'
	// Allocate answers. Annotations go into the OCI spec; CDIDevices are
	// fully qualified CDI names (vendor.com/class=name) resolved through
	// the CDI specs on the host.
	Devices     []Device
	Annotations map[string]string
	CDIDevices  []string
}

// ContainerState is where a container is in its life.
type ContainerState int

const (
	ContainerCreated ContainerState = iota
	ContainerRunning
	ContainerExited
	ContainerUnknown
)

func (s ContainerState) String() string {
	return [...]string{"created", "running", "exited", "unknown"}[s]
}

// ContainerStatus is a container as the runtime sees it.
type ContainerStatus struct {
	ID, SandboxID string
	Name          string
	Attempt       uint32
	Image         string // as requested
	ImageRef      string // the image's ID
	Labels        map[string]string
	State         ContainerState
	CreatedAt     time.Time
	StartedAt     time.Time
	FinishedAt    time.Time
	ExitCode      int32
	// Reason is "OOMKilled", "Completed" or "Error" once exited.
	Reason  string
	LogPath string
}

// Labels the kubelet puts on every container (the names the real kubelet
// uses, so `ctr` users recognise them); finding a pod's containers by them
// is how the kubelet's servers (logs, exec, attach) resolve a request.
const (
	LabelPodUID        = "io.kubernetes.pod.uid"
	LabelPodName       = "io.kubernetes.pod.name"
	LabelPodNamespace  = "io.kubernetes.pod.namespace"
	LabelContainerName = "io.kubernetes.container.name"
)

// SeccompProfile is a container's seccomp profile as CRI names it: none
// (Unconfined), the runtime's default, or an OCI seccomp JSON file.
type SeccompProfile struct {
	// Type is SeccompUnconfined (""), SeccompRuntimeDefault or
	// SeccompLocalhost.
	Type string `json:",omitempty"`
	// LocalhostPath is the profile file's absolute path (Localhost).
	LocalhostPath string `json:",omitempty"`
}

// AppArmorRuntimeDefault asks for the runtime's default AppArmor profile.
const AppArmorRuntimeDefault = "runtime/default"

const (
	SeccompUnconfined     = ""
	SeccompRuntimeDefault = "RuntimeDefault"
	SeccompLocalhost      = "Localhost"
)
