// Package encryption owns encryption at rest: the EncryptionConfiguration
// file of --encryption-provider-config (apiserver.config.k8s.io/v1, as
// kube-apiserver reads it), the transformers it makes (upstream's own
// aescbc, aesgcm, secretbox and identity), and a store.Store that
// encrypts values on their way into the store and decrypts them on their
// way out, so that everything above it (the API server's caches, its
// no-op write check, the watch fan-out) only ever sees plaintext and the
// store only ever sees what the configuration says it should hold. It
// also rotates keys: a new key first in the file, every stored value
// rewritten with it. It knows store keys, not API objects.
package encryption

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	apiserverapi "k8s.io/apiserver/pkg/apis/apiserver"
	apiserverinstall "k8s.io/apiserver/pkg/apis/apiserver/install"
	"k8s.io/apiserver/pkg/apis/apiserver/validation"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/storage/value"
	aestransformer "k8s.io/apiserver/pkg/storage/value/encrypt/aes"
	"k8s.io/apiserver/pkg/storage/value/encrypt/identity"
	"k8s.io/apiserver/pkg/storage/value/encrypt/secretbox"

	"bonsai.dev/bonsai/store"
)

// Upstream's prefixes of stored values (k8s.io/apiserver's
// encryptionconfig): each is followed by the key's name and a colon.
const (
	aesCBCPrefix    = "k8s:enc:aescbc:v1:"
	aesGCMPrefix    = "k8s:enc:aesgcm:v1:"
	secretboxPrefix = "k8s:enc:secretbox:v1:"
)

// encryptedPrefix starts every encrypted value, whatever its provider:
// upstream reserves it, and neither protobuf ("k8s\x00") nor JSON ("{")
// can start with it.
var encryptedPrefix = []byte("k8s:enc:")

// IsEncrypted says whether a stored value is encrypted.
func IsEncrypted(v []byte) bool { return bytes.HasPrefix(v, encryptedPrefix) }

// Config is a checked EncryptionConfiguration and the transformers it
// makes, one rule per resource the file lists.
type Config struct {
	// Path is the file it was read from.
	Path string
	file *apiserverapi.EncryptionConfiguration
	// rules by the group and resource they name ("*" for wildcards), and
	// in the file's order for status.
	rules map[schema.GroupResource]*rule
	order []*rule
}

// rule is how the values of one listed resource (or wildcard) are
// written and read.
type rule struct {
	// name is the resource as the file writes it: secrets, *.apps, *.*.
	name string
	gr   schema.GroupResource
	// t is upstream's transformer over the rule's providers in order:
	// the first writes, every one is tried to read.
	t value.Transformer
	// keys are the providers' keys in order, the first the write key.
	keys []keyInfo
	// ctx carries the resource to upstream's metrics and logs.
	ctx context.Context
}

// keyInfo names one key of a rule: its label (aescbc:key1, identity)
// and the prefix of the values it writes (nil for identity).
type keyInfo struct {
	label  string
	prefix []byte
}

var configScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	apiserverinstall.Install(s)
	return s
}()

// Load reads and checks the EncryptionConfiguration file at path as
// kube-apiserver does: strict decoding, upstream's validation (key
// lengths, wildcards, overlaps) and transformers. KMS providers are
// refused: bonsai has no KMS plugin client.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(data) == 0 {
		return nil, errors.New("encryption provider configuration file is empty")
	}
	cfg, err := Parse(data)
	if err != nil {
		return nil, err
	}
	cfg.Path = path
	return cfg, nil
}

