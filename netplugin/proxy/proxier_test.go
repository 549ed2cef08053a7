package proxy

import (
	"net/netip"
	"testing"

	"k8s.io/client-go/rest"

	"bonsai.dev/bonsai/client"
)

func TestNewRejectsBadConfig(t *testing.T) {
	inf := client.NewInformers(&rest.Config{Host: "https://127.0.0.1:1"})
	good := Config{Client: &client.Clientset{}, Informers: inf, NodeName: "n"}
	tests := []struct {
		name   string
		change func(*Config)
	}{
		{"no client", func(c *Config) { c.Client = nil }},
		{"no informers", func(c *Config) { c.Informers = nil }},
		{"no node name", func(c *Config) { c.NodeName = "" }},
		{"IPv6 cluster CIDR", func(c *Config) { c.ClusterCIDR = netip.MustParsePrefix("fd00::/48") }},
		{"IPv6 service CIDR", func(c *Config) { c.ServiceCIDR = netip.MustParsePrefix("fd01::/108") }},
		{"invalid node port address", func(c *Config) { c.NodePortAddresses = []netip.Prefix{{}} }},
		{"bridge name too long", func(c *Config) { c.Bridge = "bonsai-bridge-0123" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.change(&cfg)
			if _, err := New(cfg); err == nil {
				t.Error("New accepted it")
			}
		})
	}
}
