package containerd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	containerd "github.com/containerd/containerd"
	"github.com/containerd/containerd/content"
	"github.com/containerd/containerd/errdefs"
	"github.com/containerd/containerd/images"
	"github.com/containerd/containerd/reference/docker"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"bonsai.dev/bonsai/kubelet/cri"
)

// NormalizeImage turns a Kubernetes image reference into the full name
// containerd stores ("busybox" → "docker.io/library/busybox:latest").
func NormalizeImage(ref string) (string, error) {
	if strings.HasPrefix(ref, "sha256:") {
		return ref, nil
	}
	named, err := docker.ParseDockerRef(ref)
	if err != nil {
		return "", fmt.Errorf("invalid image reference %q: %w", ref, err)
	}
	return named.String(), nil
}

// getImage finds an image by reference or by ID (its config digest);
// nil when absent.
func (r *Runtime) getImage(ctx context.Context, ref string) (containerd.Image, error) {
	name, err := NormalizeImage(ref)
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(name, "sha256:") {
		img, err := r.client.GetImage(ctx, name)
		if errdefs.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return img, nil
	}
	imgs, err := r.client.ListImages(ctx)
	if err != nil {
		return nil, err
	}
	for _, img := range imgs {
		if cfg, err := img.Config(ctx); err == nil && cfg.Digest.String() == name {
			return img, nil
		}
	}
	return nil, nil
}

func imageConfig(ctx context.Context, img containerd.Image) (ocispec.ImageConfig, error) {
	desc, err := img.Config(ctx)
	if err != nil {
		return ocispec.ImageConfig{}, err
	}
	raw, err := content.ReadBlob(ctx, img.ContentStore(), desc)
	if err != nil {
		return ocispec.ImageConfig{}, err
	}
	var cfg ocispec.Image
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return ocispec.ImageConfig{}, err
	}
	return cfg.Config, nil
}

// describe reports an image as the kubelet sees it, unpacking it first if
// its layers are not in the snapshotter yet (an import or a pull by
// another client).
func (r *Runtime) describe(ctx context.Context, img containerd.Image) (cri.Image, error) {
	if ok, err := img.IsUnpacked(ctx, r.cfg.Snapshotter); err == nil && !ok {
		if err := img.Unpack(ctx, r.cfg.Snapshotter); err != nil {
			return cri.Image{}, fmt.Errorf("unpack image %s: %w", img.Name(), err)
		}
	}
	desc, err := img.Config(ctx)
	if err != nil {
		return cri.Image{}, err
	}
	size, _ := img.Size(ctx)
	out := cri.Image{ID: desc.Digest.String(), Size: size, CreatedAt: img.Metadata().CreatedAt}
	if cfg, err := imageConfig(ctx, img); err == nil {
		out.User = cfg.User
	}
	name := img.Name()
	if named, err := docker.ParseDockerRef(name); err == nil {
		if _, ok := named.(docker.Canonical); ok {
			out.RepoDigests = append(out.RepoDigests, name)
		} else {
			out.RepoTags = append(out.RepoTags, name)
			out.RepoDigests = append(out.RepoDigests, named.Name()+"@"+img.Target().Digest.String())
		}
	}
	return out, nil
}

// PullImage implements cri.ImageService.
func (r *Runtime) PullImage(ctx context.Context, ref string, auth *cri.Auth) (cri.Image, error) {
	ctx = r.nsctx(ctx)
	name, err := NormalizeImage(ref)
	if err != nil {
		return cri.Image{}, err
	}
	img, err := r.client.Pull(ctx, name,
		containerd.WithPullUnpack,
		containerd.WithPullSnapshotter(r.cfg.Snapshotter),
		containerd.WithResolver(r.resolver(auth)),
	)
	if err != nil {
		return cri.Image{}, fmt.Errorf("pull %s: %w", ref, err)
	}
	return r.describe(ctx, img)
}

// ImageStatus implements cri.ImageService.
func (r *Runtime) ImageStatus(ctx context.Context, ref string) (*cri.Image, error) {
	ctx = r.nsctx(ctx)
	img, err := r.getImage(ctx, ref)
	if err != nil || img == nil {
		return nil, err
	}
	out, err := r.describe(ctx, img)
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// ListImages implements cri.ImageService: one entry per image ID, with
// every name that points at it.
func (r *Runtime) ListImages(ctx context.Context) ([]cri.Image, error) {
	ctx = r.nsctx(ctx)
	imgs, err := r.client.ListImages(ctx)
	if err != nil {
		return nil, err
	}
	byID := map[string]int{}
	var out []cri.Image
	for _, img := range imgs {
		d, err := r.describe(ctx, img)
		if err != nil {
			continue
		}
		if i, ok := byID[d.ID]; ok {
			out[i].RepoTags = append(out[i].RepoTags, d.RepoTags...)
			out[i].RepoDigests = append(out[i].RepoDigests, d.RepoDigests...)
			if d.CreatedAt.After(out[i].CreatedAt) {
				out[i].CreatedAt = d.CreatedAt
			}
			continue
		}
		byID[d.ID] = len(out)
		out = append(out, d)
	}
	return out, nil
}

// RemoveImage implements cri.ImageService: by ID it removes every name.
func (r *Runtime) RemoveImage(ctx context.Context, ref string) error {
	ctx = r.nsctx(ctx)
	imgs, err := r.client.ListImages(ctx)
	if err != nil {
		return err
	}
	name, _ := NormalizeImage(ref)
	for _, img := range imgs {
		match := img.Name() == name
		if !match {
			if cfg, err := img.Config(ctx); err == nil && cfg.Digest.String() == name {
				match = true
			}
		}
		if match {
			// Synchronous, as containerd's CRI removes images: the
			// content is gone when this returns, so image GC and
			// eviction measure the space they freed.
			if err := r.client.ImageService().Delete(ctx, img.Name(), images.SynchronousDelete()); err != nil && !errdefs.IsNotFound(err) {
				return err
			}
		}
	}
	return nil
}

// ImportImages implements cri.ImageService. Docker archives carry their
// names; an OCI archive's "org.opencontainers.image.ref.name" is used when
// it is a full reference.
func (r *Runtime) ImportImages(ctx context.Context, rd io.Reader) ([]cri.Image, error) {
	ctx = r.nsctx(ctx)
	imported, err := r.client.Import(ctx, rd,
		containerd.WithImageRefTranslator(func(ref string) string {
			if n, err := NormalizeImage(ref); err == nil && strings.ContainsAny(ref, ":/") {
				return n
			}
			return ""
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("import images: %w", err)
	}
	var out []cri.Image
	for _, i := range imported {
		d, err := r.describe(ctx, containerd.NewImage(r.client, i))
		if err != nil {
			return out, err
		}
		out = append(out, d)
	}
	return out, nil
}
