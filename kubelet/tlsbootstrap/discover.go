package tlsbootstrap

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"
)

// ErrCAMismatch is DiscoverCA's answer to a server whose CA is not the
// token's.
var ErrCAMismatch = errors.New("the server's CA does not match the join token's CA hash: refusing to join (wrong server, or a machine in the middle)")

// DiscoverCA finds the CA of the API server at serverURL
// (https://host:port) and checks it against caHash: the server sends its
// CA after its serving certificate, and the CA is accepted only if its
// pin is caHash and it signs the serving certificate for the host
// dialled, which the server proves it holds the key of in the handshake.
// Nothing is sent to the server but a TLS handshake. It returns the CA
// as PEM.
func DiscoverCA(ctx context.Context, serverURL string, caHash [sha256.Size]byte) ([]byte, error) {
	u, err := url.Parse(serverURL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("--server %q: want https://HOST:PORT", serverURL)
	}
	host := u.Hostname()
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(host, "6443")
	}
	var ca *x509.Certificate
	conf := &tls.Config{
		ServerName: host,
		// Checked below against the pin instead of a trust store the
		// agent does not have yet.
		InsecureSkipVerify: true,
		MinVersion:         tls.VersionTLS12,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the server sent no certificate")
			}
			for _, c := range cs.PeerCertificates[1:] {
				if c.IsCA && CAHash(c) == caHash {
					ca = c
				}
			}
			if ca == nil {
				return ErrCAMismatch
			}
			roots := x509.NewCertPool()
			roots.AddCert(ca)
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{DNSName: host, Roots: roots})
			if err != nil {
				return fmt.Errorf("the server's certificate does not verify against the pinned CA: %w", err)
			}
			return nil
		},
	}
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 10 * time.Second}, Config: conf}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		if errors.Is(err, ErrCAMismatch) {
			h := hex.EncodeToString(caHash[:])
			return nil, fmt.Errorf("%s %s: %w (token pins sha256:%s)", "server", addr, ErrCAMismatch, h)
		}
		return nil, fmt.Errorf("server %s: %w", addr, err)
	}
	conn.Close()
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw}), nil
}

func parsePEM(data []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(b.Bytes)
}
