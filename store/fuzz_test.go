package store_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"bonsai.dev/bonsai/store"
)

func FuzzDecodeContinue(f *testing.F) {
	good, _ := store.EncodeContinue("/registry/core/pods/", "/registry/core/pods/ns/p1", 42)
	for _, s := range []string{good, "", "e30", "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MSwic3RhcnQiOiIuLi94In0", "!!!"} {
		f.Add("/registry/core/pods/", s)
	}
	f.Fuzz(func(t *testing.T, prefix, token string) {
		if store.ValidatePrefix(prefix) != nil {
			return
		}
		key, rev, err := store.DecodeContinue(prefix, token)
		if err != nil {
			if !errors.Is(err, store.ErrInvalidContinue) {
				t.Fatalf("error %v is not ErrInvalidContinue", err)
			}
			return
		}
		if !strings.HasPrefix(key, prefix) || len(key) == len(prefix) {
			t.Fatalf("accepted token gives key %q rev %d outside %q", key, rev, prefix)
		}
		if store.ValidateKey(strings.TrimSuffix(key, "\x00")) != nil {
			t.Fatalf("accepted token gives an invalid key %q", key)
		}
		again, err := store.EncodeContinue(prefix, key, rev)
		if err != nil {
			t.Fatalf("re-encode %q: %v", key, err)
		}
		k2, r2, err := store.DecodeContinue(prefix, again)
		if err != nil || k2 != key || r2 != rev {
			t.Fatalf("round trip: %q %d %v, want %q %d", k2, r2, err, key, rev)
		}
	})
}

func FuzzParseObjectKey(f *testing.F) {
	for _, s := range []string{"/registry/core/pods/default/p", "/registry/apps/deployments/ns/d", "/registry/core/nodes/n1", "/registry//x/y", "/registry/a/b/../c", ""} {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, key string, namespaced bool) {
		k, err := store.ParseObjectKey(key, namespaced)
		if err != nil {
			if !errors.Is(err, store.ErrInvalidKey) {
				t.Fatalf("error %v is not ErrInvalidKey", err)
			}
			return
		}
		if k.String() != key {
			t.Fatalf("parse(%q) = %+v, which prints as %q", key, k, k.String())
		}
		if namespaced != (k.Namespace != "") || k.Name == "" || k.Resource == "" {
			t.Fatalf("parse(%q, %v) = %+v", key, namespaced, k)
		}
		if !strings.HasPrefix(key, k.NamespacePrefix()) || store.ValidatePrefix(k.NamespacePrefix()) != nil {
			t.Fatalf("namespace prefix %q does not hold %q", k.NamespacePrefix(), key)
		}
	})
}

func FuzzValidateKey(f *testing.F) {
	for _, s := range []string{"/a", "/a/b", "a", "/a/", "//", "/a/./b", "/\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		err := store.ValidateKey(key)
		if err != nil && !errors.Is(err, store.ErrInvalidKey) {
			t.Fatalf("error %v is not ErrInvalidKey", err)
		}
		if err == nil {
			if !strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/") || strings.Contains(key, "//") || strings.ContainsRune(key, 0) {
				t.Fatalf("accepted %q", key)
			}
			if store.ValidatePrefix(key+"/") != nil {
				t.Fatalf("valid key %q is not a valid prefix with a slash", key)
			}
		}
	})
}

func TestObjectKeys(t *testing.T) {
	for _, tc := range []struct {
		k    store.ObjectKey
		want string
	}{
		{store.ObjectKey{Resource: "pods", Namespace: "default", Name: "web"}, "/registry/core/pods/default/web"},
		{store.ObjectKey{Group: "apps", Resource: "deployments", Namespace: "x", Name: "d"}, "/registry/apps/deployments/x/d"},
		{store.ObjectKey{Resource: "nodes", Name: "n1"}, "/registry/core/nodes/n1"},
	} {
		if got := tc.k.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.k, got, tc.want)
		}
		back, err := store.ParseObjectKey(tc.want, tc.k.Namespace != "")
		if err != nil || back != tc.k {
			t.Errorf("parse %q: %+v %v", tc.want, back, err)
		}
	}
	if _, err := store.ParseObjectKey("/registry/core/pods/default/web", false); err == nil {
		t.Error("a namespaced key parsed as cluster-scoped")
	}
	if _, err := store.ParseObjectKey("/other/core/pods/default/web", true); err == nil {
		t.Error("a key outside /registry/ parsed")
	}
}

// FuzzCheckSnapshot: any file either reads back whole, every byte of it
// accounted for, or is refused as corrupt (or of another format); none
// panics or makes the reader allocate what its lengths claim.
func FuzzCheckSnapshot(f *testing.F) {
	st, err := store.OpenBadger(store.BadgerOptions{Dir: f.TempDir()})
	if err != nil {
		f.Fatal(err)
	}
	for i := range 3 {
		if _, err := st.Create(ctx, "/registry/core/configmaps/ns/c"+strings.Repeat("x", i), []byte(strings.Repeat("v", 600*i))); err != nil {
			f.Fatal(err)
		}
	}
	var good bytes.Buffer
	if _, err := st.(store.Snapshotter).Snapshot(ctx, &good, "fuzz"); err != nil {
		f.Fatal(err)
	}
	st.Close()
	f.Add(good.Bytes())
	f.Add(good.Bytes()[:good.Len()/2])
	f.Add([]byte("bonsai-snapshot/1\n{\"format\":1,\"revision\":5}\nk\xff\xff\xff\xff\xff\xff\xff\xff\x7f"))
	f.Fuzz(func(t *testing.T, data []byte) {
		info, err := store.CheckSnapshot(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, store.ErrCorruptSnapshot) && !strings.Contains(err.Error(), "snapshot format") {
				t.Fatalf("error %v is neither ErrCorruptSnapshot nor a format error", err)
			}
			return
		}
		if info.Bytes != int64(len(data)) || info.Revision == 0 {
			t.Fatalf("accepted %d bytes as %+v", len(data), info)
		}
	})
}
