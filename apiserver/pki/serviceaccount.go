package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ensureServiceAccountKey loads the service-account signing key from dir,
// or generates one (ECDSA P-256, as the rest of the PKI) when there is
// none. An existing key is never replaced: every token issued with it
// would stop working. A key that cannot be read stops the start.
func ensureServiceAccountKey(dir string, c *Certs) (*ecdsa.PrivateKey, error) {
	path := filepath.Join(dir, ServiceAccountKeyFile)
	keyPEM, err := os.ReadFile(path)
	switch {
	case err == nil:
		block, _ := pem.Decode(keyPEM)
		if block == nil {
			return nil, fmt.Errorf("service-account key %s: no PEM block", path)
		}
		key, err := x509.ParseECPrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("service-account key %s: %w", path, err)
		}
		return key, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("service-account key: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, err
	}
	if err := writeFile(path, keyPEM, 0o600); err != nil {
		return nil, err
	}
	c.Issued = append(c.Issued, ServiceAccountKeyFile)
	return key, nil
}
