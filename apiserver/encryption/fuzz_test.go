package encryption

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzParse: any configuration file is refused with a one-line error or
// accepted; an accepted one written back (as a rotation writes it) reads
// the same, and each of its rules encrypts what it says it does.
func FuzzParse(f *testing.F) {
	for _, doc := range []string{
		configYAML("secrets", keyed("aescbc", [2]string{"key1", key32}), identityProvider),
		configYAML("secrets, configmaps", keyed("aesgcm", [2]string{"a", key16}, [2]string{"b", key24})),
		configYAML("'*.apps'", keyed("secretbox", [2]string{"k", key32})),
		configYAML("'*.*'", identityProvider, keyed("aescbc", [2]string{"k", key32})),
		"kind: EncryptionConfig\napiVersion: v1\nresources:\n- resources: [secrets]\n  providers: [{identity: {}}]\n",
		"{}", "",
	} {
		f.Add(doc)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		cfg, err := Parse([]byte(doc))
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error of more than one line: %q", err)
			}
			return
		}
		out, err := Marshal(cfg.file, "fuzz")
		if err != nil {
			t.Fatalf("write back: %v", err)
		}
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("an accepted configuration written back is refused: %v\n%s", err, out)
		}
		if len(again.order) != len(cfg.order) {
			t.Fatalf("%d rules, %d after a round trip", len(cfg.order), len(again.order))
		}
		for i, r := range cfg.order {
			key := "/registry/" + map[bool]string{true: "core", false: r.gr.Group}[r.gr.Group == ""] + "/" + r.gr.Resource + "/ns/x"
			if strings.Contains(key, "*") || strings.Contains(key, "//") {
				continue
			}
			if got := again.order[i]; got.name != r.name || len(got.keys) != len(r.keys) || got.keys[0].label != r.keys[0].label {
				t.Fatalf("rule %d: %+v, after a round trip %+v", i, r, got)
			}
			stored, err := r.write(key, plain)
			if err != nil {
				t.Fatalf("%s: %v", r.name, err)
			}
			if r.encrypts() != IsEncrypted(stored) || !r.current(stored) {
				t.Fatalf("%s: stored %q with write key %s", r.name, stored, r.keys[0].label)
			}
			back, _, err := again.ruleFor(key).read(key, stored)
			if err != nil || !bytes.Equal(back, plain) {
				t.Fatalf("%s: read back %q %v", r.name, back, err)
			}
		}
	})
}

// FuzzRead: whatever a stored value holds, reading it never panics, and
// an encrypted one nothing can decrypt is an error naming its key.
func FuzzRead(f *testing.F) {
	cfg, err := Parse([]byte(configYAML("secrets", keyed("aescbc", [2]string{"c", key32}), keyed("aesgcm", [2]string{"g", key32}), keyed("secretbox", [2]string{"s", key32}), identityProvider)))
	if err != nil {
		f.Fatal(err)
	}
	r := cfg.ruleFor(secretKey)
	for _, v := range [][]byte{plain, []byte("k8s:enc:aescbc:v1:c:"), []byte("k8s:enc:aesgcm:v1:g:0123456789ab"), []byte("k8s:enc:secretbox:v1:s:"), []byte("k8s:enc:"), []byte("{}")} {
		f.Add(v)
	}
	// A value each provider wrote.
	for _, p := range []string{keyed("aescbc", [2]string{"c", key32}), keyed("aesgcm", [2]string{"g", key32}), keyed("secretbox", [2]string{"s", key32})} {
		one, err := Parse([]byte(configYAML("secrets", p)))
		if err != nil {
			f.Fatal(err)
		}
		stored, err := one.ruleFor(secretKey).write(secretKey, plain)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(stored)
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		out, _, err := r.read(secretKey, v)
		if err != nil {
			if !strings.Contains(err.Error(), secretKey) {
				t.Fatalf("error %q does not name the key", err)
			}
			return
		}
		if !IsEncrypted(v) && !bytes.Equal(out, v) {
			t.Fatalf("plaintext %q read as %q", v, out)
		}
		label, _ := r.labelOf(v)
		if label == "" {
			t.Fatal("no label")
		}
	})
}
