package apiserver

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"bonsai.dev/bonsai/apiserver/registry/core"
)

// afterDelete gives back what a deleted Service held. A failure leaves a
// record without a Service, which the repair loop frees.
func (s *Server) afterDelete(res *resource, obj runtime.Object) {
	svc, ok := obj.(*corev1.Service)
	if !ok || res.gvr != gvr("", "v1", "services") {
		return
	}
	ctx := context.WithoutCancel(s.ctx)
	for _, ip := range core.ServiceIPs(svc) {
		if err := s.releaseIP(ctx, ip, svc.Namespace, svc.Name); err != nil {
			s.log.Warn("cluster IP of a deleted service not released; the repair loop will", "service", svc.Namespace+"/"+svc.Name, "err", err)
		}
	}
	for _, p := range core.ServiceNodePorts(svc) {
		if err := s.releaseNodePort(ctx, p, svc); err != nil {
			s.log.Warn("node port of a deleted service not released; the repair loop will", "service", svc.Namespace+"/"+svc.Name, "err", err)
		}
	}
}
