package client

import (
	appsv1 "k8s.io/client-go/kubernetes/typed/apps/v1"
	authorizationv1 "k8s.io/client-go/kubernetes/typed/authorization/v1"
	autoscalingv2 "k8s.io/client-go/kubernetes/typed/autoscaling/v2"
	batchv1 "k8s.io/client-go/kubernetes/typed/batch/v1"
	certificatesv1 "k8s.io/client-go/kubernetes/typed/certificates/v1"
	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	discoveryv1 "k8s.io/client-go/kubernetes/typed/discovery/v1"
	policyv1 "k8s.io/client-go/kubernetes/typed/policy/v1"
	resourcev1 "k8s.io/client-go/kubernetes/typed/resource/v1"
	storagev1 "k8s.io/client-go/kubernetes/typed/storage/v1"
	"k8s.io/client-go/rest"
)

// Clientset holds client-go's typed clients of the API groups bonsai's
// controllers write to, speaking protobuf. It stands in for
// kubernetes.Clientset, which would link the client of every group (and,
// through the informer factory, about 25 MB) into the binary.
type Clientset struct {
	Core          corev1.CoreV1Interface
	Apps          appsv1.AppsV1Interface
	Authorization authorizationv1.AuthorizationV1Interface
	Certificates  certificatesv1.CertificatesV1Interface
	Autoscaling   autoscalingv2.AutoscalingV2Interface
	Batch         batchv1.BatchV1Interface
	Coordination  coordinationv1.CoordinationV1Interface
	Discovery     discoveryv1.DiscoveryV1Interface
	Policy        policyv1.PolicyV1Interface
	Resource      resourcev1.ResourceV1Interface
	Storage       storagev1.StorageV1Interface
}

// NewClientset builds every client of the set from one config.
func NewClientset(cfg *rest.Config) (*Clientset, error) {
	c := rest.CopyConfig(cfg)
	c.ContentType = "application/vnd.kubernetes.protobuf"
	c.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	// One HTTP client for all groups, as kubernetes.NewForConfig does.
	hc, err := rest.HTTPClientFor(c)
	if err != nil {
		return nil, err
	}
	var s Clientset
	if s.Core, err = corev1.NewForConfigAndClient(c, hc); err != nil {
		return nil, err
	}
	if s.Apps, err = appsv1.NewForConfigAndClient(c, hc); err != nil {
		return nil, err
	}
	if s.Authorization, err = authorizationv1.NewForConfigAndClient(c, hc); err != nil {
		return nil, err
	}
	if s.Certificates, err = certificatesv1.NewForConfigAndClient(c, hc); err != nil {
		return nil, err
	}
	if s.Autoscaling, err = autoscalingv2.NewForConfigAndClient(c, hc); err != nil {
		return nil, err
	}
	if s.Batch, err = batchv1.NewForConfigAndClient(c, hc); err != nil {
		return nil, err
	}
	if s.Coordination, err = coordinationv1.NewForConfigAndClient(c, hc); err != nil {
		return nil, err
	}
	if s.Discovery, err = discoveryv1.NewForConfigAndClient(c, hc); err != nil {
		return nil, err
	}
	if s.Policy, err = policyv1.NewForConfigAndClient(c, hc); err != nil {
		return nil, err
	}
	if s.Storage, err = storagev1.NewForConfigAndClient(c, hc); err != nil {
		return nil, err
	}
	if s.Resource, err = resourcev1.NewForConfigAndClient(c, hc); err != nil {
		return nil, err
	}
	return &s, nil
}
