package pki

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

const day = 24 * time.Hour
const year = 365 * day

func TestRenewAt(t *testing.T) {
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		life time.Duration
		want time.Duration // after NotBefore
	}{
		// Two thirds come first for a one-year leaf: 243 days < 275.
		{"one year", year, year / 3 * 2},
		{"two years", 2 * year, 2 * year / 3 * 2},
		// 90 days before the end comes first for a short one.
		{"120 days", 120 * day, 30 * day},
		{"270 days", 270 * day, 180 * day},
		{"271 days", 271 * day, 271 * day / 3 * 2},
		{"200 days", 200 * day, 110 * day},
		// Shorter than 90 days: due at once.
		{"60 days", 60 * day, -30 * day},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leaf := &x509.Certificate{NotBefore: start, NotAfter: start.Add(tc.life)}
			if got := renewAt(leaf); !got.Equal(start.Add(tc.want)) {
				t.Errorf("renewAt = NotBefore%+v, want NotBefore%+v", got.Sub(start), tc.want)
			}
		})
	}
}

// rotationEnv is a Certs on a fake clock behind a TLS server that serves
// its serving pair and checks client certificates as cmd/bonsai does.
type rotationEnv struct {
	t       *testing.T
	clk     *clocktesting.FakePassiveClock
	c       *Certs
	addr    string
	renewed [][]string
}

func newRotationEnv(t *testing.T, start time.Time) *rotationEnv {
	e := &rotationEnv{t: t, clk: clocktesting.NewFakePassiveClock(start)}
	ks := testSANs("node-a")
	c, err := Open(Options{Dir: t.TempDir(), SANs: testSANs(), KubeletSANs: &ks, Clock: e.clk})
	if err != nil {
		t.Fatal(err)
	}
	e.c = c
	c.OnRenew(func(ps []*KeyPair) {
		var names []string
		for _, p := range ps {
			names = append(names, p.CertFile)
		}
		e.renewed = append(e.renewed, names)
	})
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		GetCertificate: c.Serving.GetCertificate, Time: e.clk.Now,
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: c.CA.Pool(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				conn.(*tls.Conn).Handshake()
				conn.Write([]byte("ok"))
				conn.Close()
			}()
		}
	}()
	e.addr = ln.Addr().String()
	return e
}

// handshake connects as the admin whose certificate is read from disk
// during the handshake, as a client of the rewritten kubeconfig would,
// verifying the server at the fake clock's time.
func (e *rotationEnv) handshake() error {
	conn, err := tls.Dial("tcp", e.addr, &tls.Config{
		RootCAs: e.c.CA.Pool(), ServerName: "localhost", Time: e.clk.Now,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			certPEM, err := os.ReadFile(filepath.Join(e.c.Dir(), AdminCertFile))
			if err != nil {
				return nil, err
			}
			keyPEM, err := os.ReadFile(filepath.Join(e.c.Dir(), AdminKeyFile))
			if err != nil {
				return nil, err
			}
			pair, err := tls.X509KeyPair(certPEM, keyPEM)
			return &pair, err
		},
	})
	if err != nil {
		return err
	}
	defer conn.Close()
	// The server's verdict on the client certificate comes with the
	// first read in TLS 1.3.
	buf := make([]byte, 2)
	if _, err := conn.Read(buf); err != nil {
		return err
	}
	return nil
}

// checkAllValid: every leaf in force is valid now, chains to its CA and
// is what is on disk.
func (e *rotationEnv) checkAllValid(step string) {
	now := e.clk.Now()
	for _, p := range e.c.Pairs() {
		leaf := p.Leaf()
		if now.Before(leaf.NotBefore) || !now.Before(leaf.NotAfter) {
			e.t.Errorf("%s: %s valid %s to %s, not at %s", step, p.CertFile, leaf.NotBefore, leaf.NotAfter, now)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: p.ca.Pool(), CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			e.t.Errorf("%s: %s: %v", step, p.CertFile, err)
		}
		onDisk, err := os.ReadFile(filepath.Join(e.c.Dir(), p.CertFile))
		if err != nil {
			e.t.Fatal(err)
		}
		if certPEM, _ := p.PEM(); !bytes.Equal(onDisk, certPEM) {
			e.t.Errorf("%s: %s on disk is not the one in force", step, p.CertFile)
		}
	}
}

func TestRenewalAcrossClockJumps(t *testing.T) {
	start := time.Now()
	e := newRotationEnv(t, start)
	if err := e.handshake(); err != nil {
		t.Fatalf("first handshake: %v", err)
	}
	if len(e.renewed) != 0 {
		t.Fatalf("renewed %v before anything was due", e.renewed)
	}
	first := e.c.Serving.Leaf()
	for _, step := range []struct {
		name   string
		offset time.Duration
	}{{"+1y", year}, {"+5y", 5 * year}, {"+9y", 9 * year}, {"-1d", -day}} {
		e.renewed = nil
		e.clk.SetTime(start.Add(step.offset))
		// No Run loop: the handshake itself must renew what the jump
		// made unusable, before it hands a certificate out.
		if err := e.handshake(); err != nil {
			t.Fatalf("%s: handshake: %v", step.name, err)
		}
		if len(e.renewed) != 1 || len(e.renewed[0]) != len(e.c.Pairs()) {
			t.Errorf("%s: renewed %v, want every leaf once", step.name, e.renewed)
		}
		e.checkAllValid(step.name)
	}
	if e.c.Serving.Leaf().SerialNumber.Cmp(first.SerialNumber) == 0 {
		t.Error("serving certificate never replaced")
	}
}

