package encryption

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/nacl/secretbox"
	"k8s.io/klog/v2"

	"bonsai.dev/bonsai/store"
)

// Keys of the tests: base64 of 16, 24 and 32 bytes.
var (
	key16 = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 16))
	key24 = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, 24))
	key32 = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{3}, 32))
	other = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{4}, 32))
)

// configYAML is an EncryptionConfiguration of one entry.
func configYAML(resources string, providers ...string) string {
	return "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [" + resources + "]\n  providers:\n" + strings.Join(providers, "")
}

func keyed(provider string, keys ...[2]string) string {
	s := "  - " + provider + ":\n      keys:\n"
	for _, k := range keys {
		s += "      - name: " + k[0] + "\n        secret: " + k[1] + "\n"
	}
	return s
}

const identityProvider = "  - identity: {}\n"

func mustParse(t *testing.T, doc string) *Config {
	t.Helper()
	c, err := Parse([]byte(doc))
	if err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	return c
}

// newRaw is a real badger store in a temporary directory.
func newRaw(t *testing.T) store.Store {
	t.Helper()
	st, err := store.OpenBadger(store.BadgerOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

const secretKey = "/registry/core/secrets/default/s1"

// plain looks like a stored protobuf object, as the API server writes it.
var plain = append([]byte("k8s\x00\n\x0c\n\x02v1\x12\x06Secret"), []byte("the secret value 0123456789")...)

var providerCases = []struct {
	name, provider, prefix string
}{
	{"aescbc-16", keyed("aescbc", [2]string{"key1", key16}), "k8s:enc:aescbc:v1:key1:"},
	{"aescbc-24", keyed("aescbc", [2]string{"key1", key24}), "k8s:enc:aescbc:v1:key1:"},
	{"aescbc-32", keyed("aescbc", [2]string{"key1", key32}), "k8s:enc:aescbc:v1:key1:"},
	{"aesgcm-16", keyed("aesgcm", [2]string{"key1", key16}), "k8s:enc:aesgcm:v1:key1:"},
	{"aesgcm-32", keyed("aesgcm", [2]string{"key1", key32}), "k8s:enc:aesgcm:v1:key1:"},
	{"secretbox", keyed("secretbox", [2]string{"key1", key32}), "k8s:enc:secretbox:v1:key1:"},
}

// TestProvidersRoundTrip: each provider stores upstream's prefix and no
// plaintext, and reads back the plaintext through Get, GetUnless, List,
// Delete and Watch.
func TestProvidersRoundTrip(t *testing.T) {
	ctx := context.Background()
	for _, tc := range providerCases {
		t.Run(tc.name, func(t *testing.T) {
			raw := newRaw(t)
			s := NewStore(raw, mustParse(t, configYAML("secrets", tc.provider)))
			w, err := s.Watch(ctx, "/registry/core/secrets/", 0)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			rev, err := s.Create(ctx, secretKey, plain)
			if err != nil {
				t.Fatal(err)
			}
			kv, err := raw.Get(ctx, secretKey)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(kv.Value, []byte(tc.prefix)) {
				t.Errorf("stored value starts %q, want %q", kv.Value[:min(len(kv.Value), 30)], tc.prefix)
			}
			if bytes.Contains(kv.Value, []byte("the secret value")) {
				t.Error("the stored value holds the plaintext")
			}
			if got, err := s.Get(ctx, secretKey); err != nil || !bytes.Equal(got.Value, plain) || got.Revision != rev {
				t.Errorf("Get: %q %d %v", got.Value, got.Revision, err)
			}
			if got, err := s.GetUnless(ctx, secretKey, func(uint64) bool { return false }); err != nil || !bytes.Equal(got.Value, plain) {
				t.Errorf("GetUnless: %q %v", got.Value, err)
			}
			if got, err := s.GetUnless(ctx, secretKey, func(uint64) bool { return true }); err != nil || got.Value != nil || got.Revision != rev {
				t.Errorf("GetUnless with the value in hand: %q %d %v", got.Value, got.Revision, err)
			}
			l, err := s.List(ctx, "/registry/core/secrets/", store.ListOptions{})
			if err != nil || len(l.Items) != 1 || !bytes.Equal(l.Items[0].Value, plain) {
				t.Errorf("List: %+v %v", l.Items, err)
			}
			updated := append(bytes.Clone(plain), " v2"...)
			if _, err := s.Replace(ctx, secretKey, updated, rev, plain); err != nil {
				t.Fatal(err)
			}
			if kv, _ := raw.Get(ctx, secretKey); !bytes.HasPrefix(kv.Value, []byte(tc.prefix)) {
				t.Errorf("replaced value starts %q", kv.Value[:20])
			}
			del, err := s.Delete(ctx, secretKey, 0)
			if err != nil || !bytes.Equal(del.Value, updated) {
				t.Errorf("Delete: %q %v", del.Value, err)
			}
			want := []struct {
				typ         store.EventType
				value, prev []byte
			}{{store.Added, plain, nil}, {store.Modified, updated, plain}, {store.Deleted, updated, updated}}
			for i, wev := range want {
				select {
				case ev := <-w.Events():
					if ev.Type != wev.typ || !bytes.Equal(ev.Value, wev.value) || (wev.prev != nil && !bytes.Equal(ev.PrevValue, wev.prev)) {
						t.Errorf("event %d: %v %q prev %q, want %v %q prev %q", i, ev.Type, ev.Value, ev.PrevValue, wev.typ, wev.value, wev.prev)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("event %d did not come", i)
				}
			}
			if p := w.Progress(); p < del.Revision {
				t.Errorf("progress %d after every event up to %d was delivered", p, del.Revision)
			}
		})
	}
}

// TestUpstreamFormat decodes the stored values by hand, the way
// kube-apiserver lays them out: aescbc a 16-byte IV then CBC with PKCS#7
// padding; aesgcm a 12-byte random nonce then GCM sealed with the store
// key as additional data; secretbox a 24-byte nonce then the box.
func TestUpstreamFormat(t *testing.T) {
	ctx := context.Background()
	secret := bytes.Repeat([]byte{3}, 32)
	decode := map[string]func(t *testing.T, body []byte) []byte{
		"aescbc": func(t *testing.T, body []byte) []byte {
			block, _ := aes.NewCipher(secret)
			iv, ct := body[:16], bytes.Clone(body[16:])
			cipher.NewCBCDecrypter(block, iv).CryptBlocks(ct, ct)
			pad := int(ct[len(ct)-1])
			return ct[:len(ct)-pad]
		},
		"aesgcm": func(t *testing.T, body []byte) []byte {
			block, _ := aes.NewCipher(secret)
			gcm, _ := cipher.NewGCM(block)
			out, err := gcm.Open(nil, body[:12], body[12:], []byte(secretKey))
			if err != nil {
				t.Fatalf("GCM with the store key as additional data: %v", err)
			}
			return out
		},
		"secretbox": func(t *testing.T, body []byte) []byte {
			out, ok := secretbox.Open(nil, body[24:], (*[24]byte)(body[:24]), (*[32]byte)(secret))
			if !ok {
				t.Fatal("secretbox.Open failed")
			}
			return out
		},
	}
	for name, dec := range decode {
		t.Run(name, func(t *testing.T) {
			raw := newRaw(t)
			s := NewStore(raw, mustParse(t, configYAML("secrets", keyed(name, [2]string{"k", key32}))))
			seen := map[string]bool{}
			for i := 0; i < 3; i++ {
				key := fmt.Sprintf("/registry/core/secrets/default/other%d", i)
				if i == 0 {
					key = secretKey
				}
				if _, err := s.Create(ctx, key, plain); err != nil {
					t.Fatal(err)
				}
				kv, _ := raw.Get(ctx, key)
				body, ok := bytes.CutPrefix(kv.Value, []byte("k8s:enc:"+name+":v1:k:"))
				if !ok {
					t.Fatalf("stored value %q", kv.Value)
				}
				seen[string(body)] = true
				if i == 0 {
					if got := dec(t, body); !bytes.Equal(got, plain) {
						t.Errorf("decoded %q, want %q", got, plain)
					}
				}
			}
			// A fresh IV or nonce every write: equal values never store alike.
			if len(seen) != 3 {
				t.Errorf("three writes of one value stored %d distinct ciphertexts", len(seen))
			}
		})
	}
}

// TestWrongKeyAndTampering: a value a configured key did not write, or
// changed in the store, reads as an error naming its key, never as the
// plaintext. aescbc is unauthenticated (as upstream's): a change the
// padding survives decrypts to other bytes, which the API server's
// decoding refuses; the plaintext itself never comes back.
func TestWrongKeyAndTampering(t *testing.T) {
	ctx := context.Background()
	for _, tc := range providerCases {
		t.Run(tc.name, func(t *testing.T) {
			raw := newRaw(t)
			s := NewStore(raw, mustParse(t, configYAML("secrets", tc.provider)))
			if _, err := s.Create(ctx, secretKey, plain); err != nil {
				t.Fatal(err)
			}
			kv, _ := raw.Get(ctx, secretKey)
			authenticated := !strings.HasPrefix(tc.name, "aescbc")
			provider, _, _ := strings.Cut(tc.name, "-")
			check := func(what string, r *Store) {
				t.Helper()
				got, err := r.Get(ctx, secretKey)
				if err == nil && bytes.Equal(got.Value, plain) {
					t.Errorf("%s: read the plaintext", what)
				}
				if err == nil && authenticated {
					t.Errorf("%s: read %q, want an error", what, got.Value)
				}
				if err != nil && !strings.Contains(err.Error(), `unable to transform key "`+secretKey+`"`) {
					t.Errorf("%s: error %q does not name the key", what, err)
				}
			}
			// The same key name with another secret.
			wrong := NewStore(raw, mustParse(t, configYAML("secrets", keyed(provider, [2]string{"key1", other}))))
			check("another secret", wrong)
			// Another key name: nothing reads it.
			_, err := NewStore(raw, mustParse(t, configYAML("secrets", keyed(provider, [2]string{"key2", other})))).Get(ctx, secretKey)
			if err == nil || !strings.Contains(err.Error(), "no matching key was found for the provided") {
				t.Errorf("another key name: %v", err)
			}
			// Another provider: the prefix matches none.
			if _, err := NewStore(raw, mustParse(t, configYAML("secrets", keyed(map[string]string{"aescbc": "aesgcm", "aesgcm": "secretbox", "secretbox": "aescbc"}[provider], [2]string{"key1", key32})))).Get(ctx, secretKey); err == nil || !strings.Contains(err.Error(), "no matching prefix found") {
				t.Errorf("another provider: %v", err)
			}
			// Every byte of the ciphertext changed in turn.
			body := len(tc.prefix)
			for i := body; i < len(kv.Value); i++ {
				tampered := bytes.Clone(kv.Value)
				tampered[i] ^= 0x5a
				if _, err := raw.Update(ctx, secretKey, tampered, mustRev(t, raw)); err != nil {
					t.Fatal(err)
				}
				check(fmt.Sprintf("byte %d changed", i-body), s)
			}
			// Cut short.
			if _, err := raw.Update(ctx, secretKey, kv.Value[:len(kv.Value)-3], mustRev(t, raw)); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Get(ctx, secretKey); err == nil {
				t.Error("a value cut short read without an error")
			}
		})
	}
}

func mustRev(t *testing.T, st store.Store) uint64 {
	t.Helper()
	kv, err := st.Get(context.Background(), secretKey)
	if err != nil {
		t.Fatal(err)
	}
	return kv.Revision
}

// TestPlaintextAndIdentity: values stored before encryption was turned on
// read as they are (and are stale: a rewrite encrypts them); identity
// first writes plaintext and still reads encrypted values (stale, so a
// rewrite decrypts them); an encrypted value of a resource nothing is
// configured for is an error, not ciphertext.
func TestPlaintextAndIdentity(t *testing.T) {
	ctx := context.Background()
	raw := newRaw(t)
	rev, err := raw.Create(ctx, secretKey, plain)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range []string{
		configYAML("secrets", keyed("aescbc", [2]string{"key1", key32})),
		configYAML("secrets", keyed("aescbc", [2]string{"key1", key32}), identityProvider),
	} {
		s := NewStore(raw, mustParse(t, doc))
		if got, err := s.Get(ctx, secretKey); err != nil || !bytes.Equal(got.Value, plain) {
			t.Errorf("plaintext read: %q %v", got.Value, err)
		}
		if !s.Stale(ctx, secretKey, rev) {
			t.Error("a plaintext value of an encrypted resource is not stale")
		}
	}
	enc := NewStore(raw, mustParse(t, configYAML("secrets", keyed("aescbc", [2]string{"key1", key32}))))
	if _, err := enc.Update(ctx, secretKey, plain, rev); err != nil {
		t.Fatal(err)
	}
	rev = mustRev(t, raw)
	if enc.Stale(ctx, secretKey, rev) {
		t.Error("a value written with the write key is stale")
	}
	if enc.Stale(ctx, secretKey, rev-1) {
		t.Error("stale at a revision the key is not at")
	}

	off := NewStore(raw, mustParse(t, configYAML("secrets", identityProvider, keyed("aescbc", [2]string{"key1", key32}))))
	if got, err := off.Get(ctx, secretKey); err != nil || !bytes.Equal(got.Value, plain) {
		t.Errorf("identity first reading an encrypted value: %q %v", got.Value, err)
	}
	if !off.Stale(ctx, secretKey, rev) {
		t.Error("an encrypted value is not stale with identity first")
	}
	other := "/registry/core/secrets/default/s2"
	if _, err := off.Create(ctx, other, plain); err != nil {
		t.Fatal(err)
	}
	if kv, _ := raw.Get(ctx, other); !bytes.Equal(kv.Value, plain) {
		t.Errorf("identity first stored %q", kv.Value)
	}

	// Only configmaps listed: secrets are written as they are and their
	// encrypted values are refused.
	cms := NewStore(raw, mustParse(t, configYAML("configmaps", keyed("aescbc", [2]string{"key1", key32}))))
	_, err = cms.Get(ctx, secretKey)
	if err == nil || !strings.Contains(err.Error(), "identity transformer tried to read encrypted data") || !strings.Contains(err.Error(), secretKey) {
		t.Errorf("encrypted value of an unlisted resource: %v", err)
	}
	if err := Unreadable(secretKey, []byte("k8s:enc:aescbc:v1:key1:xxxx")); !strings.Contains(err.Error(), "aescbc:key1") {
		t.Errorf("Unreadable does not say which key wrote the value: %v", err)
	}
}

// TestResourceMatching: upstream's rules pick a resource's providers:
// the resource itself, its group's wildcard (*. for the core group),
// then *.*; keys outside the objects' tree are never encrypted.
func TestResourceMatching(t *testing.T) {
	ctx := context.Background()
	doc := `apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources: [events]
  providers: [{identity: {}}]
- resources: [secrets, configmaps, widgets.example.com]
  providers: [{aescbc: {keys: [{name: a, secret: ` + key32 + `}]}}]
- resources: ['*.apps']
  providers: [{secretbox: {keys: [{name: b, secret: ` + key32 + `}]}}]
- resources: ['*.*']
  providers: [{aesgcm: {keys: [{name: c, secret: ` + key32 + `}]}}]
`
	raw := newRaw(t)
	s := NewStore(raw, mustParse(t, doc))
	for key, prefix := range map[string]string{
		"/registry/core/secrets/ns/x":                      "k8s:enc:aescbc:v1:a:",
		"/registry/core/configmaps/ns/x":                   "k8s:enc:aescbc:v1:a:",
		"/registry/example.com/widgets/ns/x":               "k8s:enc:aescbc:v1:a:",
		"/registry/apps/deployments/ns/x":                  "k8s:enc:secretbox:v1:b:",
		"/registry/apps/statefulsets/ns/x":                 "k8s:enc:secretbox:v1:b:",
		"/registry/core/pods/ns/x":                         "k8s:enc:aesgcm:v1:c:",
		"/registry/rbac.authorization.k8s.io/roles/ns/x":   "k8s:enc:aesgcm:v1:c:",
		"/registry/core/events/ns/x":                       "",
		"/bonsai/not-an-object":                            "",
		"/registry/example.com/gadgets/cluster-scoped-one": "k8s:enc:aesgcm:v1:c:",
	} {
		if _, err := s.Create(ctx, key, plain); err != nil {
			t.Fatal(err)
		}
		kv, _ := raw.Get(ctx, key)
		if prefix == "" && !bytes.Equal(kv.Value, plain) || prefix != "" && !bytes.HasPrefix(kv.Value, []byte(prefix)) {
			t.Errorf("%s stored as %q, want prefix %q", key, kv.Value[:min(len(kv.Value), 24)], prefix)
		}
		if got, err := s.Get(ctx, key); err != nil || !bytes.Equal(got.Value, plain) {
			t.Errorf("%s read %q %v", key, got.Value, err)
		}
	}
}

// TestConfigErrors: bad files are refused with upstream's messages.
func TestConfigErrors(t *testing.T) {
	short := base64.StdEncoding.EncodeToString([]byte("12345678"))
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"aescbc key of 8 bytes", configYAML("secrets", keyed("aescbc", [2]string{"k", short})),
			`resources[0].providers[0].aescbc.keys[0].secret: Invalid value: "REDACTED": secret is not of the expected length, got 8, expected one of [16 24 32]`},
		{"aesgcm key of 8 bytes", configYAML("secrets", keyed("aesgcm", [2]string{"k", short})), "secret is not of the expected length, got 8, expected one of [16 24 32]"},
		{"secretbox key of 16 bytes", configYAML("secrets", keyed("secretbox", [2]string{"k", key16})),
			`resources[0].providers[0].secretbox.keys[0].secret: Invalid value: "REDACTED": secret is not of the expected length, got 16, expected one of [32]`},
		{"not base64", configYAML("secrets", keyed("aescbc", [2]string{"k", "not base64!"})), "secrets must be base64 encoded"},
		{"no key name", configYAML("secrets", keyed("aescbc", [2]string{"", key32})), "resources[0].providers[0].aescbc.keys[0].name: Required value: name is a mandatory field for a key"},
		{"no keys", configYAML("secrets", "  - aescbc: {keys: []}\n"), "resources[0].providers[0].aescbc.keys: Required value: at least one keys is required"},
		{"no providers", configYAML("secrets"), "resources[0].providers: Required value: at least one resources[0].providers is required"},
		{"two providers in one", configYAML("secrets", "  - identity: {}\n    aescbc: {keys: [{name: k, secret: "+key32+"}]}\n"), "more than one provider specified in a single element"},
		{"kms", configYAML("secrets", "  - kms: {apiVersion: v2, name: x, endpoint: unix:///kms.sock}\n"), "resources[0].providers[0].kms: KMS providers are not supported by bonsai"},
		{"star", configYAML("'*'", identityProvider), "use '*.' to encrypt all the resources from core API group or *.* to encrypt all resources"},
		{"overlap", configYAML("secrets, '*.'", identityProvider), "using overlapping resources such as 'secrets' and '*.' in the same resource list is not allowed"},
		{"masked", configYAML("'*.'", identityProvider) + "- resources: [secrets]\n  providers: [{identity: {}}]\n", `resource "secrets" is masked by earlier rule "*."`},
		{"capitals", configYAML("Secrets", identityProvider), "resource name should not contain capital letters"},
		{"unknown field", strings.Replace(configYAML("secrets", keyed("aescbc", [2]string{"k", key32})), "aescbc", "aescbcc", 1), `strict decoding error: unknown field "resources[0].providers[0].aescbcc"`},
		{"wrong kind", "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfig\nresources: []\n", `no kind "EncryptionConfig" is registered for version "apiserver.config.k8s.io/v1"`},
		{"another kind", "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\n", "got unexpected config type"},
		{"no resources", "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\n", "resources: Required value: at least one resources is required"},
		{"not YAML", "{", "error decoding encryption provider configuration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.doc)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error of more than one line: %q", err)
			}
		})
	}
	if _, err := Load(filepath.Join(t.TempDir(), "absent.yaml")); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("absent file: %v", err)
	}
	empty := filepath.Join(t.TempDir(), "empty.yaml")
	os.WriteFile(empty, nil, 0o600)
	if _, err := Load(empty); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Errorf("empty file: %v", err)
	}
	// The legacy kind of upstream's documentation still reads.
	if _, err := Parse([]byte("kind: EncryptionConfig\napiVersion: v1\nresources:\n- resources: [secrets]\n  providers: [{identity: {}}]\n")); err != nil {
		t.Errorf("legacy EncryptionConfig: %v", err)
	}
}

