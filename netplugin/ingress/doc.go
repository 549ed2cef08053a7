// Package ingress is bonsai's built-in Ingress controller: an HTTP and
// HTTPS reverse proxy in the bonsai process, serving on the node the
// Ingresses of its IngressClass ("bonsai", controller
// bonsai.dev/ingress), as ingress-nginx or Traefik would from a pod.
//
// It owns the IngressClass it creates at start, the listeners it is
// given, and the status.loadBalancer of the Ingresses it serves; it
// writes Warning events on Ingresses it cannot fully serve. It reads
// Ingresses, IngressClasses, Services, EndpointSlices, TLS Secrets and
// Nodes through informers, and sends requests straight to the ready
// endpoints of the backends' Services (no cluster IP, no nftables).
// Routing rules are in the routing sub-package.
//
// Every change rebuilds the whole configuration (the routing table,
// upstreams, certificates) off the request path and swaps it in with one
// atomic store: requests in flight keep the configuration they started
// with, connections are never closed for a change.
package ingress
