package main

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/klauspost/compress/zstd"

	"bonsai.dev/bonsai/kubelet/cri"
)

// importImages loads every image archive in dir (the air-gap images
// directory) into the runtime. A bad archive is logged and skipped so one
// broken file does not keep the node from starting.
func importImages(ctx context.Context, rt cri.ImageService, dir string, log *slog.Logger) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	var files []string
	for _, e := range entries {
		if !e.IsDir() && isImageArchive(e.Name()) {
			files = append(files, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(files)
	for _, f := range files {
		imgs, err := importImageFile(ctx, rt, f)
		if err != nil {
			log.Error("importing images failed", "file", f, "err", err)
			continue
		}
		var names []string
		for _, i := range imgs {
			names = append(names, i.RepoTags...)
		}
		log.Info("imported images", "file", f, "images", strings.Join(names, ","))
	}
}

func isImageArchive(name string) bool {
	return strings.HasSuffix(name, ".tar") || strings.HasSuffix(name, ".tar.gz") || strings.HasSuffix(name, ".tgz") || strings.HasSuffix(name, ".tar.zst")
}

// importImageFile imports one archive, decompressing .tar.gz and .tar.zst.
func importImageFile(ctx context.Context, rt cri.ImageService, path string) ([]cri.Image, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = f
	switch {
	case strings.HasSuffix(path, ".gz") || strings.HasSuffix(path, ".tgz"):
		gz, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		defer gz.Close()
		r = gz
	case strings.HasSuffix(path, ".zst"):
		zr, err := zstd.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		defer zr.Close()
		r = zr
	}
	return rt.ImportImages(ctx, r)
}
