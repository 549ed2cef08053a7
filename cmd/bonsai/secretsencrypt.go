package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"bonsai.dev/bonsai/apiserver/encryption"
)

// secretsEncryptOptions are the flags of `bonsai secrets-encrypt`.
type secretsEncryptOptions struct {
	dataDir, kubeconfig string
}

// newSecretsEncryptCmd is k3s's `secrets-encrypt` in bonsai's words: the
// running server does the work (it holds the keys and the store), the
// command asks it as an admin and says what it did.
func newSecretsEncryptCmd(stdout io.Writer) *cobra.Command {
	o := &secretsEncryptOptions{}
	cmd := &cobra.Command{
		Use:   "secrets-encrypt",
		Short: "Encryption at rest of Secrets and the other resources of the encryption configuration: status, key rotation",
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&o.dataDir, "data-dir", "/var/lib/bonsai", "bonsai's data directory, whose admin kubeconfig is used")
	pf.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of a member of system:masters (default <data-dir>/kubeconfig.yaml)")
	cmd.AddCommand(&cobra.Command{
		Use:   "status",
		Short: "Show which key writes each encrypted resource and whether every stored object uses it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := o.call(cmd.Context(), http.MethodGet, "/bonsai/secrets-encrypt/status")
			if err != nil {
				return fmt.Errorf("secrets-encrypt status: %v", err)
			}
			printEncryptionStatus(stdout, st)
			return nil
		},
	}, &cobra.Command{
		Use:     "rotate",
		Aliases: []string{"rotate-keys"},
		Short:   "Put a new key first in the encryption configuration (the old ones stay, to read) and re-encrypt every stored object with it, online",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := o.call(cmd.Context(), http.MethodPost, "/bonsai/secrets-encrypt/rotate")
			if err != nil {
				return fmt.Errorf("secrets-encrypt rotate: %v", err)
			}
			fmt.Fprintf(stdout, "Added keys: %s\nRe-encrypted: %d\n", strings.Join(st.Added, ", "), st.Rewritten)
			printEncryptionStatus(stdout, st)
			return nil
		},
	}, &cobra.Command{
		Use:   "reencrypt",
		Short: "Re-encrypt every stored object not written with its resource's write key (finishes an interrupted rotation)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := o.call(cmd.Context(), http.MethodPost, "/bonsai/secrets-encrypt/reencrypt")
			if err != nil {
				return fmt.Errorf("secrets-encrypt reencrypt: %v", err)
			}
			fmt.Fprintf(stdout, "Re-encrypted: %d\n", st.Rewritten)
			printEncryptionStatus(stdout, st)
			return nil
		},
	})
	return cmd
}

// call asks the server and decodes its answer: the status, or the
// message of the Status error it sent.
func (o *secretsEncryptOptions) call(ctx context.Context, method, path string) (*encryption.Status, error) {
	resp, err := adminRequest(ctx, o.dataDir, o.kubeconfig, method, path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	var st encryption.Status
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("the server's answer: %v", err)
	}
	return &st, nil
}

// adminRequest sends a request to the server of a data dir as its admin
// (the kubeconfig given, or the data dir's): a member of
// system:masters. An answer other than 200 is an error with the message
// of the Status the server sent.
func adminRequest(ctx context.Context, dataDir, kubeconfig, method, path string) (*http.Response, error) {
	kc := kubeconfig
	if kc == "" {
		kc = filepath.Join(dataDir, "kubeconfig.yaml")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %v", kc, err)
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(cfg.Host, "/")+path, nil)
	if err != nil {
		return nil, err
	}
	// Errors come as a JSON Status; a snapshot as bytes.
	req.Header.Set("Accept", "application/json, */*")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		var st metav1.Status
		if json.Unmarshal(body, &st) == nil && st.Message != "" {
			return nil, errors.New(st.Message)
		}
		return nil, fmt.Errorf("the server answered %s", resp.Status)
	}
	return resp, nil
}

func printEncryptionStatus(w io.Writer, st *encryption.Status) {
	if !st.Enabled {
		fmt.Fprintln(w, "Encryption Status: Disabled")
		return
	}
	fmt.Fprintln(w, "Encryption Status: Enabled")
	fmt.Fprintf(w, "Config File: %s\n", st.ConfigFile)
	for _, r := range st.Resources {
		fmt.Fprintf(w, "Resource %s: writes with %s, reads with %s\n", r.Resource, r.WriteKey, strings.Join(r.ReadKeys, ", "))
		switch {
		case r.Total == 0:
			fmt.Fprintln(w, "  no stored objects")
		case r.Current == r.Total:
			fmt.Fprintf(w, "  %d stored objects, all written with %s\n", r.Total, r.WriteKey)
		default:
			fmt.Fprintf(w, "  %d stored objects, %d written with %s; others: %s\n", r.Total, r.Current, r.WriteKey, countsOf(r.Stored, r.WriteKey, r.ReadKeys))
		}
	}
	if len(st.Unlisted) > 0 {
		fmt.Fprintf(w, "Unreadable: objects of resources the configuration does not list are encrypted: %s\n", countsOf(st.Unlisted, "", nil))
	}
	if st.AllCurrent() {
		fmt.Fprintln(w, "Stored Objects: all written with their write key")
	} else {
		fmt.Fprintln(w, "Stored Objects: some are not written with their write key (bonsai secrets-encrypt reencrypt rewrites them)")
	}
}

// countsOf lists counts by key, but skip, in a stable order; a key no
// longer read is marked.
func countsOf(m map[string]int, skip string, reads []string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		if k != skip {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s: %d", k, m[k])
		// Plaintext always reads: it was stored before encryption.
		if reads != nil && k != "identity" && !slices.Contains(reads, k) {
			parts[i] += " (no provider reads it)"
		}
	}
	return strings.Join(parts, ", ")
}
