package pki

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Services are the names `bonsai certificate rotate --service` takes,
// k3s's for the same certificates, and the leaf files of each.
var Services = map[string][]string{
	"admin":      {AdminCertFile, AdminKeyFile},
	"api-server": {ServingCertFile, ServingKeyFile, KubeletClientCertFile, KubeletClientKeyFile},
	"kubelet":    {KubeletServingCertFile, KubeletServingKeyFile},
	"auth-proxy": {FrontProxyClientCertFile, FrontProxyClientKeyFile},
}

// ServiceNames are the keys of Services, sorted.
func ServiceNames() []string {
	names := make([]string, 0, len(Services))
	for n := range Services {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// certFiles are every certificate file bonsai keeps, CAs first.
var certFiles = []string{CACertFile, FrontProxyCACertFile, ServingCertFile, AdminCertFile,
	KubeletClientCertFile, KubeletServingCertFile, FrontProxyClientCertFile}

// Certificate statuses, k3s's words.
const (
	StatusOK          = "OK"
	StatusWarning     = "WARNING"
	StatusExpired     = "EXPIRED"
	StatusNotYetValid = "NOT YET VALID"
)

// CertStatus is one certificate on disk as `bonsai certificate check`
// shows it.
type CertStatus struct {
	File      string
	Subject   string
	Usages    []string
	NotBefore time.Time
	NotAfter  time.Time
	Status    string
}

// Inspect reads the certificates in dir and says how each stands at now:
// WARNING within 90 days of its end (when a leaf is renewed at the
// latest), as k3s says it.
func Inspect(dir string, now time.Time) ([]CertStatus, error) {
	if st, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("certificate directory %s: %v", dir, pathErr(err))
	} else if !st.IsDir() {
		return nil, fmt.Errorf("certificate directory %s is not a directory", dir)
	}
	var out []CertStatus
	for _, f := range certFiles {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %v", filepath.Join(dir, f), pathErr(err))
		}
		block, _ := pem.Decode(data)
		if block == nil || block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("%s: no PEM certificate", filepath.Join(dir, f))
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", filepath.Join(dir, f), err)
		}
		s := CertStatus{File: f, Subject: cert.Subject.CommonName, Usages: usages(cert), NotBefore: cert.NotBefore, NotAfter: cert.NotAfter, Status: StatusOK}
		switch {
		case now.Before(cert.NotBefore):
			s.Status = StatusNotYetValid
		case !now.Before(cert.NotAfter):
			s.Status = StatusExpired
		case cert.NotAfter.Sub(now) < renewMargin:
			s.Status = StatusWarning
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("certificate directory %s holds no bonsai certificates", dir)
	}
	return out, nil
}

func pathErr(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// usages names a certificate's uses as k3s does: CertSign for a CA,
// ServerAuth and ClientAuth for the extended ones.
func usages(c *x509.Certificate) []string {
	var u []string
	if c.IsCA {
		u = append(u, "CertSign")
	}
	for _, e := range c.ExtKeyUsage {
		switch e {
		case x509.ExtKeyUsageServerAuth:
			u = append(u, "ServerAuth")
		case x509.ExtKeyUsageClientAuth:
			u = append(u, "ClientAuth")
		}
	}
	return u
}

// expirationDesc is the /metrics gauge of every certificate in force.
var expirationDesc = prometheus.NewDesc("bonsai_certificate_expiration_timestamp_seconds",
	"When a certificate bonsai keeps expires (NotAfter, Unix seconds), by file and subject; leaves are renewed long before.",
	[]string{"file", "subject", "usages"}, nil)

// Collector is the expiration gauge, read from the certificates in force
// at each scrape, so a renewal shows at the next one.
func (c *Certs) Collector() prometheus.Collector { return certCollector{c} }

type certCollector struct{ c *Certs }

func (cc certCollector) Describe(ch chan<- *prometheus.Desc) { ch <- expirationDesc }

func (cc certCollector) Collect(ch chan<- prometheus.Metric) {
	emit := func(file string, cert *x509.Certificate) {
		ch <- prometheus.MustNewConstMetric(expirationDesc, prometheus.GaugeValue, float64(cert.NotAfter.Unix()),
			file, cert.Subject.CommonName, strings.Join(usages(cert), ","))
	}
	emit(CACertFile, cc.c.CA.Cert)
	emit(FrontProxyCACertFile, cc.c.FrontProxy.CA.Cert)
	for _, p := range cc.c.pairs {
		emit(p.CertFile, p.Leaf())
	}
}

// RotateFiles makes the next start re-issue the leaves of services, as
// `k3s certificate rotate` does: the whole directory is first copied to
// <dir>-<unix seconds> (returned), then the services' files are removed.
// The server must be stopped; the CAs are never touched.
func RotateFiles(dir string, services []string, now time.Time) (backup string, removed []string, err error) {
	for _, s := range services {
		if _, ok := Services[s]; !ok {
			return "", nil, fmt.Errorf("service %s is not recognized (bonsai's: %s)", s, strings.Join(ServiceNames(), ", "))
		}
	}
	if len(services) == 0 {
		services = ServiceNames()
	}
	if _, err := Inspect(dir, now); err != nil {
		return "", nil, err
	}
	backup = fmt.Sprintf("%s-%d", dir, now.Unix())
	if err := copyDir(dir, backup); err != nil {
		return "", nil, fmt.Errorf("back up %s: %w", dir, err)
	}
	for _, s := range services {
		for _, f := range Services[s] {
			err := os.Remove(filepath.Join(dir, f))
			switch {
			case err == nil:
				removed = append(removed, f)
			case !errors.Is(err, os.ErrNotExist):
				return backup, removed, fmt.Errorf("remove %s: %v", filepath.Join(dir, f), pathErr(err))
			}
		}
	}
	slices.Sort(removed)
	return backup, removed, nil
}

// copyDir copies the regular files of src into a new directory dst with
// their modes (keys stay 0600).
func copyDir(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	if err := os.Mkdir(dst, 0o700); err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := writeFile(filepath.Join(dst, e.Name()), data, info.Mode().Perm()); err != nil {
			return err
		}
	}
	return nil
}
