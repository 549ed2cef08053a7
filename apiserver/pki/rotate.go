package pki

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Renewal rule: a leaf is renewed once two thirds of its life have gone
// or 90 days before it expires, whichever comes first (90 days is k3s's
// CertificateRenewDays). A one-year leaf is renewed after about eight
// months.
const (
	renewMargin = 90 * 24 * time.Hour
	// ExpiryWarning is how close to its end a certificate must be for
	// Run to report it: a leaf that near its end could not be renewed.
	ExpiryWarning = 30 * 24 * time.Hour
	// CAExpiryWarning is the same for a CA, which is never renewed; a
	// year ahead, as k3s warns, leaves time to plan a new one.
	CAExpiryWarning = 365 * 24 * time.Hour
	// DefaultCheckInterval is how often Run looks at the clock when no
	// handshake has made it look.
	DefaultCheckInterval = time.Minute
)

// renewAt is when leaf is due for renewal.
func renewAt(leaf *x509.Certificate) time.Time {
	life := leaf.NotAfter.Sub(leaf.NotBefore)
	at := leaf.NotBefore.Add(life / 3 * 2)
	if m := leaf.NotAfter.Add(-renewMargin); m.Before(at) {
		at = m
	}
	return at
}

// rotation is the renewal state of a Certs.
type rotation struct {
	mu sync.Mutex
	// due and validFrom (Unix nanoseconds) let a handshake decide with
	// two loads whether anything needs renewing: the earliest moment a
	// leaf is due, and the latest NotBefore of one (a clock set back
	// before it makes that leaf unusable).
	due, validFrom atomic.Int64
	// onRenew are told, under mu, what was renewed.
	onRenew []func([]*KeyPair)
	// failed is the last renewal error, so that a broken disk is logged
	// once per change rather than once per handshake.
	failed error
	report func(error)
	// renewed wakes Run after a renewal a handshake made, so that what
	// is near its end is reported at once.
	renewed chan struct{}
}

// OnRenew adds f to what is told, after the new files are written and
// in force, which pairs a renewal replaced. Set it up before serving.
func (c *Certs) OnRenew(f func(renewed []*KeyPair)) {
	c.rotation.mu.Lock()
	defer c.rotation.mu.Unlock()
	c.rotation.onRenew = append(c.rotation.onRenew, f)
}

// updateDue recomputes the handshake's fast check. Under rotation.mu or
// before anyone else sees c.
func (c *Certs) updateDue() {
	due, validFrom := int64(math.MaxInt64), int64(math.MinInt64)
	for _, p := range c.pairs {
		leaf := p.Leaf()
		at := leaf.NotAfter
		if leaf.NotAfter.Before(p.ca.Cert.NotAfter) {
			at = renewAt(leaf)
		}
		due = min(due, at.UnixNano())
		validFrom = max(validFrom, leaf.NotBefore.UnixNano())
	}
	c.rotation.due.Store(due)
	c.rotation.validFrom.Store(validFrom)
}

// catchUp runs on every handshake: when the clock has passed a leaf's
// renewal time (or was set back before one's start), that leaf is
// renewed before the handshake goes on, so that even the first
// connection after a clock jump sees a valid certificate, and a client
// that reads the admin kubeconfig while it handshakes finds the new one.
func (c *Certs) catchUp() {
	now := c.clock.Now().UnixNano()
	if now < c.rotation.due.Load() && now >= c.rotation.validFrom.Load() {
		return
	}
	c.RenewDue()
}

// RenewDue renews every leaf due at the clock's now and returns those it
// renewed. A leaf that cannot be renewed stays in force; the error is
// reported (see Run) and returned.
func (c *Certs) RenewDue() ([]*KeyPair, error) {
	r := &c.rotation
	r.mu.Lock()
	defer r.mu.Unlock()
	now := c.clock.Now()
	var renewed []*KeyPair
	var errs []error
	for _, p := range c.pairs {
		if p.renewReason(p.Leaf(), now) == "" {
			continue
		}
		if ca := p.ca.Cert; now.Before(ca.NotBefore) || !now.Before(ca.NotAfter) {
			errs = append(errs, fmt.Errorf("%s cannot be renewed: its CA %q is not valid at %s (valid %s to %s)", p.CertFile,
				ca.Subject.CommonName, now.UTC().Format(time.RFC3339), ca.NotBefore.UTC().Format(time.RFC3339), ca.NotAfter.UTC().Format(time.RFC3339)))
			continue
		}
		if err := c.reissue(p); err != nil {
			errs = append(errs, err)
			continue
		}
		renewed = append(renewed, p)
	}
	c.updateDue()
	if len(errs) > 0 {
		// Retried by Run's next tick, not by every handshake until then.
		r.due.Store(math.MaxInt64)
		r.validFrom.Store(math.MinInt64)
	}
	err := errors.Join(errs...)
	if (err == nil) != (r.failed == nil) || (err != nil && err.Error() != r.failed.Error()) {
		r.failed = err
		if err != nil && r.report != nil {
			r.report(err)
		}
	}
	if len(renewed) > 0 {
		for _, f := range r.onRenew {
			f(renewed)
		}
		select {
		case r.renewed <- struct{}{}:
		default:
		}
	}
	return renewed, err
}

// Expiring is a certificate near its end.
type Expiring struct {
	File     string
	Subject  string
	NotAfter time.Time
	CA       bool
	// WithCA: a leaf that ends with its CA, so renewing cannot help.
	WithCA bool
}

// Expiring lists the certificates in force that end within
// ExpiryWarning of the clock's now (CAExpiryWarning for the CAs).
func (c *Certs) Expiring() []Expiring {
	now := c.clock.Now()
	var out []Expiring
	for _, ca := range []struct {
		file string
		a    *Authority
	}{{CACertFile, c.CA}, {FrontProxyCACertFile, c.FrontProxy.CA}} {
		if ca.a.Cert.NotAfter.Sub(now) < CAExpiryWarning {
			out = append(out, Expiring{File: ca.file, Subject: ca.a.Cert.Subject.CommonName, NotAfter: ca.a.Cert.NotAfter, CA: true})
		}
	}
	for _, p := range c.pairs {
		if leaf := p.Leaf(); leaf.NotAfter.Sub(now) < ExpiryWarning {
			out = append(out, Expiring{File: p.CertFile, Subject: leaf.Subject.CommonName, NotAfter: leaf.NotAfter, WithCA: !leaf.NotAfter.Before(p.ca.Cert.NotAfter)})
		}
	}
	return out
}

// RunOptions tune Run.
type RunOptions struct {
	// Interval between looks at the clock (DefaultCheckInterval when 0).
	Interval time.Duration
	// Failed is told when renewing fails, once per distinct error.
	Failed func(error)
	// Expiring is told, after every look, what is near its end (nothing
	// on most looks).
	Expiring func([]Expiring)
}

// Run renews leaves as they fall due until ctx ends. Handshakes renew
// on their own (catchUp); Run covers a server nobody connects to, so
// that the files on disk, the admin kubeconfig among them, stay fresh.
func (c *Certs) Run(ctx context.Context, o RunOptions) {
	if o.Interval <= 0 {
		o.Interval = DefaultCheckInterval
	}
	c.rotation.mu.Lock()
	c.rotation.report = o.Failed
	c.rotation.mu.Unlock()
	t := time.NewTicker(o.Interval)
	defer t.Stop()
	for {
		c.RenewDue()
		if o.Expiring != nil {
			o.Expiring(c.Expiring())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.rotation.renewed:
		}
	}
}
