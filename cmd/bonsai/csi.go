package main

import (
	"context"
	"log/slog"

	"k8s.io/client-go/rest"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"bonsai.dev/bonsai/kubelet/csi"
	"bonsai.dev/bonsai/kubelet/pluginregistry"
)

// startCSI runs the node side of CSI: drivers' node plugins register in
// <kubelet-root-dir>/plugins_registry (shared with DRA drivers), go into
// the node's CSINode, and mount pods' CSI volumes; volumes are staged
// under <kubelet-root-dir>/plugins/kubernetes.io/csi and published into
// the pods' dirs under podsDir. A manager that cannot start leaves pods
// with CSI volumes waiting, not the node without pods.
func startCSI(ctx context.Context, cfg *serverConfig, rc *rest.Config, reg *pluginregistry.Registry, podsDir string, log *slog.Logger) *csi.Manager {
	m, err := csi.New(csi.Config{KubeletRootDir: cfg.KubeletRootDir, PodsDir: podsDir, NodeName: cfg.NodeName, API: rc, Logger: log})
	if err != nil {
		log.Error("CSI drivers are not available on this node", "err", err)
		return nil
	}
	reg.AddHandler(registerapi.CSIPlugin, m)
	m.Start(ctx)
	return m
}
