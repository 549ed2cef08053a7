package containerd

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/containerd/containerd/remotes"
	"github.com/containerd/containerd/remotes/docker"
	"sigs.k8s.io/yaml"

	"bonsai.dev/bonsai/kubelet/cri"
)

// Registries is <data-dir>/registries.yaml, in k3s's format so existing
// files carry over: mirrors per registry host (endpoints tried in order,
// then the registry itself) and per-host auth and TLS.
type Registries struct {
	Mirrors map[string]Mirror         `json:"mirrors"`
	Configs map[string]RegistryConfig `json:"configs"`
}

// Mirror lists the endpoints that serve a registry's images.
type Mirror struct {
	Endpoints []string          `json:"endpoint"`
	Rewrites  map[string]string `json:"rewrite"`
}

// RegistryConfig holds one host's credentials and TLS settings.
type RegistryConfig struct {
	Auth *struct {
		Username      string `json:"username"`
		Password      string `json:"password"`
		Auth          string `json:"auth"`
		IdentityToken string `json:"identity_token"`
	} `json:"auth"`
	TLS *struct {
		CAFile             string `json:"ca_file"`
		CertFile           string `json:"cert_file"`
		KeyFile            string `json:"key_file"`
		InsecureSkipVerify bool   `json:"insecure_skip_verify"`
	} `json:"tls"`
}

// LoadRegistries reads a registries.yaml; a missing file is no
// configuration, a malformed one an error naming the file.
func LoadRegistries(path string) (*Registries, error) {
	raw, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r Registries
	if err := yaml.UnmarshalStrict(raw, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for host, m := range r.Mirrors {
		for _, ep := range m.Endpoints {
			u, err := url.Parse(ep)
			if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
				return nil, fmt.Errorf("%s: mirror %q: endpoint %q is not an http(s) URL", path, host, ep)
			}
		}
		for re := range m.Rewrites {
			if _, err := regexp.Compile(re); err != nil {
				return nil, fmt.Errorf("%s: mirror %q: rewrite %q: %w", path, host, re, err)
			}
		}
	}
	for host, c := range r.Configs {
		if c.Auth != nil && c.Auth.Auth != "" {
			if _, err := base64.StdEncoding.DecodeString(c.Auth.Auth); err != nil {
				return nil, fmt.Errorf("%s: configs %q: auth is not base64", path, host)
			}
		}
		if c.TLS == nil {
			continue
		}
		if c.TLS.CAFile != "" {
			pem, err := os.ReadFile(c.TLS.CAFile)
			if err != nil {
				return nil, fmt.Errorf("%s: configs %q: ca_file: %w", path, host, err)
			}
			if !x509.NewCertPool().AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("%s: configs %q: ca_file %s holds no PEM certificate", path, host, c.TLS.CAFile)
			}
		}
		if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
			return nil, fmt.Errorf("%s: configs %q: cert_file and key_file go together", path, host)
		}
		if c.TLS.CertFile != "" {
			if _, err := tls.LoadX509KeyPair(c.TLS.CertFile, c.TLS.KeyFile); err != nil {
				return nil, fmt.Errorf("%s: configs %q: cert_file/key_file: %w", path, host, err)
			}
		}
	}
	return &r, nil
}

// resolver builds a resolver for one pull: the pod's pull-secret
// credentials (if any) win over registries.yaml's.
func (r *Runtime) resolver(auth *cri.Auth) remotes.Resolver {
	regs := r.cfg.Hosts
	if regs == nil {
		regs = &Registries{}
	}
	creds := func(host string) (string, string, error) {
		if auth != nil && (auth.Username != "" || auth.IdentityToken != "") {
			if auth.IdentityToken != "" {
				return "", auth.IdentityToken, nil
			}
			return auth.Username, auth.Password, nil
		}
		c, ok := regs.Configs[host]
		if !ok || c.Auth == nil {
			return "", "", nil
		}
		if c.Auth.IdentityToken != "" {
			return "", c.Auth.IdentityToken, nil
		}
		if c.Auth.Auth != "" {
			raw, _ := base64.StdEncoding.DecodeString(c.Auth.Auth)
			user, pass, _ := strings.Cut(string(raw), ":")
			return user, pass, nil
		}
		return c.Auth.Username, c.Auth.Password, nil
	}
	authorizer := docker.NewDockerAuthorizer(docker.WithAuthCreds(creds))
	return docker.NewResolver(docker.ResolverOptions{Hosts: r.registryHosts(regs, authorizer)})
}

// registryHosts lists, for a registry host, the endpoints a pull tries
// in order: its mirrors, then the registry itself unless
// NoDefaultEndpoint drops it for a mirrored registry.
func (r *Runtime) registryHosts(regs *Registries, authorizer docker.Authorizer) docker.RegistryHosts {
	hostFor := func(endpoint *url.URL) docker.RegistryHost {
		path := strings.TrimSuffix(endpoint.Path, "/")
		if !strings.HasSuffix(path, "/v2") {
			path += "/v2"
		}
		return docker.RegistryHost{
			Client:     &http.Client{Transport: transportFor(regs.Configs[endpoint.Host]), Timeout: 0},
			Authorizer: authorizer, Host: endpoint.Host, Scheme: endpoint.Scheme, Path: path,
			Capabilities: docker.HostCapabilityPull | docker.HostCapabilityResolve,
		}
	}
	defaults := docker.ConfigureDefaultRegistries(docker.WithPlainHTTP(docker.MatchLocalhost), docker.WithAuthorizer(authorizer))
	return func(host string) ([]docker.RegistryHost, error) {
		m, ok := regs.Mirrors[host]
		if !ok {
			m, ok = regs.Mirrors["*"]
		}
		var out []docker.RegistryHost
		if ok {
			for _, ep := range m.Endpoints {
				u, err := url.Parse(ep)
				if err != nil {
					continue
				}
				out = append(out, hostFor(u))
			}
			if r.cfg.NoDefaultEndpoint {
				return out, nil
			}
		}
		def, err := defaults(host)
		if err != nil {
			return nil, err
		}
		for i := range def {
			def[i].Client = &http.Client{Transport: transportFor(regs.Configs[host])}
		}
		return append(out, def...), nil
	}
}

func transportFor(c RegistryConfig) http.RoundTripper {
	t := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConns:        10,
		IdleConnTimeout:     30 * time.Second,
	}
	if c.TLS != nil {
		cfg := &tls.Config{InsecureSkipVerify: c.TLS.InsecureSkipVerify}
		if c.TLS.CAFile != "" {
			if pem, err := os.ReadFile(c.TLS.CAFile); err == nil {
				pool := x509.NewCertPool()
				pool.AppendCertsFromPEM(pem)
				cfg.RootCAs = pool
			}
		}
		if c.TLS.CertFile != "" && c.TLS.KeyFile != "" {
			if cert, err := tls.LoadX509KeyPair(c.TLS.CertFile, c.TLS.KeyFile); err == nil {
				cfg.Certificates = []tls.Certificate{cert}
			}
		}
		t.TLSClientConfig = cfg
	}
	return t
}