func writeConfig(t *testing.T, doc string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "encryption.yaml")
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRotate: a rotation puts a new key first in the file (0600, the old
// key kept), rewrites every stored value of the encrypted resources with
// it and leaves the others alone; with the old key then removed from the
// file, everything still reads.
func TestRotate(t *testing.T) {
	ctx := context.Background()
	raw := newRaw(t)
	path := writeConfig(t, configYAML("secrets", keyed("aescbc", [2]string{"key1", key32}), identityProvider))
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(raw, cfg)
	var keys []string
	for i := 0; i < 7; i++ {
		k := fmt.Sprintf("/registry/core/secrets/ns/s%d", i)
		if i < 2 {
			// Stored before encryption was turned on.
			_, err = raw.Create(ctx, k, plain)
		} else {
			_, err = s.Create(ctx, k, plain)
		}
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	const cmKey = "/registry/core/configmaps/ns/c"
	if _, err := s.Create(ctx, cmKey, plain); err != nil {
		t.Fatal(err)
	}
	st, err := s.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r := st.Resources[0]; r.Total != 7 || r.Current != 5 || r.Stored["identity"] != 2 || r.Stored["aescbc:key1"] != 5 || st.AllCurrent() {
		t.Errorf("status before: %+v", st)
	}

	added, n, err := s.Rotate(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(added) != 1 || !strings.HasPrefix(added[0], "aescbc:key-") || n != 7 {
		t.Fatalf("rotate added %v, rewrote %d", added, n)
	}
	newPrefix := "k8s:enc:aescbc:v1:" + strings.TrimPrefix(added[0], "aescbc:") + ":"
	for _, k := range keys {
		kv, _ := raw.Get(ctx, k)
		if !bytes.HasPrefix(kv.Value, []byte(newPrefix)) {
			t.Errorf("%s stored as %q after rotation, want prefix %q", k, kv.Value[:30], newPrefix)
		}
	}
	if kv, _ := raw.Get(ctx, cmKey); !bytes.Equal(kv.Value, plain) {
		t.Errorf("an unlisted resource was rewritten: %q", kv.Value)
	}
	if st, err := s.Status(ctx); err != nil || !st.AllCurrent() || st.Resources[0].WriteKey != added[0] || st.Resources[0].Current != 7 {
		t.Errorf("status after: %+v %v", st, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("rotated file mode: %v %v", fi.Mode(), err)
	}
	data, _ := os.ReadFile(path)
	rotated, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if got := rotated.order[0].keys; len(got) != 3 || got[0].label != added[0] || got[1].label != "aescbc:key1" || got[2].label != "identity" {
		t.Errorf("rotated file's keys: %+v", got)
	}

	// The old key removed by hand: every value still reads.
	withoutOld := rotated.file.DeepCopy()
	withoutOld.Resources[0].Providers[0].AESCBC.Keys = withoutOld.Resources[0].Providers[0].AESCBC.Keys[:1]
	doc, err := Marshal(withoutOld, "test")
	if err != nil {
		t.Fatal(err)
	}
	fresh := NewStore(raw, mustParse(t, string(doc)))
	for _, k := range keys {
		if kv, err := fresh.Get(ctx, k); err != nil || !bytes.Equal(kv.Value, plain) {
			t.Errorf("%s without the old key: %q %v", k, kv.Value, err)
		}
	}

	// Nothing encrypts: nothing to rotate, the file untouched.
	offPath := writeConfig(t, configYAML("secrets", identityProvider, keyed("aescbc", [2]string{"key1", key32})))
	before, _ := os.ReadFile(offPath)
	off, _ := Load(offPath)
	if _, _, err := NewStore(raw, off).Rotate(ctx, raw); !errors.Is(err, ErrNothingToRotate) {
		t.Errorf("rotating identity first: %v", err)
	}
	if after, _ := os.ReadFile(offPath); !bytes.Equal(before, after) {
		t.Error("a refused rotation changed the file")
	}
}

// TestReencryptRacesWrites: writes going on during a rotation end up
// with the new key too, and none is lost.
func TestReencryptRacesWrites(t *testing.T) {
	ctx := context.Background()
	raw := newRaw(t)
	cfg, err := Load(writeConfig(t, configYAML("secrets", keyed("secretbox", [2]string{"key1", key32}))))
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(raw, cfg)
	const n = 50
	for i := 0; i < n; i++ {
		if _, err := s.Create(ctx, fmt.Sprintf("/registry/core/secrets/ns/s%02d", i), plain); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	wrote := make(chan map[string][]byte)
	go func() {
		last := map[string][]byte{}
		for i := 0; ; i++ {
			select {
			case <-stop:
				wrote <- last
				return
			default:
			}
			k := fmt.Sprintf("/registry/core/secrets/ns/s%02d", i%n)
			kv, err := s.Get(ctx, k)
			if err != nil {
				continue
			}
			v := append(bytes.Clone(plain), fmt.Sprint(i)...)
			if _, err := s.Update(ctx, k, v, kv.Revision); err == nil {
				last[k] = v
			}
		}
	}()
	_, _, err = s.Rotate(ctx, s)
	close(stop)
	last := <-wrote
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Status(ctx)
	if err != nil || !st.AllCurrent() {
		t.Errorf("status after a rotation under writes: %+v %v", st, err)
	}
	for k, v := range last {
		if kv, err := s.Get(ctx, k); err != nil || !bytes.Equal(kv.Value, v) {
			t.Errorf("%s: %q %v, want the last write %q", k, kv.Value, err, v)
		}
	}
}

// TestWatchProgressNeverAheadOfEvents: a watcher that has drained its
// events may take its progress as seen; the forwarding of decrypted
// events must not let progress pass an event still on its way.
func TestWatchProgressNeverAheadOfEvents(t *testing.T) {
	ctx := context.Background()
	raw := newRaw(t)
	s := NewStore(raw, mustParse(t, configYAML("secrets", keyed("aesgcm", [2]string{"k", key32}))))
	w, err := s.Watch(ctx, "/registry/core/secrets/", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// Writers in parallel: the store commits them in batches, so events
	// arrive in bursts while progress is asked for.
	const writers, each = 8, 100
	var wg sync.WaitGroup
	for wr := 0; wr < writers; wr++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				s.Create(ctx, fmt.Sprintf("/registry/core/secrets/ns/s%d-%03d", wr, i), plain)
			}
		}()
	}
	// floor is a progress read once the events were drained: every
	// event that comes after must be above it.
	var floor uint64
	receive := func(ev store.Event) {
		if !bytes.Equal(ev.Value, plain) {
			t.Fatalf("event value %q", ev.Value)
		}
		if ev.Revision <= floor {
			t.Fatalf("event at %d came after progress %d was read from a drained watch", ev.Revision, floor)
		}
	}
	for received := 0; received < writers*each; {
		select {
		case ev := <-w.Events():
			receive(ev)
			received++
		default:
			p := w.Progress()
			// What was on its way when progress was read may come now.
			for drained := false; !drained; {
				select {
				case ev := <-w.Events():
					receive(ev)
					received++
				default:
					drained = true
				}
			}
			floor = max(floor, p)
		}
	}
	wg.Wait()
	// An event the watch cannot decrypt ends it, with an error naming
	// the key.
	if _, err := raw.Create(ctx, "/registry/core/secrets/ns/bad", []byte("k8s:enc:aesgcm:v1:k:garbage-garbage-garbage")); err != nil {
		t.Fatal(err)
	}
	for ev := range w.Events() {
		t.Fatalf("event %v %s delivered", ev.Type, ev.Key)
	}
	if err := w.Err(); err == nil || !strings.Contains(err.Error(), "/registry/core/secrets/ns/bad") {
		t.Errorf("watch error: %v", err)
	}
}

// TestMain quiets upstream's transformers, which log every value they
// fail to decrypt: the tests fail many on purpose.
func TestMain(m *testing.M) {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	fs.Set("logtostderr", "false")
	fs.Set("stderrthreshold", "FATAL")
	klog.SetOutput(io.Discard)
	os.Exit(m.Run())
}

// TestOwnWriteEventsCarryTheWritersSlice: while a write is under way, its
// store event's value (the very encrypted slice the store was given)
// decrypts to the very slice the writer passed, which the API server's
// watch cache recognises to hand watchers the writer's object instead of
// decoding it again; once the write returned, to an equal copy.
func TestOwnWriteEventsCarryTheWritersSlice(t *testing.T) {
	s := NewStore(newRaw(t), mustParse(t, configYAML("secrets", keyed("aescbc", [2]string{"key1", key32}))))
	value := bytes.Clone(plain)
	out, done, err := s.encrypt(secretKey, value)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.decrypt(secretKey, out)
	if err != nil || len(got) == 0 || &got[0] != &value[0] {
		t.Errorf("during the write: %q %v, not the writer's slice", got, err)
	}
	done()
	got, err = s.decrypt(secretKey, out)
	if err != nil || !bytes.Equal(got, value) || &got[0] == &value[0] {
		t.Errorf("after the write: %q %v", got, err)
	}
	if len(s.writing) != 0 {
		t.Errorf("%d writes still recorded", len(s.writing))
	}
}

// TestMalformedValues: values no writer made (cut to an IV, empty after
// the prefix) are errors naming their key, never a panic: upstream's
// aescbc indexes out of range on an IV alone.
func TestMalformedValues(t *testing.T) {
	ctx := context.Background()
	raw := newRaw(t)
	s := NewStore(raw, mustParse(t, configYAML("secrets", keyed("aescbc", [2]string{"c", key32}), keyed("aesgcm", [2]string{"g", key32}), keyed("secretbox", [2]string{"s", key32}))))
	for _, v := range []string{
		"k8s:enc:aescbc:v1:c:0123456789abcdef",
		"k8s:enc:aescbc:v1:c:",
		"k8s:enc:aesgcm:v1:g:",
		"k8s:enc:aesgcm:v1:g:0123456789ab",
		"k8s:enc:secretbox:v1:s:",
		"k8s:enc:",
	} {
		kv, err := raw.Get(ctx, secretKey)
		if err == nil {
			_, err = raw.Update(ctx, secretKey, []byte(v), kv.Revision)
		} else {
			_, err = raw.Create(ctx, secretKey, []byte(v))
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, secretKey); err == nil || !strings.Contains(err.Error(), secretKey) {
			t.Errorf("%q: %v", v, err)
		}
	}
}

// TestConfigErrorsHoldNoKeys: a file the decoder cannot place is refused
// without quoting it: it holds keys.
func TestConfigErrorsHoldNoKeys(t *testing.T) {
	for _, doc := range []string{
		strings.Replace(configYAML("secrets", keyed("aescbc", [2]string{"k", key32})), "kind: EncryptionConfiguration\n", "", 1),
		strings.Replace(configYAML("secrets", keyed("aescbc", [2]string{"k", key32})), "apiVersion: apiserver.config.k8s.io/v1\n", "", 1),
	} {
		_, err := Parse([]byte(doc))
		if err == nil || strings.Contains(err.Error(), key32) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v", err)
		}
	}
}
