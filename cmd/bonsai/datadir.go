package main

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"bonsai.dev/bonsai/apiserver/encryption"
)

// tightenDataDir makes the data dir 0700 and every secret in it 0600 (the
// keys under tls/, the admin kubeconfig), at every start: a mode loosened
// by hand, a restore from a backup or an older bonsai is fixed, and said.
// What it cannot fix stops the start, as a key readable by others is.
func tightenDataDir(dir string, log *slog.Logger) error {
	fix := func(path string, want fs.FileMode) error {
		st, err := os.Lstat(path)
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if st.Mode()&fs.ModeSymlink != 0 {
			return nil
		}
		if got := st.Mode().Perm(); got&^want != 0 {
			if err := os.Chmod(path, got&want); err != nil {
				return fmt.Errorf("%s is mode %04o and cannot be made %04o: %w", path, got, got&want, err)
			}
			log.Warn("tightened the mode of a data dir file", "path", path, "was", fmt.Sprintf("%04o", got), "now", fmt.Sprintf("%04o", got&want))
		}
		return nil
	}
	if err := fix(dir, 0o700); err != nil {
		return err
	}
	if err := fix(filepath.Join(dir, "tls"), 0o700); err != nil {
		return err
	}
	keys, _ := filepath.Glob(filepath.Join(dir, "tls", "*.key"))
	for _, k := range append(keys, filepath.Join(dir, "kubeconfig.yaml"), encryptionConfigPath(dir)) {
		if strings.Contains(filepath.Base(k), ".tmp-") {
			continue
		}
		if err := fix(k, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// encryptionConfigPath is where --secrets-encryption keeps its
// EncryptionConfiguration.
func encryptionConfigPath(dataDir string) string {
	return filepath.Join(dataDir, "encryption-config.yaml")
}

// setupEncryption is the store's encryption configuration: the one
// --encryption-provider-config gave, or with --secrets-encryption the
// data dir's, made with a new key at the first start. Either file holds
// keys: a mode looser than 0600 is fixed, and said; one that cannot be
// fixed stops the start.
func setupEncryption(cfg *serverConfig, log *slog.Logger) (*encryption.Config, error) {
	if cfg.SecretsEncryption {
		path := encryptionConfigPath(cfg.DataDir)
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			data, err := encryption.Default(time.Now())
			if err != nil {
				return nil, fmt.Errorf("--secrets-encryption: %v", err)
			}
			if err := encryption.WriteFile(path, data); err != nil {
				return nil, fmt.Errorf("--secrets-encryption: %v", err)
			}
			log.Info("made the encryption configuration: Secrets are encrypted in the store from now on", "path", path)
		}
		if err := tightenKeyFile("--secrets-encryption", path, log); err != nil {
			return nil, err
		}
		enc, err := encryption.Load(path)
		if err != nil {
			return nil, fmt.Errorf("--secrets-encryption: %s: %v", path, err)
		}
		return enc, nil
	}
	if cfg.Encryption == nil {
		return nil, nil
	}
	if err := tightenKeyFile("--encryption-provider-config", cfg.Encryption.Path, log); err != nil {
		return nil, err
	}
	return cfg.Encryption, nil
}

// tightenKeyFile makes a file of keys (through a symlink, the file it
// names) readable by its owner only.
func tightenKeyFile(flag, path string, log *slog.Logger) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s %s: %v", flag, path, pathErrReason(err))
	}
	if got := st.Mode().Perm(); got&^0o600 != 0 {
		if err := os.Chmod(path, got&0o600); err != nil {
			return fmt.Errorf("%s %s: mode %04o lets others read its keys and cannot be made %04o: %v", flag, path, got, got&0o600, pathErrReason(err))
		}
		log.Warn("tightened the mode of a key file", "path", path, "was", fmt.Sprintf("%04o", got), "now", fmt.Sprintf("%04o", got&0o600))
	}
	return nil
}
