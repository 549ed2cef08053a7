package csi

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"bonsai.dev/bonsai/testsupport/testenv"
)

func TestValidatePlugin(t *testing.T) {
	m := &Manager{}
	for _, v := range [][]string{{"1.0.0"}, {"0.3.0", "1.2.0"}, {"v1.5.0"}} {
		if err := m.ValidatePlugin("d", "/x.sock", v); err != nil {
			t.Errorf("versions %v refused: %v", v, err)
		}
	}
	for _, c := range []struct {
		endpoint string
		versions []string
		want     string
	}{
		{"", []string{"1.0.0"}, "no endpoint"},
		{"/x.sock", []string{"0.3.0"}, "none of which is 1.x"},
		{"/x.sock", nil, "none of which is 1.x"},
		{"/x.sock", []string{"10.0.0"}, "none of which is 1.x"},
	} {
		if err := m.ValidatePlugin("d", c.endpoint, c.versions); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("endpoint %q versions %v: %v, want %q", c.endpoint, c.versions, err, c.want)
		}
	}
}

func TestMountinfoHas(t *testing.T) {
	info := "36 35 98:0 /mnt1 /mnt/with\\040space rw,noatime master:1 - ext3 /dev/root rw\n" +
		"37 35 98:0 / /plain rw - tmpfs tmpfs rw\n"
	for p, want := range map[string]bool{"/mnt/with space": true, "/plain": true, "/mnt/with\\040space": false, "/plai": false, "/": false} {
		if got := mountinfoHas(info, p); got != want {
			t.Errorf("mountinfoHas(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestAccessModeAndFSGroupPolicy(t *testing.T) {
	if got := accessMode([]corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce, corev1.ReadWriteMany}); got != csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER {
		t.Errorf("RWO+RWX = %v", got)
	}
	if got := accessMode(nil); got != csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER {
		t.Errorf("none = %v", got)
	}
	rwo := []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	for _, c := range []struct {
		policy storagev1.FSGroupPolicy
		v      Volume
		want   bool
	}{
		{storagev1.FileFSGroupPolicy, Volume{}, true},
		{storagev1.NoneFSGroupPolicy, Volume{FSType: "ext4", AccessModes: rwo}, false},
		{storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy, Volume{FSType: "ext4", AccessModes: rwo}, true},
		{storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy, Volume{AccessModes: rwo}, false},
		{storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy, Volume{FSType: "ext4", AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}}, false},
	} {
		if got := fsGroupApplies(c.policy, c.v); got != c.want {
			t.Errorf("policy %s volume %+v: %v, want %v", c.policy, c.v, got, c.want)
		}
	}
}

// applyFSGroup gives files the group and group access, sets setgid on
// directories, and leaves what a symlink points at alone.
func TestApplyFSGroup(t *testing.T) {
	testenv.Require(t, os.Geteuid() == 0, "chown to another group needs root")
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "outside")
	os.WriteFile(outside, nil, 0o600)
	os.Mkdir(filepath.Join(dir, "sub"), 0o700)
	os.WriteFile(filepath.Join(dir, "sub", "f"), []byte("x"), 0o600)
	os.Symlink(outside, filepath.Join(dir, "link"))
	if err := applyFSGroup(dir, 4321, nil); err != nil {
		t.Fatal(err)
	}
	for p, mode := range map[string]os.FileMode{dir: 0o070, filepath.Join(dir, "sub"): 0o070, filepath.Join(dir, "sub", "f"): 0o060} {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		fi, _ := os.Stat(p)
		if st.Gid != 4321 || fi.Mode().Perm()&mode != mode || (fi.IsDir() && fi.Mode()&os.ModeSetgid == 0) {
			t.Errorf("%s: gid %d mode %v", p, st.Gid, fi.Mode())
		}
	}
	var st syscall.Stat_t
	syscall.Stat(outside, &st)
	if st.Gid == 4321 {
		t.Errorf("applyFSGroup followed a symlink out of the volume")
	}
}
