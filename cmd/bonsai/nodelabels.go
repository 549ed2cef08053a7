package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	kubeletapis "k8s.io/kubelet/pkg/apis"

	"bonsai.dev/bonsai/apiserver"
	"bonsai.dev/bonsai/apiserver/authn"
)

// controlPlaneLabel marks the server's own node, as kubeadm and k3s do.
const controlPlaneLabel = "node-role.kubernetes.io/control-plane"

// splitNodeLabels separates the labels a kubelet may set on its own Node
// from those NodeRestriction keeps from it (kubernetes.io and k8s.io
// labels that are not the kubelet's, node-role among them).
func splitNodeLabels(all map[string]string) (self, privileged map[string]string) {
	self, privileged = map[string]string{}, map[string]string{}
	for k, v := range all {
		prefix, _, hasPrefix := strings.Cut(k, "/")
		k8s := hasPrefix && (prefix == "kubernetes.io" || strings.HasSuffix(prefix, ".kubernetes.io") || prefix == "k8s.io" || strings.HasSuffix(prefix, ".k8s.io"))
		if k8s && !kubeletapis.IsKubeletLabel(k) {
			privileged[k] = v
		} else {
			self[k] = v
		}
	}
	return self, privileged
}

// apiserverUser is the server acting on its own configuration, as
// kube-apiserver's loopback client does.
var apiserverUser = &authn.User{Name: "system:apiserver", Groups: []string{"system:masters", authn.GroupAuthenticated}}

// labelNode puts the labels the kubelet may not set on its own Node
// (the control-plane role, --node-labels under kubernetes.io) once the
// kubelet has registered it, with the server's own identity, as kubeadm
// marks its control plane.
func labelNode(ctx context.Context, api *apiserver.Server, node string, labels map[string]string, log *slog.Logger) {
	if len(labels) == 0 {
		return
	}
	cs, err := kubernetes.NewForConfig(api.ClientConfig(apiserverUser))
	if err != nil {
		log.Error("node labels", "err", err)
		return
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		_, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "bonsai"})
		if err == nil {
			return
		}
		if !apierrors.IsNotFound(err) {
			log.Warn("node labels", "node", node, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