func TestRenewDueAtTwoThirds(t *testing.T) {
	start := time.Now()
	e := newRotationEnv(t, start)
	before := e.c.Admin.Leaf()
	e.clk.SetTime(start.Add(200 * day))
	if renewed, err := e.c.RenewDue(); err != nil || len(renewed) != 0 {
		t.Fatalf("at 200 days renewed %d, %v; want none", len(renewed), err)
	}
	e.clk.SetTime(start.Add(244 * day))
	renewed, err := e.c.RenewDue()
	if err != nil || len(renewed) != len(e.c.Pairs()) {
		t.Fatalf("at 244 days renewed %d, %v; want all %d", len(renewed), err, len(e.c.Pairs()))
	}
	after := e.c.Admin.Leaf()
	if !after.NotBefore.Equal(start.Add(244*day - backdate).Truncate(time.Second)) {
		t.Errorf("renewed NotBefore %s, want the fake clock's now less %s", after.NotBefore, backdate)
	}
	if after.SerialNumber.Cmp(before.SerialNumber) == 0 {
		t.Error("admin certificate not replaced")
	}
	e.checkAllValid("244 days")
}

func TestLeafCutOffAtCAEndIsNotRenewedAgain(t *testing.T) {
	start := time.Now()
	e := newRotationEnv(t, start)
	caEnd := e.c.CA.Cert.NotAfter
	e.clk.SetTime(caEnd.Add(-60 * day))
	renewed, err := e.c.RenewDue()
	if err != nil || len(renewed) == 0 {
		t.Fatalf("60 days before the CA's end renewed %d, %v", len(renewed), err)
	}
	if got := e.c.Serving.Leaf().NotAfter; !got.Equal(caEnd) {
		t.Errorf("serving NotAfter %s, want the CA's %s", got, caEnd)
	}
	if renewed, _ := e.c.RenewDue(); len(renewed) != 0 {
		t.Errorf("renewed %d again though nothing better can be issued", len(renewed))
	}
	var files []string
	for _, x := range e.c.Expiring() {
		files = append(files, x.File)
	}
	if !slices.Contains(files, CACertFile) || slices.Contains(files, ServingCertFile) {
		t.Errorf("expiring %v, want the CA and not the serving certificate (60 days left)", files)
	}
	// 20 days before the CA's end the leaves, cut off with it, are
	// reported too, as ending with their CA.
	e.clk.SetTime(caEnd.Add(-20 * day))
	withCA := 0
	for _, x := range e.c.Expiring() {
		if !x.CA && x.WithCA {
			withCA++
		}
	}
	if withCA != len(e.c.Pairs()) {
		t.Errorf("%d leaves reported as ending with their CA 20 days ahead, want %d", withCA, len(e.c.Pairs()))
	}
	// At the CA's end nothing can be renewed; the error says why, once.
	e.clk.SetTime(caEnd.Add(time.Hour))
	var reported []error
	e.c.rotation.report = func(err error) { reported = append(reported, err) }
	if _, err := e.c.RenewDue(); err == nil || !strings.Contains(err.Error(), "CA") {
		t.Errorf("renewal past the CA's end: %v, want an error naming the CA", err)
	}
	e.c.RenewDue()
	if len(reported) != 1 {
		t.Errorf("reported %d times, want once", len(reported))
	}
}

