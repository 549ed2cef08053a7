package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"bonsai.dev/bonsai/apiserver/pki"
)

// certificateOptions are the flags of `bonsai certificate`, k3s's
// `certificate check` and `certificate rotate`.
type certificateOptions struct {
	dataDir  string
	output   string
	services []string
}

func newCertificateCmd(stdout io.Writer) *cobra.Command {
	o := &certificateOptions{}
	cmd := &cobra.Command{
		Use:   "certificate",
		Short: "Check and rotate the certificates in <data-dir>/tls",
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&o.dataDir, "data-dir", "/var/lib/bonsai", "bonsai's data directory")
	pf.StringSliceVarP(&o.services, "service", "s", nil, "only the certificates of these services ("+strings.Join(pki.ServiceNames(), ", ")+"); repeatable or comma-separated (default all)")
	check := &cobra.Command{
		Use:   "check",
		Short: "Print each certificate's file, subject, usages, expiry and status",
		Long: "Reads the certificates in <data-dir>/tls and prints, for each, whether it is OK, in its last 90 days (WARNING), EXPIRED or NOT YET VALID. " +
			"A running server renews leaves itself before that; the CAs (10 years) are never renewed.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.check(stdout, time.Now()) },
	}
	check.Flags().StringVarP(&o.output, "output", "o", "text", "output format: text, table or json")
	rotate := &cobra.Command{
		Use:   "rotate",
		Short: "Make the next start issue new leaf certificates; the server must be stopped",
		Long: "Copies <data-dir>/tls to <data-dir>/tls-<unix time>, then removes the leaf certificates and keys of --service (all by default), " +
			"which the next `bonsai server` issues anew, as k3s does. The CAs are kept. A running server renews its certificates itself, so it is refused.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.rotate(stdout, time.Now()) },
	}
	cmd.AddCommand(check, rotate)
	return cmd
}

func (o *certificateOptions) tlsDir() string { return filepath.Join(o.dataDir, "tls") }

// checkServices refuses a name k3s or bonsai does not know.
func (o *certificateOptions) checkServices() error {
	for _, s := range o.services {
		if _, ok := pki.Services[s]; !ok {
			return fmt.Errorf("service %s is not recognized (bonsai's: %s)", s, strings.Join(pki.ServiceNames(), ", "))
		}
	}
	return nil
}

func (o *certificateOptions) check(w io.Writer, now time.Time) error {
	switch o.output {
	case "text", "table", "json":
	default:
		return fmt.Errorf("--output %q: must be text, table or json", o.output)
	}
	if err := o.checkServices(); err != nil {
		return err
	}
	all, err := pki.Inspect(o.tlsDir(), now)
	if err != nil {
		return err
	}
	certs := all
	if len(o.services) > 0 {
		certs = nil
		for _, c := range all {
			for _, s := range o.services {
				if slices.Contains(pki.Services[s], c.File) {
					certs = append(certs, c)
					break
				}
			}
		}
	}
	switch o.output {
	case "json":
		type cert struct {
			Filename     string
			Subject      string
			Usages       []string
			ExpiryTime   time.Time
			ResidualTime time.Duration
			Status       string
		}
		out := struct{ Certificates []cert }{Certificates: []cert{}}
		for _, c := range certs {
			out.Certificates = append(out.Certificates, cert{c.File, c.Subject, c.Usages, expiry(c), c.NotAfter.Sub(now), c.Status})
		}
		return json.NewEncoder(w).Encode(out)
	case "table":
		tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
		fmt.Fprintln(tw, "FILENAME\tSUBJECT\tUSAGES\tEXPIRES\tRESIDUAL TIME\tSTATUS")
		for _, c := range certs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.File, c.Subject, strings.Join(c.Usages, ","),
				c.NotAfter.UTC().Format("Jan 02, 2006 15:04 MST"), residual(c.NotAfter.Sub(now)), c.Status)
		}
		return tw.Flush()
	}
	for _, c := range certs {
		usages := strings.Join(c.Usages, ",")
		at := expiry(c).UTC().Format(time.RFC3339)
		switch c.Status {
		case pki.StatusNotYetValid:
			fmt.Fprintf(w, "%s: certificate %s (%s) is not valid before %s\n", c.File, c.Subject, usages, at)
		case pki.StatusExpired:
			fmt.Fprintf(w, "%s: certificate %s (%s) expired at %s\n", c.File, c.Subject, usages, at)
		case pki.StatusWarning:
			fmt.Fprintf(w, "%s: certificate %s (%s) will expire within 90 days at %s\n", c.File, c.Subject, usages, at)
		default:
			fmt.Fprintf(w, "%s: certificate %s (%s) is ok, expires at %s\n", c.File, c.Subject, usages, at)
		}
	}
	return nil
}

// expiry is the time check reports: NotBefore for a certificate not yet
// valid, as k3s does.
func expiry(c pki.CertStatus) time.Time {
	if c.Status == pki.StatusNotYetValid {
		return c.NotBefore
	}
	return c.NotAfter
}

// residual says how long is left in the largest whole unit.
func residual(d time.Duration) string {
	suffix := ""
	if d < 0 {
		d, suffix = -d, " ago"
	}
	switch {
	case d >= 365*24*time.Hour:
		return fmt.Sprintf("%dy%s", int(d/(365*24*time.Hour)), suffix)
	case d >= 24*time.Hour:
		return fmt.Sprintf("%dd%s", int(d/(24*time.Hour)), suffix)
	case d >= time.Hour:
		return fmt.Sprintf("%dh%s", int(d/time.Hour), suffix)
	default:
		return fmt.Sprintf("%dm%s", int(d/time.Minute), suffix)
	}
}

func (o *certificateOptions) rotate(w io.Writer, now time.Time) error {
	if err := o.checkServices(); err != nil {
		return err
	}
	lock, err := tryLockDir(o.dataDir)
	if errors.Is(err, errDirBusy) {
		return fmt.Errorf("bonsai is running on data dir %s and renews its certificates itself; stop it to rotate them now", o.dataDir)
	}
	if err != nil {
		return err
	}
	defer lock.Close()
	backup, removed, err := pki.RotateFiles(o.tlsDir(), o.services, now)
	if err != nil {
		return err
	}
	for _, f := range removed {
		fmt.Fprintf(w, "removed %s\n", filepath.Join(o.tlsDir(), f))
	}
	fmt.Fprintf(w, "backed up the certificates to %s; start bonsai server to issue new ones\n", backup)
	return nil
}
