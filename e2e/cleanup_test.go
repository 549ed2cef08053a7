package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/nftables"

	"bonsai.dev/bonsai/testsupport/testenv"
)

// TestCleanupFlag checks `bonsai server --cleanup`: the service proxy's
// table, which stays in place while bonsai is stopped, goes; the command
// exits 0 without starting a server or writing a data dir, and says so
// again when there is nothing left to delete.
func TestCleanupFlag(t *testing.T) {
	requireBinary(t)
	testenv.Require(t, os.Geteuid() == 0, "cleanup test needs root (nftables)")
	b := make([]byte, 3)
	rand.Read(b)
	bridge := "bc" + hex.EncodeToString(b)
	table := &nftables.Table{Name: bridge + "-svc", Family: nftables.TableFamilyIPv4}
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	c.AddTable(table)
	if err := c.Flush(); err != nil {
		t.Fatalf("create table %s: %v", table.Name, err)
	}
	t.Cleanup(func() { c.DelTable(table); c.Flush() })
	dataDir := filepath.Join(t.TempDir(), "data")

	for range 2 {
		out, err := exec.Command(bonsaiBin, "server", "--cleanup", "--pod-bridge="+bridge, "--data-dir="+dataDir).CombinedOutput()
		if err != nil {
			t.Fatalf("bonsai server --cleanup: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "deleted the service proxy's nftables table") {
			t.Errorf("output does not say what it deleted:\n%s", out)
		}
		tables, err := c.ListTablesOfFamily(nftables.TableFamilyIPv4)
		if err != nil {
			t.Fatal(err)
		}
		for _, tb := range tables {
			if tb.Name == table.Name {
				t.Fatalf("table ip %s still there after --cleanup", table.Name)
			}
		}
		if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
			t.Errorf("--cleanup touched the data dir %s (stat: %v)", dataDir, err)
		}
	}
}