// Parse checks an EncryptionConfiguration document and builds its
// transformers.
func Parse(data []byte) (*Config, error) {
	codecs := serializer.NewCodecFactory(configScheme, serializer.EnableStrict)
	obj, gvk, err := codecs.UniversalDecoder().Decode(data, nil, nil)
	switch {
	case runtime.IsMissingKind(err):
		// The decoder's message quotes the whole document: keys.
		return nil, errors.New("error decoding encryption provider configuration: kind is missing (want kind: EncryptionConfiguration)")
	case runtime.IsMissingVersion(err):
		return nil, errors.New("error decoding encryption provider configuration: apiVersion is missing (want apiVersion: apiserver.config.k8s.io/v1)")
	case err != nil:
		return nil, fmt.Errorf("error decoding encryption provider configuration: %s", strings.Join(strings.Fields(err.Error()), " "))
	}
	file, ok := obj.(*apiserverapi.EncryptionConfiguration)
	if !ok {
		return nil, fmt.Errorf("got unexpected config type: %v", gvk)
	}
	for i, rc := range file.Resources {
		for j, p := range rc.Providers {
			if p.KMS != nil {
				return nil, fmt.Errorf("resources[%d].providers[%d].kms: KMS providers are not supported by bonsai; use aescbc, aesgcm, secretbox or identity", i, j)
			}
		}
	}
	if err := validation.ValidateEncryptionConfiguration(file, false).ToAggregate(); err != nil {
		return nil, err
	}
	cfg := &Config{file: file, rules: map[schema.GroupResource]*rule{}}
	for _, rc := range file.Resources {
		prefixed, keys, err := providers(rc)
		if err != nil {
			return nil, err
		}
		for _, res := range rc.Resources {
			gr := schema.ParseGroupResource(res)
			// As upstream: a resource after a wildcard that covers it
			// would never be used.
			for _, mask := range []schema.GroupResource{{Group: gr.Group, Resource: "*"}, {Group: "*", Resource: "*"}} {
				if _, masked := cfg.rules[mask]; masked {
					return nil, fmt.Errorf("resource %q is masked by earlier rule %q", grString(gr), grString(mask))
				}
			}
			r := cfg.rules[gr]
			if r == nil {
				r = &rule{name: res, gr: gr, ctx: request.WithRequestInfo(context.Background(), &request.RequestInfo{IsResourceRequest: true, APIGroup: gr.Group, Resource: gr.Resource})}
				cfg.rules[gr] = r
				cfg.order = append(cfg.order, r)
			}
			// A resource listed twice reads with every entry's
			// providers, the first entry's first one writing.
			r.keys = append(r.keys, keys...)
			r.t = appendTransformers(r.t, prefixed)
		}
	}
	return cfg, nil
}

// prefixedTransformers remembers the prefix transformers a rule was made
// of, so that a resource listed twice gets both lists.
type prefixedTransformers struct {
	value.Transformer
	list []value.PrefixTransformer
}

func appendTransformers(t value.Transformer, more []value.PrefixTransformer) value.Transformer {
	var list []value.PrefixTransformer
	if p, ok := t.(prefixedTransformers); ok {
		list = append(list, p.list...)
	}
	list = append(list, more...)
	return prefixedTransformers{Transformer: value.NewPrefixTransformers(errors.New("no matching prefix found"), list...), list: list}
}

// providers makes one entry's providers, in order, as upstream does.
func providers(rc apiserverapi.ResourceConfiguration) ([]value.PrefixTransformer, []keyInfo, error) {
	var out []value.PrefixTransformer
	var keys []keyInfo
	for _, p := range rc.Providers {
		var (
			t   value.PrefixTransformer
			ks  []keyInfo
			err error
		)
		switch {
		case p.AESGCM != nil:
			t, ks, err = aesProvider(p.AESGCM, aestransformer.NewGCMTransformer, aesGCMPrefix, "aesgcm")
		case p.AESCBC != nil:
			t, ks, err = aesProvider(p.AESCBC, func(b cipher.Block) (value.Transformer, error) { return aestransformer.NewCBCTransformer(b), nil }, aesCBCPrefix, "aescbc")
		case p.Secretbox != nil:
			t, ks, err = secretboxProvider(p.Secretbox)
		case p.Identity != nil:
			t = value.PrefixTransformer{Transformer: identity.NewEncryptCheckTransformer(), Prefix: []byte{}}
			ks = []keyInfo{{label: "identity"}}
		default:
			return nil, nil, errors.New("provider does not contain any of the expected providers: KMS, AESGCM, AESCBC, Secretbox, Identity")
		}
		if err != nil {
			return nil, nil, err
		}
		out = append(out, t)
		keys = append(keys, ks...)
	}
	return out, keys, nil
}

