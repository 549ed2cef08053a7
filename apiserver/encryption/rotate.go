package encryption

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	apiserverapi "k8s.io/apiserver/pkg/apis/apiserver"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"sigs.k8s.io/yaml"

	"bonsai.dev/bonsai/store"
)

// ErrNothingToRotate is a rotation of a configuration that encrypts
// nothing.
var ErrNothingToRotate = errors.New("no resource is encrypted (identity is the first provider of every entry): nothing to rotate")

// Status is how the stored values of the encrypted resources are
// written: what `bonsai secrets-encrypt status` shows.
type Status struct {
	// Enabled is false when the server has no encryption configuration.
	Enabled    bool   `json:"enabled"`
	ConfigFile string `json:"configFile,omitempty"`
	// Resources are the configuration's rules, in its order.
	Resources []ResourceStatus `json:"resources,omitempty"`
	// Unlisted counts the encrypted values of resources the
	// configuration does not list, by the key that wrote them: nothing
	// reads them until a rule for their resource has that key again.
	Unlisted map[string]int `json:"unlisted,omitempty"`
	// Rewritten is how many values the request re-encrypted.
	Rewritten int `json:"rewritten,omitempty"`
	// Added names the keys a rotation added.
	Added []string `json:"added,omitempty"`
}

// ResourceStatus is one rule's keys and stored values.
type ResourceStatus struct {
	// Resource is the rule as the file writes it: secrets, *.apps.
	Resource string `json:"resource"`
	// WriteKey writes the values (identity: plaintext); ReadKeys are
	// every key that reads them, WriteKey first.
	WriteKey string   `json:"writeKey"`
	ReadKeys []string `json:"readKeys"`
	// Stored counts the values by the key that wrote them; Current of
	// Total are written with WriteKey.
	Stored  map[string]int `json:"stored,omitempty"`
	Total   int            `json:"total"`
	Current int            `json:"current"`
}

// AllCurrent says whether every stored value of every listed resource is
// written with its write key, and none is left unreadable.
func (st *Status) AllCurrent() bool {
	for _, r := range st.Resources {
		if r.Current != r.Total {
			return false
		}
	}
	return len(st.Unlisted) == 0
}

// scanPage is how many values a scan reads at a time.
const scanPage = 500

// scan calls f with every stored API object value, page by page at one
// revision, and the rule of cfg that writes it (nil: unlisted). A scan
// whose revision is compacted away under it starts again.
func (s *Store) scan(ctx context.Context, cfg *Config, f func(kv store.KeyValue, r *rule) error) error {
	for attempt := 0; ; attempt++ {
		err := s.scanOnce(ctx, cfg, f)
		if !errors.Is(err, store.ErrCompacted) || attempt == 2 {
			return err
		}
	}
}

func (s *Store) scanOnce(ctx context.Context, cfg *Config, f func(kv store.KeyValue, r *rule) error) error {
	opts := store.ListOptions{Limit: scanPage}
	for {
		res, err := s.raw.List(ctx, store.RegistryRoot, opts)
		if err != nil {
			return err
		}
		for _, kv := range res.Items {
			if err := f(kv, cfg.ruleFor(kv.Key)); err != nil {
				return err
			}
		}
		if res.Continue == "" {
			return nil
		}
		opts.Continue = res.Continue
	}
}

