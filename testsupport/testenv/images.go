package testenv

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"
)

// BusyboxPath is where Debian's busybox-static puts its binary.
func BusyboxPath() (string, error) {
	for _, p := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		// A dynamic busybox (Debian's plain busybox) would need its libc
		// inside the image.
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		static := f.Section(".interp") == nil
		f.Close()
		if static {
			return p, nil
		}
	}
	return "", fmt.Errorf("a static busybox (Debian package busybox-static) is not installed")
}

// BusyboxImage returns a Docker image archive (the `docker save` format)
// named ref, whose one layer is Debian's static busybox with every applet
// linked in /bin, plus /etc/passwd and /etc/group with root and nobody.
// The image's default command is `sh`.
func BusyboxImage(t testing.TB, ref string) []byte {
	t.Helper()
	bb, err := BusyboxPath()
	Require(t, err == nil, "%v", err)
	b, err := BuildBusyboxImage(bb, ref)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// BuildBusyboxImage builds the archive BusyboxImage returns.
func BuildBusyboxImage(busybox, ref string) ([]byte, error) {
	layer, config, err := BusyboxLayer(busybox)
	if err != nil {
		return nil, err
	}
	return DockerArchive(ref, layer, config)
}

// BusyboxLayer builds the busybox image's one (uncompressed) layer and its
// image config. Extra files (path without the leading slash → content)
// are added as executables, for images that carry a test program.
func BusyboxLayer(busybox string, extra ...map[string][]byte) (layer, config []byte, err error) {
	bin, err := os.ReadFile(busybox)
	if err != nil {
		return nil, nil, err
	}
	list, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		return nil, nil, fmt.Errorf("busybox --list: %w", err)
	}
	var lb bytes.Buffer
	tw := tar.NewWriter(&lb)
	mtime := time.Unix(0, 0)
	dir := func(name string, mode int64) {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, ModTime: mtime})
	}
	file := func(name string, mode int64, data []byte) {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: mtime})
		tw.Write(data)
	}
	for _, d := range []string{"bin", "etc", "tmp", "root", "proc", "sys", "dev", "home", "var", "usr", "usr/bin"} {
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777
		}
		dir(d, mode)
	}
	file("bin/busybox", 0o755, bin)
	for _, applet := range strings.Fields(string(list)) {
		if applet == "busybox" {
			continue
		}
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + applet, Linkname: "busybox", Mode: 0o777, ModTime: mtime})
	}
	file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n"))
	file("etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n"))
	for _, files := range extra {
		names := make([]string, 0, len(files))
		for name := range files {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			file(name, 0o755, files[name])
		}
	}
	if err := tw.Close(); err != nil {
		return nil, nil, err
	}
	layerSum := sha256.Sum256(lb.Bytes())
	layerID := hex.EncodeToString(layerSum[:])
	config, _ = json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux", "created": mtime.UTC().Format(time.RFC3339),
		"config": map[string]any{
			"Env": []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			"Cmd": []string{"sh"},
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + layerID}},
	})
	return lb.Bytes(), config, nil
}

// DockerArchive wraps a layer and config as `docker save` does.
func DockerArchive(ref string, layer, config []byte) ([]byte, error) {
	mtime := time.Unix(0, 0)
	layerSum := sha256.Sum256(layer)
	layerID := hex.EncodeToString(layerSum[:])
	configSum := sha256.Sum256(config)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	manifest, _ := json.Marshal([]map[string]any{{
		"Config": configName, "RepoTags": []string{ref}, "Layers": []string{layerID + "/layer.tar"},
	}})
	var out bytes.Buffer
	ow := tar.NewWriter(&out)
	add := func(name string, data []byte) {
		ow.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: mtime})
		ow.Write(data)
	}
	ow.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: layerID + "/", Mode: 0o755, ModTime: mtime})
	add(layerID+"/layer.tar", layer)
	add(configName, config)
	add("manifest.json", manifest)
	if err := ow.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