func aesProvider(c *apiserverapi.AESConfiguration, fn func(cipher.Block) (value.Transformer, error), prefix, kind string) (value.PrefixTransformer, []keyInfo, error) {
	var keyTransformers []value.PrefixTransformer
	var keys []keyInfo
	for _, k := range c.Keys {
		secret, err := base64.StdEncoding.DecodeString(k.Secret)
		if err != nil {
			return value.PrefixTransformer{}, nil, fmt.Errorf("could not obtain secret for named key %s: %w", k.Name, err)
		}
		block, err := aes.NewCipher(secret)
		if err != nil {
			return value.PrefixTransformer{}, nil, fmt.Errorf("error while creating cipher for named key %s: %w", k.Name, err)
		}
		t, err := fn(block)
		if err != nil {
			return value.PrefixTransformer{}, nil, fmt.Errorf("error while creating transformer for named key %s: %w", k.Name, err)
		}
		keyTransformers = append(keyTransformers, value.PrefixTransformer{Transformer: t, Prefix: []byte(k.Name + ":")})
		keys = append(keys, keyInfo{label: kind + ":" + k.Name, prefix: []byte(prefix + k.Name + ":")})
	}
	t := value.NewPrefixTransformers(errors.New("no matching key was found for the provided AES transformer"), keyTransformers...)
	return value.PrefixTransformer{Transformer: t, Prefix: []byte(prefix)}, keys, nil
}

func secretboxProvider(c *apiserverapi.SecretboxConfiguration) (value.PrefixTransformer, []keyInfo, error) {
	var keyTransformers []value.PrefixTransformer
	var keys []keyInfo
	for _, k := range c.Keys {
		secret, err := base64.StdEncoding.DecodeString(k.Secret)
		if err != nil {
			return value.PrefixTransformer{}, nil, fmt.Errorf("could not obtain secret for named key %s: %s", k.Name, err)
		}
		if len(secret) != 32 {
			return value.PrefixTransformer{}, nil, fmt.Errorf("expected key size 32 for secretbox provider, got %v", len(secret))
		}
		keyTransformers = append(keyTransformers, value.PrefixTransformer{Transformer: secretbox.NewSecretboxTransformer([32]byte(secret)), Prefix: []byte(k.Name + ":")})
		keys = append(keys, keyInfo{label: "secretbox:" + k.Name, prefix: []byte(secretboxPrefix + k.Name + ":")})
	}
	t := value.NewPrefixTransformers(errors.New("no matching key was found for the provided Secretbox transformer"), keyTransformers...)
	return value.PrefixTransformer{Transformer: t, Prefix: []byte(secretboxPrefix)}, keys, nil
}

// grString is a rule's resource as the file writes it.
func grString(gr schema.GroupResource) string {
	if gr.Group == "" && gr.Resource == "*" {
		return "*."
	}
	return gr.String()
}

// ruleFor is the rule of the store key's resource, as upstream picks it:
// the resource itself, then its group's wildcard, then *.*; nil for a
// resource the file does not list (its values are written as they are)
// and for keys outside the API objects' tree.
func (c *Config) ruleFor(key string) *rule {
	if c == nil {
		return nil
	}
	gr, ok := groupResource(key)
	if !ok {
		return nil
	}
	if r := c.rules[gr]; r != nil {
		return r
	}
	if r := c.rules[schema.GroupResource{Group: gr.Group, Resource: "*"}]; r != nil {
		return r
	}
	return c.rules[schema.GroupResource{Group: "*", Resource: "*"}]
}

