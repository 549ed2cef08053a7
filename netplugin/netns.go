package netplugin

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Network namespaces are entered by one OS thread at a time: setns moves
// only the calling thread. Every function here does it on a fresh,
// locked goroutine and, should moving back fail, returns without
// unlocking: the Go runtime then ends that thread instead of giving it to
// another goroutine that would run in the pod's namespace.

// PrepareNetnsDir makes dir a mount point with shared propagation, as
// `ip netns` does for /run/netns. Bind mounts of namespaces under it then
// propagate to mount namespaces cloned from this one later (a systemd
// unit with PrivateTmp, say) as slave copies, so that unmounting one here
// unmounts it there too and the namespace is really freed; under a
// private mount such a copy would keep the namespace, and its veth peer,
// alive until that other mount namespace went away.
func PrepareNetnsDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create netns dir: %w", err)
	}
	for madeMount := false; ; madeMount = true {
		err := unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, "")
		if err == nil {
			return nil
		}
		// EINVAL: dir is not a mount point yet.
		if !errors.Is(err, unix.EINVAL) || madeMount {
			return fmt.Errorf("make netns dir %s a shared mount: %w", dir, err)
		}
		if err := unix.Mount(dir, dir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind mount netns dir %s onto itself: %w", dir, err)
		}
	}
}

// IsNetnsMount reports whether path is a bind mount of a network
// namespace (as opposed to the empty file it is mounted on).
func IsNetnsMount(path string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false
	}
	return st.Type == unix.NSFS_MAGIC
}

// CreateNetns makes a new network namespace and keeps it alive by bind
// mounting it onto path (which must not exist).
func CreateNetns(path string) error {
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return err
	}
	f.Close()

	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open current netns: %w", err)
			return
		}
		defer orig.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			// unshare changes nothing when it fails.
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		src := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		mountErr := unix.Mount(src, path, "none", unix.MS_BIND, "")
		if err := netns.Set(orig); err != nil {
			errc <- fmt.Errorf("return to the host netns after creating %s: %w", path, err)
			return // still locked: the thread exits with this goroutine
		}
		runtime.UnlockOSThread()
		if mountErr != nil {
			mountErr = fmt.Errorf("bind mount: %w", mountErr)
		}
		errc <- mountErr
	}()
	if err := <-errc; err != nil {
		RemoveNetns(path)
		return err
	}
	return nil
}

// RemoveNetns unmounts and removes a namespace made by CreateNetns; the
// kernel frees the namespace (and the pod end of its veth) once no process
// is left in it. Removing one that is not there is not an error.
func RemoveNetns(path string) error {
	err := unix.Unmount(path, unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount netns %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove netns %s: %w", path, err)
	}
	return nil
}

// netlinkHandleIn opens a rtnetlink socket inside the namespace at path.
// A netlink socket stays bound to the namespace it was created in, so the
// handle configures the pod's links from any thread afterwards.
func netlinkHandleIn(path string) (*netlink.Handle, error) {
	var h *netlink.Handle
	err := inNetns(path, func() error {
		var err error
		h, err = netlink.NewHandle(unix.NETLINK_ROUTE)
		return err
	})
	return h, err
}

// inNetns runs fn on a thread inside the namespace at path. Goroutines that
// fn starts run elsewhere (in the host namespace); sockets that fn creates
// stay in the pod's namespace.
func inNetns(path string, fn func() error) error { return InNetns(path, fn) }

// InNetns runs fn on a thread inside the network namespace at path;
// sockets fn creates stay there, goroutines it starts do not.
func InNetns(path string, fn func() error) error {
	target, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", path, err)
	}
	defer target.Close()
	if err := Within(target, fn); err != nil {
		return fmt.Errorf("netns %s: %w", path, err)
	}
	return nil
}

// Within runs fn on a thread inside ns, and returns the thread to its
// namespace after (a thread that cannot return ends with its goroutine).
func Within(ns netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open current netns: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			runtime.UnlockOSThread() // a failed setns leaves the thread where it was
			errc <- fmt.Errorf("enter netns: %w", err)
			return
		}
		fnErr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- fmt.Errorf("leave netns: %w", err)
			return // still locked: the thread exits with this goroutine
		}
		runtime.UnlockOSThread()
		errc <- fnErr
	}()
	return <-errc
}
