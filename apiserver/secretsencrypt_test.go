package apiserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io/fs"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"bonsai.dev/bonsai/apiserver/encryption"
	"bonsai.dev/bonsai/store"
	"bonsai.dev/bonsai/testsupport/testenv"
)

// encKey returns a random base64 key of n bytes.
func encKey(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// encConfig is an EncryptionConfiguration of resources with one
// provider's keys (name, secret pairs) and identity after them.
func encConfig(resources, provider string, keys ...string) string {
	doc := "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [" + resources + "]\n  providers:\n  - " + provider + ":\n      keys:\n"
	for i := 0; i < len(keys); i += 2 {
		doc += "      - {name: " + keys[i] + ", secret: " + keys[i+1] + "}\n"
	}
	return doc + "  - identity: {}\n"
}

func parseEnc(t *testing.T, doc string) *encryption.Config {
	t.Helper()
	c, err := encryption.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func loadEnc(t *testing.T, doc string) *encryption.Config {
	t.Helper()
	p := filepath.Join(t.TempDir(), "encryption.yaml")
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := encryption.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// randomBytes are n random bytes: unlike text, nothing else in a store
// shares even a few bytes with them, so no compressor (badger's tables
// are snappy-compressed) can take them apart with back-references, and
// any 12 of them in a row found in a file are theirs.
func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// pieces are needles for v: every 12 bytes of it, and its base64 (how
// JSON would carry it).
func pieces(v []byte) [][]byte {
	var out [][]byte
	for i := 0; i+12 <= len(v); i += 12 {
		out = append(out, v[i:i+12])
	}
	return append(out, []byte(base64.StdEncoding.EncodeToString(v)))
}

// filesHolding lists the files under dir whose bytes hold any of needles.
func filesHolding(t *testing.T, dir string, needles ...[]byte) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, n := range needles {
			if bytes.Contains(data, n) {
				found = append(found, path)
				break
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// TestEncryptionAtRest: a Secret created through the API is nowhere in
// plaintext in what the store keeps (every badger file under its
// directory, value log and tables included; every etcd key read with the
// etcd client, and etcd's own files), while the API returns it from get,
// list and watch. A ConfigMap, not encrypted, is found in the same
// scans: they see plaintext where there is some.
func TestEncryptionAtRest(t *testing.T) {
	for _, backend := range []string{"badger", "etcd"} {
		t.Run(backend, func(t *testing.T) {
			var st store.Store
			var err error
			var dir string
			var etcd *testenv.Etcd
			switch backend {
			case "badger":
				dir = t.TempDir()
				st, err = store.OpenBadger(store.BadgerOptions{Dir: dir})
			case "etcd":
				etcd = testenv.EtcdForTest(t)
				dir = etcd.DataDir
				st, err = store.OpenEtcd(store.EtcdOptions{Endpoint: etcd.Endpoint, DialTimeout: 30 * time.Second})
			}
			if err != nil {
				t.Fatal(err)
			}
			s, cs := newServerOn(t, st, Config{Encryption: parseEnc(t, encConfig("secrets", "aescbc", "key1", encKey(t, 32)))})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			// Small values stay in badger's tables; values over its value
			// threshold (512 bytes) go to its value log.
			secretValue, controlValue := randomBytes(t, 48), randomBytes(t, 48)
			bigSecret, bigControl := randomBytes(t, 4096), randomBytes(t, 4096)

			w, err := cs.CoreV1().Secrets("default").Watch(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			if _, err := cs.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"},
				Data: map[string][]byte{"password": secretValue}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := cs.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "blob"},
				Data: map[string][]byte{"cert": bigSecret}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			for name, v := range map[string][]byte{"control": controlValue, "big-control": bigControl} {
				control := cm(name, nil)
				control.BinaryData = map[string][]byte{"v": v}
				if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, control, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if got, err := cs.CoreV1().Secrets("default").Get(ctx, "db", metav1.GetOptions{}); err != nil || !bytes.Equal(got.Data["password"], secretValue) {
				t.Errorf("get: %v %v", got, err)
			}
			if l, err := cs.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 2 || !bytes.Equal(l.Items[0].Data["cert"], bigSecret) || !bytes.Equal(l.Items[1].Data["password"], secretValue) {
				t.Errorf("list: %v %v", l, err)
			}
			select {
			case ev := <-w.ResultChan():
				if sec, ok := ev.Object.(*corev1.Secret); !ok || !bytes.Equal(sec.Data["password"], secretValue) {
					t.Errorf("watch event: %v %#v", ev.Type, ev.Object)
				}
			case <-ctx.Done():
				t.Fatal("no watch event")
			}
			kv, err := st.Get(ctx, "/registry/core/secrets/default/db")
			if err != nil || !bytes.HasPrefix(kv.Value, []byte("k8s:enc:aescbc:v1:key1:")) {
				t.Errorf("the stored Secret starts %q (%v)", kv.Value[:min(len(kv.Value), 30)], err)
			}

			secretNeedles := append(pieces(secretValue), pieces(bigSecret)...)
			if backend == "etcd" {
				cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.Endpoint}, DialTimeout: 10 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				defer cli.Close()
				resp, err := cli.Get(ctx, "", clientv3.WithFromKey())
				if err != nil {
					t.Fatal(err)
				}
				control, secret := false, false
				for _, kv := range resp.Kvs {
					for _, n := range secretNeedles {
						if bytes.Contains(kv.Value, n) || bytes.Contains(kv.Key, n) {
							t.Errorf("etcd key %s holds a Secret's value in plaintext", kv.Key)
							break
						}
					}
					control = control || bytes.Contains(kv.Value, controlValue)
					if strings.HasSuffix(string(kv.Key), "/secrets/default/db") {
						secret = bytes.HasPrefix(kv.Value, []byte("k8s:enc:aescbc:v1:key1:"))
					}
				}
				if !control || !secret || len(resp.Kvs) < 10 {
					t.Errorf("etcd's %d keys: control ConfigMap in plaintext %v, the Secret encrypted %v", len(resp.Kvs), control, secret)
				}
			}
			// The files, with the store closed (badger's memtables are
			// then in its tables too) and open (they are in its log).
			for _, when := range []string{"open", "closed"} {
				if when == "closed" {
					s.Shutdown()
					st.Close()
					if etcd != nil {
						etcd.Stop()
					}
				}
				if found := filesHolding(t, dir, secretNeedles...); len(found) > 0 {
					t.Errorf("store %s: a Secret's value is in plaintext in %v", when, found)
				}
				for _, v := range [][]byte{controlValue, bigControl} {
					if found := filesHolding(t, dir, v); len(found) == 0 {
						t.Errorf("store %s: the value of a control ConfigMap (%d bytes) is in no file under %s: the scan sees nothing", when, len(v), dir)
					}
				}
			}
		})
	}
}

// serverOver is another server over st, which stays open when it stops.
func serverOver(t *testing.T, st store.Store, cfg Config) (*Server, *kubernetes.Clientset) {
	t.Helper()
	cfg.Store, cfg.AdvertiseAddress, cfg.SecurePort = st, netip.MustParseAddr("127.0.0.1"), 6443
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s, kubernetes.NewForConfigOrDie(s.ClientConfig(adminUser()))
}

// encryptionCall sends one request to the secrets-encrypt paths as u and
// decodes the status it answers.
func encryptionCall(t *testing.T, s *Server, tokenOrEmpty, method, path string) (int, *encryption.Status, string) {
	t.Helper()
	rr := serveAs(s, method, path, tokenOrEmpty, "", nil)
	if rr.Code != http.StatusOK {
		var st metav1.Status
		json.Unmarshal(rr.Body.Bytes(), &st)
		return rr.Code, nil, st.Message
	}
	var st encryption.Status
	if err := json.Unmarshal(rr.Body.Bytes(), &st); err != nil {
		t.Fatalf("%s %s: %v: %s", method, path, err, rr.Body)
	}
	return rr.Code, &st, ""
}

// TestRotationThroughTheServer: Secrets stored in plaintext and with the
// first key are all rewritten with the new key a rotation puts first in
// the file, through the running server; status says so; a server whose
// file no longer has the old key reads them all; only system:masters may
// rotate or read the status.
func TestRotationThroughTheServer(t *testing.T) {
	key1 := encKey(t, 32)
	cfg := loadEnc(t, encConfig("secrets", "aescbc", "key1", key1))
	s, st := newAuthServerWith(t, "admin-token,admin,1,system:masters\nbob-token,bob,2\n", Config{AuthorizationMode: AuthorizationAlwaysAllow, Encryption: cfg})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := e2eClient(t, s, adminUser())
	// Two Secrets from before encryption, written raw as the server
	// stores them.
	for _, name := range []string{"old-0", "old-1"} {
		sec := &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("u-" + name), CreationTimestamp: storedNow()},
			Data: map[string][]byte{"k": []byte("plain " + name)}}
		data, err := encodeForStore(s.reg.byGVR[gvr("", "v1", "secrets")], sec)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Create(ctx, "/registry/core/secrets/default/"+name, data); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		if _, err := admin.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "new-" + string(rune('0'+i))},
			Data: map[string][]byte{"k": []byte("value")}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	code, status, msg := encryptionCall(t, s, "admin-token", http.MethodGet, encryptionStatusPath)
	if code != http.StatusOK || len(status.Resources) != 1 {
		t.Fatalf("status: %d %s %+v", code, msg, status)
	}
	if r := status.Resources[0]; r.Resource != "secrets" || r.WriteKey != "aescbc:key1" || r.Total != 5 || r.Current != 3 || r.Stored["identity"] != 2 || status.AllCurrent() {
		t.Errorf("status before: %+v", status)
	}
	for _, path := range []string{encryptionRotatePath, encryptionReencryptPath} {
		if code, _, msg := encryptionCall(t, s, "bob-token", http.MethodPost, path); code != http.StatusForbidden || !strings.Contains(msg, "only members of system:masters") {
			t.Errorf("bob %s: %d %q", path, code, msg)
		}
	}
	if code, _, _ := encryptionCall(t, s, "bob-token", http.MethodGet, encryptionStatusPath); code != http.StatusForbidden {
		t.Errorf("bob reads the status: %d", code)
	}
	if code, _, _ := encryptionCall(t, s, "", http.MethodGet, encryptionStatusPath); code != http.StatusUnauthorized {
		t.Errorf("anonymous reads the status: %d", code)
	}

	code, status, msg = encryptionCall(t, s, "admin-token", http.MethodPost, encryptionRotatePath)
	if code != http.StatusOK {
		t.Fatalf("rotate: %d %s", code, msg)
	}
	if len(status.Added) != 1 || status.Rewritten != 5 || !status.AllCurrent() || status.Resources[0].WriteKey != status.Added[0] {
		t.Errorf("rotate answered %+v", status)
	}
	added := strings.TrimPrefix(status.Added[0], "aescbc:")
	newPrefix := []byte("k8s:enc:aescbc:v1:" + added + ":")
	l, err := st.List(ctx, "/registry/core/secrets/", store.ListOptions{})
	if err != nil || len(l.Items) != 5 {
		t.Fatalf("stored Secrets: %d %v", len(l.Items), err)
	}
	for _, kv := range l.Items {
		if !bytes.HasPrefix(kv.Value, newPrefix) {
			t.Errorf("%s stored as %q, want prefix %q", kv.Key, kv.Value[:30], newPrefix)
		}
	}
	// Reading them back through the server takes the new key.
	if got, err := admin.CoreV1().Secrets("default").Get(ctx, "old-1", metav1.GetOptions{}); err != nil || string(got.Data["k"]) != "plain old-1" {
		t.Errorf("old-1 after rotation: %v %v", got, err)
	}
	code, status, _ = encryptionCall(t, s, "admin-token", http.MethodPost, encryptionReencryptPath)
	if code != http.StatusOK || status.Rewritten != 0 || !status.AllCurrent() {
		t.Errorf("reencrypt after a rotation: %d %+v", code, status)
	}

	// The file now has the new key first; without the old one, every
	// Secret still reads.
	data, err := os.ReadFile(cfg.Path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Index(string(data), added) > strings.Index(string(data), "key1") {
		t.Errorf("the new key is not first in the file:\n%s", data)
	}
	withoutOld := removeKeyLines(string(data), "key1")
	if strings.Contains(withoutOld, key1) {
		t.Fatalf("the old key is still in\n%s", withoutOld)
	}
	_, freshCS := serverOver(t, st, Config{Encryption: parseEnc(t, withoutOld)})
	list, err := freshCS.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 5 {
		t.Fatalf("a server without the old key lists %d Secrets: %v", len(list.Items), err)
	}
}

// removeKeyLines drops the key named name (its name and secret lines)
// from a rotated file.
func removeKeyLines(doc, name string) string {
	lines := strings.Split(doc, "\n")
	var out []string
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) == "- name: "+name {
			i++ // its secret
			continue
		}
		out = append(out, lines[i])
	}
	return strings.Join(out, "\n") + "\n"
}

// TestUnchangedUpdateRewritesAStaleValue: as in kube-apiserver, an
// update that changes nothing still writes an object whose stored value
// is not written with the write key (how `kubectl replace` of every
// Secret re-encrypts them), and is a no-op once it is.
func TestUnchangedUpdateRewritesAStaleValue(t *testing.T) {
	st, err := store.OpenBadger(store.BadgerOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	key1, key2 := encKey(t, 32), encKey(t, 32)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	first, cs := newServerOn(t, st, Config{Encryption: parseEnc(t, encConfig("secrets", "aesgcm", "key1", key1))})
	created, err := cs.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Data: map[string][]byte{"k": []byte("v")}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first.Shutdown()
	_, cs = serverOver(t, st, Config{Encryption: parseEnc(t, encConfig("secrets", "aesgcm", "key2", key2, "key1", key1))})
	const key = "/registry/core/secrets/default/s"
	replaced, err := cs.CoreV1().Secrets("default").Update(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if replaced.ResourceVersion == created.ResourceVersion {
		t.Error("an unchanged update of a value written with the old key was a no-op")
	}
	if kv, _ := st.Get(ctx, key); !bytes.HasPrefix(kv.Value, []byte("k8s:enc:aesgcm:v1:key2:")) {
		t.Errorf("stored as %q after the update", kv.Value[:24])
	}
	again, err := cs.CoreV1().Secrets("default").Update(ctx, replaced, metav1.UpdateOptions{})
	if err != nil || again.ResourceVersion != replaced.ResourceVersion {
		t.Errorf("an unchanged update of a current value: %v, resourceVersion %s -> %s", err, replaced.ResourceVersion, again.ResourceVersion)
	}
}

// TestUndecryptableValues: a Secret no configured key reads is an
// internal error naming its key, on get and list, never the ciphertext
// or garbage; so is one read by a server with no encryption at all.
func TestUndecryptableValues(t *testing.T) {
	st, err := store.OpenBadger(store.BadgerOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	writer, cs := newServerOn(t, st, Config{Encryption: parseEnc(t, encConfig("secrets", "aesgcm", "key1", encKey(t, 32)))})
	if _, err := cs.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Data: map[string][]byte{"k": []byte("the-value")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	writer.Shutdown()
	for name, cfg := range map[string]*encryption.Config{
		"another secret for key1": parseEnc(t, encConfig("secrets", "aesgcm", "key1", encKey(t, 32))),
		"no encryption":           nil,
	} {
		t.Run(name, func(t *testing.T) {
			_, cs := serverOver(t, st, Config{Encryption: cfg})
			for what, call := range map[string]func(kubernetes.Interface) error{
				"get": func(cs kubernetes.Interface) error {
					_, err := cs.CoreV1().Secrets("default").Get(ctx, "s", metav1.GetOptions{})
					return err
				},
				"list": func(cs kubernetes.Interface) error {
					_, err := cs.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{})
					return err
				},
			} {
				err := call(cs)
				if !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), `unable to transform key "/registry/core/secrets/default/s"`) || strings.Contains(err.Error(), "the-value") {
					t.Errorf("%s: %v", what, err)
				}
			}
		})
	}
}

// TestEncryptedWritesShareTheWritersObject: watchers of an encrypted
// resource get the writer's object, as they do unencrypted: the store's
// event carries the encrypted slice, which the encryption layer hands
// back as the writer's plaintext; nothing is decoded again.
func TestEncryptedWritesShareTheWritersObject(t *testing.T) {
	st, err := store.OpenBadger(store.BadgerOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	s, cs := newServerOn(t, st, Config{Encryption: parseEnc(t, encConfig("configmaps", "secretbox", "k", encKey(t, 32)))})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := cs.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	before := s.events.decoded.Load()
	const n = 20
	for i := 0; i < n; i++ {
		if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm("c"+string(rune('a'+i)), map[string]string{"k": "v"}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		select {
		case ev := <-w.ResultChan():
			if c, ok := ev.Object.(*corev1.ConfigMap); !ok || c.Data["k"] != "v" {
				t.Fatalf("event %v %#v", ev.Type, ev.Object)
			}
		case <-ctx.Done():
			t.Fatal("events missing")
		}
	}
	if d := s.events.decoded.Load() - before; d != 0 {
		t.Errorf("%d of %d encrypted writes were decoded again for their watcher", d, n)
	}
}
