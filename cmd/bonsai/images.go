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
	"text/tabwriter"

	"github.com/klauspost/compress/zstd"
	"github.com/spf13/cobra"

	"bonsai.dev/bonsai/kubelet/containerd"
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

// newImagesCmd is `bonsai images`: the node's images, by hand, for
// air-gapped boxes (the same import the server does for <data-dir>/images
// at start).
func newImagesCmd(stdout io.Writer) *cobra.Command {
	var dataDir, endpoint string
	cmd := &cobra.Command{
		Use:   "images",
		Short: "Import and list the images of this host's containerd",
	}
	cmd.PersistentFlags().StringVar(&dataDir, "data-dir", "/var/lib/bonsai", "bonsai's data directory (where a containerd bonsai started keeps its socket)")
	cmd.PersistentFlags().StringVar(&endpoint, "container-runtime-endpoint", "/run/containerd/containerd.sock", "containerd's socket; when absent, the one under <data-dir>/containerd")
	connect := func(ctx context.Context) (*containerd.Runtime, error) {
		sock := strings.TrimPrefix(endpoint, "unix://")
		if _, err := os.Stat(sock); err != nil {
			own := filepath.Join(dataDir, "containerd", "containerd.sock")
			if _, err2 := os.Stat(own); err2 != nil {
				return nil, fmt.Errorf("no containerd: neither %s nor %s exists (is bonsai server running?)", sock, own)
			}
			sock = own
		}
		return containerd.New(ctx, containerd.Config{Endpoint: sock, StateDir: filepath.Join(dataDir, "agent", "io"),
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}
	importCmd := &cobra.Command{
		Use:   "import FILE...",
		Short: "Import image archives (docker save or OCI; .tar, .tar.gz, .tar.zst)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, files []string) error {
			for _, f := range files {
				if _, err := os.Stat(f); err != nil {
					return err
				}
			}
			rt, err := connect(cmd.Context())
			if err != nil {
				return err
			}
			defer rt.Close()
			for _, f := range files {
				imgs, err := importImageFile(cmd.Context(), rt, f)
				if err != nil {
					return fmt.Errorf("%s: %w", f, err)
				}
				for _, i := range imgs {
					for _, tag := range i.RepoTags {
						fmt.Fprintf(stdout, "imported %s (%s)\n", tag, shortID(i.ID))
					}
				}
			}
			return nil
		},
	}
	listCmd := &cobra.Command{
		Use:   "list",
		Short: "List images",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rt, err := connect(cmd.Context())
			if err != nil {
				return err
			}
			defer rt.Close()
			imgs, err := rt.ListImages(cmd.Context())
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(stdout, 0, 8, 3, ' ', 0)
			fmt.Fprintln(tw, "IMAGE\tIMAGE ID\tSIZE")
			for _, i := range imgs {
				names := i.RepoTags
				if len(names) == 0 {
					names = []string{"<none>"}
				}
				for _, n := range names {
					fmt.Fprintf(tw, "%s\t%s\t%s\n", n, shortID(i.ID), humanSize(i.Size))
				}
			}
			return tw.Flush()
		},
	}
	cmd.AddCommand(importCmd, listCmd)
	return cmd
}

func shortID(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 13 {
		return id[:13]
	}
	return id
}

func humanSize(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1fGiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1fMiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1fKiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%dB", b)
}