// groupResource is the resource of a key or prefix
// /registry/<group>/<resource>/...
func groupResource(key string) (schema.GroupResource, bool) {
	rest, ok := strings.CutPrefix(key, store.RegistryRoot)
	if !ok {
		return schema.GroupResource{}, false
	}
	group, rest, ok := strings.Cut(rest, "/")
	if !ok {
		return schema.GroupResource{}, false
	}
	resource, _, ok := strings.Cut(rest, "/")
	if !ok || resource == "" {
		return schema.GroupResource{}, false
	}
	if group == store.CoreGroup {
		group = ""
	}
	return schema.GroupResource{Group: group, Resource: resource}, true
}

// encrypts says whether the rule's write key encrypts.
func (r *rule) encrypts() bool { return r != nil && r.keys[0].prefix != nil }

// current says whether a stored value is written with the rule's write
// key: what a rotation leaves every value of the rule in.
func (r *rule) current(v []byte) bool {
	if r == nil || !r.encrypts() {
		return !IsEncrypted(v)
	}
	return bytes.HasPrefix(v, r.keys[0].prefix)
}

// labelOf names the key a stored value was written with: a key of the
// rule (aescbc:key1), identity for plaintext, or what its prefix says
// for a key the rule does not have.
func (r *rule) labelOf(v []byte) (label string, known bool) {
	if !IsEncrypted(v) {
		return "identity", r == nil || r.has("identity")
	}
	if r != nil {
		for _, k := range r.keys {
			if k.prefix != nil && bytes.HasPrefix(v, k.prefix) {
				return k.label, true
			}
		}
	}
	// k8s:enc:<provider>:<version>:<name>:
	parts := strings.SplitN(string(v[len(encryptedPrefix):min(len(v), 256)]), ":", 4)
	if len(parts) == 4 {
		return parts[0] + ":" + parts[2], false
	}
	return "unknown", false
}

func (r *rule) has(label string) bool {
	for _, k := range r.keys {
		if k.label == label {
			return true
		}
	}
	return false
}

// write is the stored form of a value of key under rule r: encrypted
// with its write key, bound to the key (aesgcm authenticates it).
func (r *rule) write(key string, v []byte) ([]byte, error) {
	if !r.encrypts() {
		return v, nil
	}
	out, err := r.t.TransformToStorage(r.ctx, v, value.DefaultContext(key))
	if err != nil {
		return nil, fmt.Errorf("unable to transform key %q: %w", key, err)
	}
	return out, nil
}

// read is the plaintext of a value stored under key, and whether it is
// stale (not written with the write key, so a rewrite changes it). A
// value without upstream's encrypted prefix is plaintext stored before
// the resource was encrypted: it reads as it is, whatever the providers,
// so that turning encryption on never makes objects unreadable. An
// encrypted value no provider reads is an error naming the key, never
// the ciphertext.
func (r *rule) read(key string, v []byte) (out []byte, stale bool, err error) {
	if !IsEncrypted(v) {
		return v, r.encrypts(), nil
	}
	if r == nil {
		return nil, false, Unreadable(key, v)
	}
	// Upstream's aescbc indexes out of range on a value of an IV and no
	// block; whatever a stored value holds, it must not take the server
	// down (a watch decrypts on a goroutine of its own).
	defer func() {
		if p := recover(); p != nil {
			out, stale, err = nil, false, fmt.Errorf("unable to transform key %q: malformed encrypted value (%v)", key, p)
		}
	}()
	out, stale, err = r.t.TransformFromStorage(r.ctx, v, value.DefaultContext(key))
	if err != nil {
		return nil, false, fmt.Errorf("unable to transform key %q: %w", key, err)
	}
	return out, stale, nil
}

// Unreadable is the error for an encrypted value of a resource that no
// encryption provider is configured for (upstream's identity transformer
// refusing to read encrypted data).
func Unreadable(key string, v []byte) error {
	_, _, err := identity.NewEncryptCheckTransformer().TransformFromStorage(context.Background(), v, nil)
	label, _ := (*rule)(nil).labelOf(v)
	return fmt.Errorf("unable to transform key %q: %w (written with %s, which no provider of the encryption configuration for this resource reads)", key, err, label)
}
