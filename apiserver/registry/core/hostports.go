package core

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"bonsai.dev/bonsai/apiserver/registry"
)

// ReservedPort is a port of the node that bonsai itself serves.
type ReservedPort = registry.ReservedPort

// ValidateHostPorts refuses a container port whose host side is a
// reserved port: its hostPort, or its containerPort on the host network.
func ValidateHostPorts(s *corev1.PodSpec, reserved []ReservedPort, p *field.Path) field.ErrorList {
	if len(reserved) == 0 {
		return nil
	}
	var errs field.ErrorList
	check := func(cs []corev1.Container, cp *field.Path) {
		for i, c := range cs {
			for j, port := range c.Ports {
				host, fp := port.HostPort, cp.Index(i).Child("ports").Index(j).Child("hostPort")
				if host == 0 && s.HostNetwork {
					host, fp = port.ContainerPort, cp.Index(i).Child("ports").Index(j).Child("containerPort")
				}
				proto := port.Protocol
				if proto == "" {
					proto = corev1.ProtocolTCP
				}
				for _, r := range reserved {
					if host == r.Port && proto == r.Protocol {
						errs = append(errs, field.Forbidden(fp, fmt.Sprintf("port %d/%s of the node is reserved for %s", r.Port, r.Protocol, r.For)))
					}
				}
			}
		}
	}
	check(s.InitContainers, p.Child("initContainers"))
	check(s.Containers, p.Child("containers"))
	return errs
}
