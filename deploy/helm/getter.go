package helm

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/cli-runtime/pkg/resource"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/kubectl/pkg/validation"
)

// restGetter hands helm's kube client the in-process API: no kubeconfig
// file, the namespace of the release.
type restGetter struct {
	cfg    *rest.Config
	dc     discovery.CachedDiscoveryInterface
	mapper meta.RESTMapper
}

func newRESTGetter(cfg *rest.Config) (*restGetter, error) {
	d, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dc := memory.NewMemCacheClient(d)
	return &restGetter{cfg: cfg, dc: dc, mapper: restmapper.NewDeferredDiscoveryRESTMapper(dc)}, nil
}

func (g *restGetter) ToRESTConfig() (*rest.Config, error) { return rest.CopyConfig(g.cfg), nil }

func (g *restGetter) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	return g.dc, nil
}

func (g *restGetter) ToRESTMapper() (meta.RESTMapper, error) { return g.mapper, nil }

// ToRawKubeConfigLoader is asked only for a default namespace, which
// helm's kube client is given directly.
func (g *restGetter) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	return clientcmd.NewDefaultClientConfig(*clientcmdapi.NewConfig(), &clientcmd.ConfigOverrides{})
}

// factory is what helm's kube client asks of kubectl's: kubectl's own
// (cmdutil.NewFactory) is not linked in, for size. Its Validator checks
// nothing client-side, as kubectl's does against an API server that
// takes fieldValidation (bonsai's): helm's requests are validated there.
type factory struct{ g *restGetter }

func (f factory) ToRawKubeConfigLoader() clientcmd.ClientConfig { return f.g.ToRawKubeConfigLoader() }

func (f factory) DynamicClient() (dynamic.Interface, error) { return dynamic.NewForConfig(f.g.cfg) }

func (f factory) KubernetesClientSet() (*kubernetes.Clientset, error) {
	return kubernetes.NewForConfig(f.g.cfg)
}

func (f factory) NewBuilder() *resource.Builder { return resource.NewBuilder(f.g) }

func (f factory) Validator(string) (validation.Schema, error) { return validation.NullSchema{}, nil }