func TestOpenRenewsExpiredLeavesAndRefusesExpiredCA(t *testing.T) {
	start := time.Now()
	dir := t.TempDir()
	clk := clocktesting.NewFakePassiveClock(start)
	if _, err := Open(Options{Dir: dir, SANs: testSANs(), Clock: clk}); err != nil {
		t.Fatal(err)
	}
	// Off for two years: every leaf expired; the next start renews them.
	clk.SetTime(start.Add(2 * year))
	c, err := Open(Options{Dir: dir, SANs: testSANs(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{ServingCertFile, AdminCertFile, FrontProxyClientCertFile}
	if !slices.Equal(c.Issued, want) {
		t.Errorf("issued %v after two years off, want %v", c.Issued, want)
	}
	for _, p := range c.Pairs() {
		if !clk.Now().Before(p.Leaf().NotAfter) || clk.Now().Before(p.Leaf().NotBefore) {
			t.Errorf("%s not valid after the start", p.CertFile)
		}
	}
	clk.SetTime(start.Add(11 * year))
	_, err = Open(Options{Dir: dir, SANs: testSANs(), Clock: clk})
	if err == nil || !strings.Contains(err.Error(), "expired") || !strings.Contains(err.Error(), CACertFile) {
		t.Errorf("start past the CA's end: %v, want an error naming the expired CA", err)
	}
}

func TestCAIsTenYearsAndBackdated(t *testing.T) {
	start := time.Now()
	e := newRotationEnv(t, start)
	ca := e.c.CA.Cert
	if got := ca.NotAfter.Sub(start); got < 10*year-time.Second || got > 10*year {
		t.Errorf("CA lives %v from now, want 10 years", got)
	}
	if !ca.NotBefore.Before(start.Add(-day)) {
		t.Errorf("CA NotBefore %s: a clock set back a day would make it unusable", ca.NotBefore)
	}
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.key")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(path, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "new" {
		t.Fatalf("read %q, %v", got, err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the file (no temporary left)", len(entries))
	}
	// A write that fails leaves the old content.
	if err := writeFile(filepath.Join(dir, "missing", "y"), []byte("z"), 0o600); err == nil {
		t.Error("write into a missing directory succeeded")
	}
}

func TestRotateFilesAndInspect(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	ks := testSANs("node-a")
	if _, err := Open(Options{Dir: dir, SANs: testSANs(), KubeletSANs: &ks}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	st, err := Inspect(dir, now)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, s := range st {
		files = append(files, s.File)
		if s.Status != StatusOK {
			t.Errorf("%s: %s", s.File, s.Status)
		}
	}
	if !slices.Equal(files, certFiles) {
		t.Errorf("inspected %v, want %v", files, certFiles)
	}
	if st, _ := Inspect(dir, now.Add(300*day)); st[2].Status != StatusWarning {
		t.Errorf("serving at 300 days: %s, want WARNING", st[2].Status)
	}
	if st, _ := Inspect(dir, now.Add(2*year)); st[2].Status != StatusExpired || st[0].Status != StatusOK {
		t.Errorf("at two years: serving %s, CA %s", st[2].Status, st[0].Status)
	}
	if st, _ := Inspect(dir, now.Add(-30*day)); st[2].Status != StatusNotYetValid {
		t.Errorf("30 days back: serving %s", st[2].Status)
	}

	if _, _, err := RotateFiles(dir, []string{"scheduler"}, now); err == nil || err.Error() != "service scheduler is not recognized (bonsai's: admin, api-server, auth-proxy, kubelet)" {
		t.Errorf("unknown service: %v", err)
	}
	backup, removed, err := RotateFiles(dir, []string{"api-server"}, now)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{KubeletClientCertFile, KubeletClientKeyFile, ServingCertFile, ServingKeyFile}; !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	if _, err := os.Stat(filepath.Join(backup, ServingKeyFile)); err != nil {
		t.Errorf("backup: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, AdminCertFile)); err != nil {
		t.Errorf("admin certificate removed with api-server: %v", err)
	}
	if _, _, err := RotateFiles(filepath.Join(t.TempDir(), "none"), nil, now); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing directory: %v", err)
	}
}

// BenchmarkRenewAll is what the first handshake after a clock jump waits
// for: every leaf re-issued, written and fsynced.
func BenchmarkRenewAll(b *testing.B) {
	start := time.Now()
	clk := clocktesting.NewFakePassiveClock(start)
	ks := testSANs("node-a")
	c, err := Open(Options{Dir: b.TempDir(), SANs: testSANs(), KubeletSANs: &ks, Clock: clk})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// A year on, every leaf expired; back again, every leaf is not
		// yet valid.
		if i%2 == 0 {
			clk.SetTime(start.Add(year))
		} else {
			clk.SetTime(start)
		}
		if renewed, err := c.RenewDue(); err != nil || len(renewed) != len(c.Pairs()) {
			b.Fatalf("renewed %d, %v", len(renewed), err)
		}
	}
}

// TestRunRenewsWithoutHandshakes: with nobody connecting, Run still
// renews what falls due (so the files and the admin kubeconfig stay
// fresh) and reports the CA in its last year.
func TestRunRenewsWithoutHandshakes(t *testing.T) {
	start := time.Now()
	e := newRotationEnv(t, start)
	renewed := make(chan []*KeyPair, 4)
	e.c.OnRenew(func(ps []*KeyPair) { renewed <- ps })
	expiring := make(chan []Expiring, 64)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.c.Run(ctx, RunOptions{Interval: 10 * time.Millisecond, Expiring: func(x []Expiring) {
		select {
		case expiring <- x:
		default:
		}
	}})
	e.clk.SetTime(start.Add(9*year + 200*day))
	select {
	case ps := <-renewed:
		if len(ps) != len(e.c.Pairs()) {
			t.Errorf("renewed %d of %d", len(ps), len(e.c.Pairs()))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run renewed nothing")
	}
	e.checkAllValid("+9y200d")
	deadline := time.After(5 * time.Second)
	for {
		select {
		case x := <-expiring:
			if len(x) == 2 && x[0].File == CACertFile && x[0].CA && x[1].File == FrontProxyCACertFile {
				return
			}
		case <-deadline:
			t.Fatal("Run did not report the CAs in their last year")
		}
	}
}
