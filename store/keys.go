package store

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strings"
)

// RegistryRoot is the prefix of every API object key.
const RegistryRoot = "/registry/"

// CoreGroup names the legacy API group ("") in keys, so that no key has an
// empty segment.
const CoreGroup = "core"

// ObjectKey names one API object:
// /registry/<group>/<resource>/<namespace>/<name>, or without the namespace
// segment for cluster-scoped resources.
type ObjectKey struct {
	Group     string // "" for the core group
	Resource  string
	Namespace string // "" for cluster-scoped objects
	Name      string
}

// String returns the store key.
func (k ObjectKey) String() string {
	if k.Namespace == "" {
		return k.ResourcePrefix() + k.Name
	}
	return k.ResourcePrefix() + k.Namespace + "/" + k.Name
}

// ResourcePrefix is the prefix holding every object of the resource.
func (k ObjectKey) ResourcePrefix() string {
	g := k.Group
	if g == "" {
		g = CoreGroup
	}
	return RegistryRoot + g + "/" + k.Resource + "/"
}

// NamespacePrefix is the prefix holding the resource's objects in one
// namespace (the resource prefix when Namespace is empty).
func (k ObjectKey) NamespacePrefix() string {
	if k.Namespace == "" {
		return k.ResourcePrefix()
	}
	return k.ResourcePrefix() + k.Namespace + "/"
}

// ParseObjectKey splits a key made by ObjectKey.String. namespaced says which
// shape to expect; the key is checked with ValidateKey.
func ParseObjectKey(key string, namespaced bool) (ObjectKey, error) {
	if err := ValidateKey(key); err != nil {
		return ObjectKey{}, err
	}
	rest, ok := strings.CutPrefix(key, RegistryRoot)
	if !ok {
		return ObjectKey{}, fmt.Errorf("%w %q: not under %s", ErrInvalidKey, key, RegistryRoot)
	}
	parts := strings.Split(rest, "/")
	want := 3
	if namespaced {
		want = 4
	}
	if len(parts) != want {
		return ObjectKey{}, fmt.Errorf("%w %q: want %d segments after %s, got %d", ErrInvalidKey, key, want, RegistryRoot, len(parts))
	}
	k := ObjectKey{Group: parts[0], Resource: parts[1]}
	if k.Group == CoreGroup {
		k.Group = ""
	}
	if namespaced {
		k.Namespace, k.Name = parts[2], parts[3]
	} else {
		k.Name = parts[2]
	}
	return k, nil
}

// continueToken is the opaque List continuation, in the shape Kubernetes
// uses: the revision the list is read at and the next key relative to the
// list prefix. Revision -1 is the newest revision: the token
// kube-apiserver hands out with the 410 for a compacted one, to finish
// the list inconsistently.
type continueToken struct {
	APIVersion string `json:"v"`
	Revision   int64  `json:"rv"`
	StartKey   string `json:"start"`
}

// newestRevision is a token's revision for "the newest revision".
const newestRevision = -1

const continueTokenVersion = "meta.k8s.io/v1"

// EncodeContinue makes a token resuming a list of prefix at nextKey, read
// at rev; rev 0 reads at the newest revision, whichever it is then.
func EncodeContinue(prefix, nextKey string, rev uint64) (string, error) {
	rel, ok := strings.CutPrefix(nextKey, prefix)
	if !ok || rev > math.MaxInt64 {
		return "", fmt.Errorf("%w: key %q is not under %q", ErrInvalidContinue, nextKey, prefix)
	}
	r := int64(rev)
	if rev == 0 {
		r = newestRevision
	}
	b, err := json.Marshal(continueToken{APIVersion: continueTokenVersion, Revision: r, StartKey: rel})
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// DecodeContinue returns the absolute key to resume prefix at, and the
// revision to read at (0: the newest).
func DecodeContinue(prefix, token string) (startKey string, rev uint64, err error) {
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return "", 0, fmt.Errorf("%w: %v", ErrInvalidContinue, err)
	}
	var t continueToken
	if err := json.Unmarshal(b, &t); err != nil {
		return "", 0, fmt.Errorf("%w: %v", ErrInvalidContinue, err)
	}
	switch {
	case t.APIVersion != continueTokenVersion:
		return "", 0, fmt.Errorf("%w: unknown version %q", ErrInvalidContinue, t.APIVersion)
	case t.Revision == 0 || t.Revision < newestRevision:
		return "", 0, fmt.Errorf("%w: no revision", ErrInvalidContinue)
	case t.StartKey == "":
		return "", 0, fmt.Errorf("%w: no start key", ErrInvalidContinue)
	}
	startKey = prefix + t.StartKey
	// The start key must stay inside the prefix: no traversal, no other
	// prefix's keys. One trailing NUL is allowed: "the key right after k" is
	// k+"\x00", as Kubernetes writes it.
	if err := validatePath(strings.TrimSuffix(startKey, "\x00")); err != nil || strings.HasPrefix(t.StartKey, "/") {
		return "", 0, fmt.Errorf("%w: start key %q escapes %q", ErrInvalidContinue, t.StartKey, prefix)
	}
	if t.Revision == newestRevision {
		return startKey, 0, nil
	}
	return startKey, uint64(t.Revision), nil
}
