package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"bonsai.dev/bonsai/apiserver"
	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/deploy"
	"bonsai.dev/bonsai/deploy/helm"
)

// deployUser applies the manifests directory: its files may hold any
// kind, as a cluster admin's kubectl apply may.
var deployUser = &authn.User{Name: "system:bonsai-deploy", Groups: []string{"system:masters", authn.GroupAuthenticated}}

// helmUser installs HelmCharts: a chart may hold any kind.
var helmUser = &authn.User{Name: "system:bonsai-helm-controller", Groups: []string{"system:masters", authn.GroupAuthenticated}}

func (o *serverOptions) addDeployFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.manifestsDir, "manifests-dir", "", "directory whose *.yaml, *.yml and *.json files are applied (server-side apply, field manager bonsai-deploy) at start and whenever they change; a removed file's objects are deleted; <file>.skip next to a file leaves it alone (default <data-dir>/server/manifests)")
	fs.BoolVar(&o.disableHelm, "disable-helm-controller", false, "do not run the built-in helm controller of helm.cattle.io/v1 HelmCharts (k3s's flag) (default false)")
	fs.StringSliceVar(&o.disable, "disable", nil, "do not deploy these files of --manifests-dir (names without extension), and delete what they deployed before; repeatable (default none)")
}

func defaultManifestsDir(dataDir string) string {
	return filepath.Join(dataDir, "server", "manifests")
}

// validateDeploy checks --manifests-dir and --disable.
func (o *serverOptions) validateDeploy(c *serverConfig) error {
	c.ManifestsDir = o.manifestsDir
	if c.ManifestsDir == "" {
		c.ManifestsDir = defaultManifestsDir(c.DataDir)
	} else if !filepath.IsAbs(c.ManifestsDir) {
		return fmt.Errorf("--manifests-dir %q: must be an absolute path", o.manifestsDir)
	}
	c.ManifestsDir = filepath.Clean(c.ManifestsDir)
	c.DisableHelmController = o.disableHelm
	c.DisabledManifests = nil
	for _, d := range o.disable {
		d = strings.TrimSpace(d)
		if d == "" {
			continue
		}
		if strings.ContainsRune(d, '/') {
			return fmt.Errorf("--disable %q: name a file of --manifests-dir, without directory or extension", d)
		}
		c.DisabledManifests = append(c.DisabledManifests, deploy.AddonName(d))
	}
	return nil
}

// startDeploy applies the manifests directory once the API serves.
func startDeploy(ctx context.Context, cfg *serverConfig, api *apiserver.Server, log *slog.Logger) error {
	// The data dir's is made, for the user to find; one given
	// elsewhere is the user's to make.
	if cfg.ManifestsDir == defaultManifestsDir(cfg.DataDir) {
		if err := os.MkdirAll(cfg.ManifestsDir, 0o700); err != nil {
			return fmt.Errorf("manifests directory: %w", err)
		}
	}
	c, err := deploy.New(deploy.Config{
		RESTConfig: api.ClientConfig(deployUser),
		Dir:        cfg.ManifestsDir,
		Disabled:   cfg.DisabledManifests,
		Logger:     log,
	})
	if err != nil {
		return err
	}
	go func() {
		if err := c.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error("manifests deployer stopped", "err", err)
		}
	}()
	return nil
}

// staticChartsDir is where k3s keeps the charts it serves at
// https://%{KUBERNETES_API}%/static/charts/; bonsai reads them there too.
func staticChartsDir(dataDir string) string {
	return filepath.Join(dataDir, "server", "static", "charts")
}

// startHelm runs the HelmCharts once the API serves.
func startHelm(ctx context.Context, cfg *serverConfig, api *apiserver.Server, log *slog.Logger) error {
	if cfg.DisableHelmController {
		return nil
	}
	c, err := helm.New(helm.Config{
		RESTConfig: api.ClientConfig(helmUser),
		ChartDirs:  []string{cfg.ManifestsDir, staticChartsDir(cfg.DataDir)},
		Logger:     log,
	})
	if err != nil {
		return err
	}
	go func() {
		if err := c.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error("helm controller stopped", "err", err)
		}
	}()
	return nil
}