// Status reads every stored value's prefix (nothing is decrypted).
func (s *Store) Status(ctx context.Context) (*Status, error) {
	cfg := s.cfg.Load()
	st := &Status{Enabled: true, ConfigFile: cfg.Path}
	byRule := map[*rule]int{}
	for i, r := range cfg.order {
		byRule[r] = i
		reads := make([]string, len(r.keys))
		for j, k := range r.keys {
			reads[j] = k.label
		}
		st.Resources = append(st.Resources, ResourceStatus{Resource: r.name, WriteKey: r.keys[0].label, ReadKeys: reads, Stored: map[string]int{}})
	}
	err := s.scan(ctx, cfg, func(kv store.KeyValue, r *rule) error {
		label, _ := r.labelOf(kv.Value)
		if r == nil {
			if IsEncrypted(kv.Value) {
				if st.Unlisted == nil {
					st.Unlisted = map[string]int{}
				}
				st.Unlisted[label]++
			}
			return nil
		}
		rs := &st.Resources[byRule[r]]
		rs.Stored[label]++
		rs.Total++
		if r.current(kv.Value) {
			rs.Current++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}

// maxPasses bounds a re-encryption: each pass rewrites what the one
// before left behind (a write that had its key before a rotation and
// landed after the pass went by).
const maxPasses = 10

// conflictWait is how long a pass whose rewrites met other writers
// waits before the next, doubled each pass (at most a second): a
// conflict is a write queued in the store but not yet durable, which the
// next pass's read would not see yet.
const conflictWait = 10 * time.Millisecond

// Reencrypt rewrites, through via (the API server's store, so that its
// caches hear of the writes), every stored value of a listed resource
// that is not written with its rule's write key, each with a
// compare-and-swap on the revision it was read at: a value changed
// meanwhile was written with the write key by its writer, and is checked
// again by the next pass. Values nothing can read are left as they are
// and reported.
func (s *Store) Reencrypt(ctx context.Context, via store.Store) (int, error) {
	s.rotate.Lock()
	defer s.rotate.Unlock()
	return s.reencrypt(ctx, via)
}

func (s *Store) reencrypt(ctx context.Context, via store.Store) (int, error) {
	rewritten := 0
	for pass := 0; pass < maxPasses; pass++ {
		cfg := s.cfg.Load()
		stale, conflicts := 0, 0
		var failed []error
		err := s.scan(ctx, cfg, func(kv store.KeyValue, r *rule) error {
			if r == nil || r.current(kv.Value) {
				return nil
			}
			plain, _, err := r.read(kv.Key, kv.Value)
			if err != nil {
				failed = append(failed, err)
				return nil
			}
			stale++
			_, err = via.Update(ctx, kv.Key, plain, kv.Revision)
			switch {
			case err == nil:
				rewritten++
			case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
				conflicts++
			case ctx.Err() != nil:
				return err
			default:
				failed = append(failed, fmt.Errorf("rewrite %s: %w", kv.Key, err))
			}
			return nil
		})
		if err != nil {
			return rewritten, err
		}
		if len(failed) > 0 {
			return rewritten, fmt.Errorf("%d stored values could not be re-encrypted, the first: %w", len(failed), failed[0])
		}
		if stale == 0 {
			return rewritten, nil
		}
		if conflicts > 0 {
			select {
			case <-time.After(min(conflictWait<<pass, time.Second)):
			case <-ctx.Done():
				return rewritten, ctx.Err()
			}
		}
	}
	return rewritten, fmt.Errorf("values were still written with other keys after %d passes; run it again", maxPasses)
}

// Rotate puts a new key first in every entry of the configuration file
// whose first provider encrypts (the old keys stay, to read), makes the
// file durable, writes with the new keys from then on, and re-encrypts
// every stored value with them through via. The file is on disk before
// any value is written with its keys: a crash leaves every value
// readable, and a re-encryption finishes the job.
func (s *Store) Rotate(ctx context.Context, via store.Store) (added []string, rewritten int, err error) {
	s.rotate.Lock()
	defer s.rotate.Unlock()
	cfg := s.cfg.Load()
	if cfg.Path == "" {
		return nil, 0, errors.New("the encryption configuration has no file to write the new keys to")
	}
	file, added, err := withNewKeys(cfg.file, time.Now())
	if err != nil {
		return nil, 0, err
	}
	data, err := Marshal(file, fmt.Sprintf("keys rotated by bonsai secrets-encrypt rotate at %s; the first key of a provider encrypts, all of them decrypt", time.Now().UTC().Format(time.RFC3339)))
	if err != nil {
		return nil, 0, err
	}
	next, err := Parse(data)
	if err != nil {
		return nil, 0, fmt.Errorf("the rotated configuration: %w", err)
	}
	next.Path = cfg.Path
	if err := WriteFile(cfg.Path, data); err != nil {
		return nil, 0, err
	}
	s.cfg.Store(next)
	n, err := s.reencrypt(ctx, via)
	return added, n, err
}

// withNewKeys is file with a new 32-byte key first in the first provider
// of every entry that encrypts.
func withNewKeys(file *apiserverapi.EncryptionConfiguration, now time.Time) (*apiserverapi.EncryptionConfiguration, []string, error) {
	out := file.DeepCopy()
	var added []string
	for i := range out.Resources {
		rc := &out.Resources[i]
		if len(rc.Providers) == 0 {
			continue
		}
		p := &rc.Providers[0]
		var keys *[]apiserverapi.Key
		var kind string
		switch {
		case p.AESCBC != nil:
			keys, kind = &p.AESCBC.Keys, "aescbc"
		case p.AESGCM != nil:
			keys, kind = &p.AESGCM.Keys, "aesgcm"
		case p.Secretbox != nil:
			keys, kind = &p.Secretbox.Keys, "secretbox"
		default:
			continue
		}
		k, err := NewKey(now, *keys)
		if err != nil {
			return nil, nil, err
		}
		*keys = append([]apiserverapi.Key{k}, *keys...)
		added = append(added, kind+":"+k.Name)
	}
	if len(added) == 0 {
		return nil, nil, ErrNothingToRotate
	}
	return out, added, nil
}

// NewKey is a random 32-byte key (AES-256, or secretbox's size) named
// after now, unlike any of have.
func NewKey(now time.Time, have []apiserverapi.Key) (apiserverapi.Key, error) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return apiserverapi.Key{}, err
	}
	base := "key-" + now.UTC().Format("20060102T150405Z")
	name := base
	for i := 2; slices.ContainsFunc(have, func(k apiserverapi.Key) bool { return k.Name == name }); i++ {
		name = fmt.Sprintf("%s-%d", base, i)
	}
	return apiserverapi.Key{Name: name, Secret: base64.StdEncoding.EncodeToString(secret)}, nil
}

// Default is the configuration bonsai makes for --secrets-encryption,
// as k3s does: Secrets encrypted with a new aescbc key, plaintext ones
// still read.
func Default(now time.Time) ([]byte, error) {
	k, err := NewKey(now, nil)
	if err != nil {
		return nil, err
	}
	file := &apiserverapi.EncryptionConfiguration{Resources: []apiserverapi.ResourceConfiguration{{
		Resources: []string{"secrets"},
		Providers: []apiserverapi.ProviderConfiguration{
			{AESCBC: &apiserverapi.AESConfiguration{Keys: []apiserverapi.Key{k}}},
			{Identity: &apiserverapi.IdentityConfiguration{}},
		},
	}}}
	return Marshal(file, "made by bonsai server --secrets-encryption; rotate its keys with bonsai secrets-encrypt rotate")
}

// Marshal writes file as apiserver.config.k8s.io/v1 YAML, after a
// comment line.
func Marshal(file *apiserverapi.EncryptionConfiguration, comment string) ([]byte, error) {
	var v1 apiserverv1.EncryptionConfiguration
	if err := configScheme.Convert(file, &v1, nil); err != nil {
		return nil, err
	}
	v1.APIVersion, v1.Kind = apiserverv1.SchemeGroupVersion.String(), "EncryptionConfiguration"
	data, err := yaml.Marshal(&v1)
	if err != nil {
		return nil, err
	}
	return append([]byte("# "+comment+"\n"), data...), nil
}

// WriteFile replaces path with data, mode 0600 (it holds keys), durably:
// a temporary file in the same directory, synced, renamed over path, the
// directory synced. A crash leaves the old file or the new one.
func WriteFile(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	ok = true
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("write %s: sync %s: %w", path, dir, err)
	}
	return nil
}

// Stale says whether the value stored at key's revision rev is not
// written the way the configuration writes it now, so that a write of
// the very same object must still be made: kube-apiserver's updates
// write a stale value even when nothing changed, which is how
// `kubectl replace` of every Secret re-encrypts them. Only keys of a
// listed resource are read.
func (s *Store) Stale(ctx context.Context, key string, rev uint64) bool {
	r := s.rule(key)
	if r == nil {
		return false
	}
	kv, err := s.raw.Get(ctx, key)
	if err != nil || kv.Revision != rev {
		return false
	}
	return !r.current(kv.Value)
}
