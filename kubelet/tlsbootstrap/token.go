// Package tlsbootstrap is how an agent joins a server: it reads a join
// token, finds the server's CA and checks it against the token's pin
// (kubeadm's --discovery-token-ca-cert-hash idea, in k3s's K10 format)
// without sending the token to an unchecked server, asks for the node's
// client certificate with the token's bootstrap identity through the
// certificates.k8s.io/v1 CSR API (kubelet TLS bootstrap), and keeps the
// node's client and serving certificates renewed before they expire.
//
// It owns the files of the node's certificates in its directory; it
// never signs or approves anything (the server's csrapproving and
// csrsigning controllers do).
package tlsbootstrap

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
)

// tokenPrefix starts a join token: "K10<hex sha256 of the CA's
// SubjectPublicKeyInfo>::<id>.<secret>".
const tokenPrefix = "K10"

var bootstrapToken = regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`)

// CAHash is the pin of a CA: the SHA-256 of its SubjectPublicKeyInfo, as
// kubeadm's --discovery-token-ca-cert-hash. It survives re-issuing the
// CA certificate with the same key.
func CAHash(ca *x509.Certificate) [sha256.Size]byte {
	return sha256.Sum256(ca.RawSubjectPublicKeyInfo)
}

// JoinToken is what `bonsai token create` prints: the CA's pin and the
// bootstrap token id.secret.
func JoinToken(ca *x509.Certificate, token string) string {
	h := CAHash(ca)
	return tokenPrefix + hex.EncodeToString(h[:]) + "::" + token
}

// ParseJoinToken splits a join token into the CA pin and the bootstrap
// token.
func ParseJoinToken(s string) (caHash [sha256.Size]byte, token string, err error) {
	s = strings.TrimSpace(s)
	pin, token, ok := strings.Cut(s, "::")
	if !ok || !strings.HasPrefix(pin, tokenPrefix) {
		if bootstrapToken.MatchString(s) {
			return caHash, "", fmt.Errorf("the token has no CA hash: use the whole token `bonsai token create` printed (K10<hash>::%s...)", s[:6])
		}
		return caHash, "", fmt.Errorf("not a join token: want K10<sha256 of the CA key, hex>::<id>.<secret>")
	}
	b, err := hex.DecodeString(strings.TrimPrefix(pin, tokenPrefix))
	if err != nil || len(b) != sha256.Size {
		return caHash, "", fmt.Errorf("the join token's CA hash is not %d hex digits", 2*sha256.Size)
	}
	if !bootstrapToken.MatchString(token) {
		return caHash, "", fmt.Errorf("the join token's bootstrap token is not <6 of [a-z0-9]>.<16 of [a-z0-9]>")
	}
	copy(caHash[:], b)
	return caHash, token, nil
}
