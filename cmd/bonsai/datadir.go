package main

import (
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
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
	for _, k := range append(keys, filepath.Join(dir, "kubeconfig.yaml")) {
		if strings.Contains(filepath.Base(k), ".tmp-") {
			continue
		}
		if err := fix(k, 0o600); err != nil {
			return err
		}
	}
	return nil
}
