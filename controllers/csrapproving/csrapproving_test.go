package csrapproving

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/apiserver/authz"
	"bonsai.dev/bonsai/apiserver/registry/certificates"
	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

// request is a PEM certificate request for subject and SANs.
func request(t *testing.T, cn string, orgs []string, dns []string, ips []string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn, Organization: orgs}, DNSNames: dns}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

// registerNode creates Node name with addresses as that node's kubelet
// does.
func registerNode(t *testing.T, e *clustertest.Env, name string, addrs ...corev1.NodeAddress) {
	t.Helper()
	cs, err := client.NewClientset(e.ConfigFor(nodeUser(name)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Core.Nodes().Create(e.Ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Addresses: addrs}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

type csrCase struct {
	name, signer string
	as           *authn.User
	cn           string
	orgs         []string
	dns, ips     []string
	usages       []certificatesv1.KeyUsage
	approved     bool
	// forbidden: the requester may not even create it.
	forbidden bool
}

var (
	clientUsages  = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	servingUsages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageServerAuth}
	nodes         = []string{certificates.NodesGroup}
)

func bootstrapUser(groups ...string) *authn.User {
	return &authn.User{Name: "system:bootstrap:abcdef", Groups: append([]string{authn.GroupBootstrappers, authn.GroupAuthenticated}, groups...)}
}

func nodeUser(name string) *authn.User {
	return &authn.User{Name: "system:node:" + name, Groups: []string{certificates.NodesGroup, authn.GroupAuthenticated}}
}

// Kubelet requests are approved by upstream's rules, and forged ones are
// not: each case is created by its requester through the API server's
// full chain, and the controller decides. The cases that must stay
// pending are created first; the single worker has looked at them by
// the time the last approvable one is approved.
func TestApprovesKubeletRequests(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{WithoutServiceAccounts: true, Identities: true})
	// n1 has registered with its addresses (the serving rule checks them).
	registerNode(t, e, "n1", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}, corev1.NodeAddress{Type: corev1.NodeHostName, Address: "n1"})
	clientSigner, servingSigner := certificatesv1.KubeAPIServerClientKubeletSignerName, certificatesv1.KubeletServingSignerName
	token := bootstrapUser(authz.GroupDefaultNodeToken)
	cases := []csrCase{
		// A token of a group bound to nothing.
		{name: "unbound-token", signer: clientSigner, as: bootstrapUser("system:bootstrappers:other"), cn: "system:node:n9", orgs: nodes, usages: clientUsages, forbidden: true},
		// Forged requests from a good token.
		{name: "token-extra-usage", signer: clientSigner, as: token, cn: "system:node:n9", orgs: nodes,
			usages: append([]certificatesv1.KeyUsage{certificatesv1.UsageServerAuth}, clientUsages...)},
		{name: "token-masters", signer: clientSigner, as: token, cn: "system:node:n9", orgs: []string{"system:nodes", "system:masters"}, usages: clientUsages},
		{name: "token-not-a-node", signer: clientSigner, as: token, cn: "system:admin", orgs: nodes, usages: clientUsages},
		{name: "token-with-san", signer: clientSigner, as: token, cn: "system:node:n9", orgs: nodes, dns: []string{"kubernetes"}, usages: clientUsages},
		{name: "token-serving", signer: servingSigner, as: token, cn: "system:node:n1", orgs: nodes, ips: []string{"10.0.0.1"}, usages: servingUsages},
		// A node asking for another node's client certificate: only
		// selfnodeclient is bound to system:nodes.
		{name: "node-other-client", signer: clientSigner, as: nodeUser("n2"), cn: "system:node:n1", orgs: nodes, usages: clientUsages},
		// Serving certificates: only for the node's own addresses, by
		// the node itself.
		{name: "node-other-address", signer: servingSigner, as: nodeUser("n1"), cn: "system:node:n1", orgs: nodes, ips: []string{"10.0.0.1", "10.0.0.99"}, usages: servingUsages},
		{name: "node-other-name", signer: servingSigner, as: nodeUser("n1"), cn: "system:node:n1", orgs: nodes, dns: []string{"kubernetes.default"}, usages: servingUsages},
		{name: "node-serving-for-other", signer: servingSigner, as: nodeUser("n2"), cn: "system:node:n1", orgs: nodes, ips: []string{"10.0.0.1"}, usages: servingUsages},
		{name: "node-unregistered-serving", signer: servingSigner, as: nodeUser("n3"), cn: "system:node:n3", orgs: nodes, ips: []string{"10.0.0.3"}, usages: servingUsages},
		{name: "node-serving-client-usage", signer: servingSigner, as: nodeUser("n1"), cn: "system:node:n1", orgs: nodes, ips: []string{"10.0.0.1"},
			usages: append([]certificatesv1.KeyUsage{certificatesv1.UsageClientAuth}, servingUsages...)},
		// What the controller approves.
		{name: "token-client", signer: clientSigner, as: token, cn: "system:node:n9", orgs: nodes, usages: clientUsages, approved: true},
		{name: "node-self-client", signer: clientSigner, as: nodeUser("n1"), cn: "system:node:n1", orgs: nodes,
			usages: []certificatesv1.KeyUsage{certificatesv1.UsageKeyEncipherment, certificatesv1.UsageClientAuth, certificatesv1.UsageDigitalSignature}, approved: true},
		{name: "node-serving", signer: servingSigner, as: nodeUser("n1"), cn: "system:node:n1", orgs: nodes, dns: []string{"n1"}, ips: []string{"10.0.0.1"}, usages: servingUsages, approved: true},
	}
	for _, c := range cases {
		cs, err := client.NewClientset(e.ConfigFor(c.as))
		if err != nil {
			t.Fatal(err)
		}
		_, err = cs.Certificates.CertificateSigningRequests().Create(e.Ctx, &certificatesv1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{Name: c.name},
			Spec:       certificatesv1.CertificateSigningRequestSpec{Request: request(t, c.cn, c.orgs, c.dns, c.ips), SignerName: c.signer, Usages: c.usages},
		}, metav1.CreateOptions{})
		if c.forbidden {
			if !apierrors.IsForbidden(err) {
				t.Errorf("%s: create as %s: %v, want Forbidden", c.name, c.as.Name, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: create as %s: %v", c.name, c.as.Name, err)
		}
	}
	clustertest.Start(e, func(inf *client.Informers) (*Controller, error) {
		return New(Config{Client: e.Client, Informers: inf, Logger: e.Log})
	})
	clustertest.Eventually(t, 10*time.Second, func() error {
		for _, c := range cases {
			if !c.approved {
				continue
			}
			csr, err := e.Client.Certificates.CertificateSigningRequests().Get(e.Ctx, c.name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if certificates.Condition(csr) != "Approved" {
				return fmt.Errorf("%s is %s, want Approved", c.name, certificates.Condition(csr))
			}
			if cond := csr.Status.Conditions[0]; cond.Reason != "AutoApproved" {
				return fmt.Errorf("%s approved with reason %q, want AutoApproved", c.name, cond.Reason)
			}
		}
		return nil
	})
	for _, c := range cases {
		if c.forbidden {
			continue
		}
		csr, err := e.Client.Certificates.CertificateSigningRequests().Get(e.Ctx, c.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := certificates.Condition(csr); !c.approved && got != "Pending" {
			t.Errorf("%s (requested by %s) is %s, want it left Pending", c.name, c.as.Name, got)
		}
	}
}

// A serving request of a node not registered yet is approved once its
// Node has the addresses: the controller looks again.
func TestApprovesServingOnceNodeHasAddresses(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{WithoutServiceAccounts: true, Identities: true})
	clustertest.Start(e, func(inf *client.Informers) (*Controller, error) {
		return New(Config{Client: e.Client, Informers: inf, Logger: e.Log})
	})
	cs, err := client.NewClientset(e.ConfigFor(nodeUser("late")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Certificates.CertificateSigningRequests().Create(e.Ctx, &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "late-serving"},
		Spec: certificatesv1.CertificateSigningRequestSpec{Request: request(t, "system:node:late", nodes, nil, []string{"10.0.0.7"}),
			SignerName: certificatesv1.KubeletServingSignerName, Usages: servingUsages},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	csr, err := e.Client.Certificates.CertificateSigningRequests().Get(e.Ctx, "late-serving", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := certificates.Condition(csr); got != "Pending" {
		t.Fatalf("before the node registered: %s, want Pending", got)
	}
	registerNode(t, e, "late", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.0.0.7"})
	clustertest.Eventually(t, 15*time.Second, func() error {
		csr, err := e.Client.Certificates.CertificateSigningRequests().Get(e.Ctx, "late-serving", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := certificates.Condition(csr); got != "Approved" {
			return fmt.Errorf("%s, want Approved", got)
		}
		return nil
	})
}
