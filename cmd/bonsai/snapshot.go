package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation"
	utilversion "k8s.io/apimachinery/pkg/util/version"

	"bonsai.dev/bonsai/apiserver"
	"bonsai.dev/bonsai/store"
)

// Snapshots are k3s's `etcd-snapshot` for the embedded store: files
// named <name>-<node>-<unix time> in <data-dir>/snapshots, taken on
// demand (`bonsai snapshot save`, name on-demand), on a schedule (the
// server's --snapshot-schedule, name scheduled) and before a newer bonsai
// first uses the data dir (name pre-upgrade). A snapshot is the
// datastore only: the data dir's CA, keys and encryption configuration
// are not in it, as k3s's token and certificates are not in its etcd
// snapshots. With an etcd datastore the same commands write etcd's own
// snapshots (its snapshot API, through the running server), which etcd's
// tools restore.

const (
	defaultSnapshotRetention = 5
	// defaultSnapshotSchedule is k3s's --etcd-snapshot-schedule-cron.
	defaultSnapshotSchedule = "0 */12 * * *"
	snapshotNameOnDemand    = "on-demand"
	snapshotNameScheduled   = "scheduled"
	snapshotNamePreUpgrade  = "pre-upgrade"
)

// snapshotDirOf is where a data dir's snapshots go unless told.
func snapshotDirOf(dataDir string) string { return filepath.Join(dataDir, "snapshots") }

// snapshotFileName is <name>-<node>-<unix time>, as k3s names them.
func snapshotFileName(name, node string, at time.Time) string {
	return fmt.Sprintf("%s-%s-%d", name, node, at.Unix())
}

// snapshotOptions are the flags of `bonsai snapshot`.
type snapshotOptions struct {
	dataDir, kubeconfig, dir, name, nodeName string
	retention                                int
	overwrite                                bool
}

func (o *snapshotOptions) snapshotDir() string {
	if o.dir != "" {
		return o.dir
	}
	return snapshotDirOf(o.dataDir)
}

func newSnapshotCmd(stdout io.Writer) *cobra.Command {
	o := &snapshotOptions{}
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Save, restore, list and prune snapshots of the datastore",
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&o.dataDir, "data-dir", "/var/lib/bonsai", "bonsai's data directory")
	pf.StringVar(&o.dir, "snapshot-dir", "", "directory of the snapshots (default <data-dir>/snapshots)")
	save := &cobra.Command{
		Use:   "save [FILE]",
		Short: "Take a snapshot of the datastore at one revision, from the running server or, when none runs, from the data dir",
		Long: "Writes FILE, or <snapshot-dir>/<name>-<node>-<unix time>. With a server running on the data dir the snapshot comes from it " +
			"(as a member of system:masters, with the admin kubeconfig); otherwise the store in <data-dir>/db is read directly. " +
			"With an etcd datastore (--datastore-endpoint) the server takes etcd's own snapshot, through etcd's snapshot API; etcdutl snapshot restore reads it.",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := ""
			if len(args) == 1 {
				path = args[0]
			}
			return o.save(cmd.Context(), stdout, path)
		},
	}
	save.Flags().StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of a member of system:masters, to reach a running server (default <data-dir>/kubeconfig.yaml)")
	save.Flags().StringVar(&o.name, "name", snapshotNameOnDemand, "first part of the snapshot's file name")
	save.Flags().StringVar(&o.nodeName, "node-name", "", "node part of the snapshot's file name (default the host name)")
	restore := &cobra.Command{
		Use:   "restore FILE",
		Short: "Make the data dir's store from a snapshot; the server must not be running",
		Long: "Writes <data-dir>/db from FILE, keeping every object's resourceVersion. The data dir may be new, on this host or another; " +
			"its certificates are made at the server's first start. A data dir whose store is in use is refused; one that holds a store is refused unless --overwrite, which moves that store aside to db.old-<unix time>.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.restore(stdout, args[0])
		},
	}
	restore.Flags().BoolVar(&o.overwrite, "overwrite", false, "move a store already in the data dir aside (to <data-dir>/db.old-<unix time>) instead of refusing")
	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the snapshots in the snapshot dir",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			snaps, err := listSnapshots(o.snapshotDir())
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "Name\tLocation\tSize\tBackend\tRevision\tCreated")
			for _, s := range snaps {
				rev := "-"
				if s.hdr.Revision > 0 {
					rev = fmt.Sprint(s.hdr.Revision)
				}
				fmt.Fprintf(tw, "%s\tfile://%s\t%d\t%s\t%s\t%s\n", s.name, s.path, s.size, s.hdr.Backend, rev, s.hdr.Created.Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
	prune := &cobra.Command{
		Use:   "prune",
		Short: "Delete the oldest snapshots named --name beyond --snapshot-retention",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.retention < 1 {
				return fmt.Errorf("--snapshot-retention %d: must be at least 1", o.retention)
			}
			removed, err := pruneSnapshots(o.snapshotDir(), o.name, o.retention)
			for _, p := range removed {
				fmt.Fprintf(stdout, "Removed %s\n", p)
			}
			return err
		},
	}
	prune.Flags().StringVar(&o.name, "name", snapshotNameOnDemand, "prune the snapshots whose file name starts with <name>-")
	prune.Flags().IntVar(&o.retention, "snapshot-retention", defaultSnapshotRetention, "how many of the newest snapshots to keep")
	del := &cobra.Command{
		Use:   "delete NAME...",
		Short: "Delete snapshots of the snapshot dir by name",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			snaps, err := listSnapshots(o.snapshotDir())
			if err != nil {
				return err
			}
			// Every name is checked before anything goes.
			var paths []string
			for _, name := range args {
				i := slices.IndexFunc(snaps, func(s snapshotFile) bool { return s.name == name })
				if i < 0 {
					return fmt.Errorf("no snapshot %q in %s", name, o.snapshotDir())
				}
				paths = append(paths, snaps[i].path)
			}
			for _, p := range paths {
				if err := os.Remove(p); err != nil {
					return err
				}
				fmt.Fprintf(stdout, "Removed %s\n", p)
			}
			return nil
		},
	}
	cmd.AddCommand(save, restore, ls, prune, del)
	return cmd
}

// save writes a snapshot to path (default: a new name in the snapshot
// dir), from the running server if the data dir is locked by one.
func (o *snapshotOptions) save(ctx context.Context, stdout io.Writer, path string) error {
	node := o.nodeName
	if path == "" {
		if node == "" {
			h, err := os.Hostname()
			if err != nil {
				return fmt.Errorf("--node-name: not given and the host name is unknown: %v", err)
			}
			node = strings.ToLower(h)
		}
		for _, f := range []struct{ flag, v string }{{"--name", o.name}, {"--node-name", node}} {
			if errs := validation.IsDNS1123Subdomain(f.v); len(errs) > 0 {
				return fmt.Errorf("%s %q: %s", f.flag, f.v, strings.Join(errs, "; "))
			}
		}
	} else if err := checkNewFile(path); err != nil {
		return err
	}
	// Whether a server runs decides where the snapshot comes from; the
	// lock, held to the end, keeps one from starting meanwhile.
	lock, err := tryLockDir(o.dataDir)
	fromServer := errors.Is(err, errDirBusy)
	if err != nil && !fromServer {
		return err
	}
	db := filepath.Join(o.dataDir, "db")
	if lock != nil {
		defer lock.Close()
		if _, err := os.Stat(filepath.Join(db, "MANIFEST")); err != nil {
			return fmt.Errorf("no server runs on %s and it holds no store (%s); nothing to snapshot", o.dataDir, db)
		}
	}
	if path == "" {
		if err := os.MkdirAll(o.snapshotDir(), 0o700); err != nil {
			return fmt.Errorf("--snapshot-dir %s: %v", o.snapshotDir(), pathErrReason(err))
		}
		path = filepath.Join(o.snapshotDir(), snapshotFileName(o.name, node, time.Now()))
		if err := checkNewFile(path); err != nil {
			return err
		}
	}
	start := time.Now()
	var info store.SnapshotInfo
	if fromServer {
		info, err = o.saveFromServer(ctx, path)
	} else {
		info, err = saveFromStore(ctx, db, path)
	}
	if err != nil {
		return fmt.Errorf("snapshot save: %v", err)
	}
	took := time.Since(start).Round(time.Millisecond)
	if info.Backend == "etcd" {
		fmt.Fprintf(stdout, "Saved etcd snapshot %s: %d bytes, in %s; etcdutl snapshot restore reads it\n", path, info.Bytes, took)
		return nil
	}
	fmt.Fprintf(stdout, "Saved snapshot %s: revision %d, %d keys, %d bytes, in %s\n", path, info.Revision, info.Keys, info.Bytes, took)
	return nil
}

// checkNewFile refuses a snapshot path that exists or whose directory
// does not.
func checkNewFile(path string) error {
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("%s exists; refusing to overwrite it", path)
	}
	if st, err := os.Stat(filepath.Dir(path)); err != nil || !st.IsDir() {
		return fmt.Errorf("%s: directory %s does not exist", path, filepath.Dir(path))
	}
	return nil
}

var errDirBusy = errors.New("in use")

// tryLockDir takes the data dir's lock (see lockDataDir) without
// creating anything: errDirBusy if a server holds it, an error if the
// data dir is missing.
func tryLockDir(dir string) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("data dir %s: %v", dir, pathErrReason(err))
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errDirBusy
		}
		return nil, fmt.Errorf("data dir %s: lock: %v", dir, err)
	}
	return f, nil
}

// saveFromStore snapshots the store in db, which no server uses.
func saveFromStore(ctx context.Context, db, path string) (store.SnapshotInfo, error) {
	st, err := store.OpenBadger(store.BadgerOptions{Dir: db, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return store.SnapshotInfo{}, err
	}
	defer st.Close()
	return writeSnapshot(ctx, st.(store.Snapshotter), path)
}

// writeSnapshot writes sn's snapshot to path, durably.
func writeSnapshot(ctx context.Context, sn store.Snapshotter, path string) (store.SnapshotInfo, error) {
	var info store.SnapshotInfo
	err := store.WriteFileDurably(path, 0o600, func(w io.Writer) error {
		var err error
		info, err = sn.Snapshot(ctx, w, version)
		return err
	})
	return info, err
}

// saveFromServer streams the running server's snapshot into path,
// checking it on the way: a truncated or corrupt stream leaves no file.
func (o *snapshotOptions) saveFromServer(ctx context.Context, path string) (store.SnapshotInfo, error) {
	resp, err := adminRequest(ctx, o.dataDir, o.kubeconfig, http.MethodGet, "/bonsai/snapshot")
	if err != nil {
		return store.SnapshotInfo{}, err
	}
	defer resp.Body.Close()
	var info store.SnapshotInfo
	err = store.WriteFileDurably(path, 0o600, func(w io.Writer) error {
		var err error
		if resp.Header.Get(apiserver.SnapshotBackendHeader) == "etcd" {
			info.Backend = "etcd"
			info.Bytes, err = store.CheckEtcdSnapshot(resp.Body, w)
			return err
		}
		info, err = store.CheckSnapshot(io.TeeReader(resp.Body, w))
		return err
	})
	return info, err
}

// restore makes <data-dir>/db from the snapshot at path, holding the data
// dir's lock so that no server starts on it meanwhile.
func (o *snapshotOptions) restore(stdout io.Writer, path string) error {
	start := time.Now()
	if store.IsEtcdSnapshot(path) {
		return fmt.Errorf("snapshot restore %s: an etcd snapshot; restore it with etcdutl snapshot restore into a new etcd data dir and start bonsai with --datastore-endpoint on that etcd", path)
	}
	hdr, err := store.ReadSnapshotHeader(path)
	if err != nil {
		return fmt.Errorf("snapshot restore %s: %v", path, pathErrReason(err))
	}
	if hdr.Backend != "badger" {
		return fmt.Errorf("snapshot restore %s: a snapshot of a %s datastore; bonsai restores its embedded store only", path, hdr.Backend)
	}
	// The whole file is checked before anything is made or moved: a
	// bad file changes nothing.
	if _, err := store.VerifySnapshot(path); err != nil {
		return fmt.Errorf("snapshot restore %s: %v", path, err)
	}
	if err := os.MkdirAll(o.dataDir, 0o700); err != nil {
		return fmt.Errorf("data dir %s cannot be created: %v", o.dataDir, pathErrReason(err))
	}
	lock, err := tryLockDir(o.dataDir)
	if errors.Is(err, errDirBusy) {
		return fmt.Errorf("data dir %s is in use by a running bonsai; stop it before restoring", o.dataDir)
	}
	if err != nil {
		return err
	}
	defer lock.Close()
	db := filepath.Join(o.dataDir, "db")
	aside := ""
	if entries, err := os.ReadDir(db); err == nil && len(entries) > 0 {
		if !o.overwrite {
			return fmt.Errorf("data dir %s already holds a store (%s); restore into a new --data-dir, or give --overwrite to move it aside", o.dataDir, db)
		}
		aside = fmt.Sprintf("%s.old-%d", db, time.Now().Unix())
		if err := os.Rename(db, aside); err != nil {
			return err
		}
	}
	info, err := store.RestoreBadger(db, path, nil)
	if err != nil {
		if aside != "" {
			os.RemoveAll(db)
			os.Rename(aside, db)
		}
		return fmt.Errorf("snapshot restore %s: %v", path, err)
	}
	if aside != "" {
		fmt.Fprintf(stdout, "Moved the store that was in the data dir to %s\n", aside)
	}
	fmt.Fprintf(stdout, "Restored %s into %s: revision %d, %d keys, in %s\n", path, db, info.Revision, info.Keys, time.Since(start).Round(time.Millisecond))
	return nil
}

// snapshotFile is a snapshot found in a snapshot dir.
type snapshotFile struct {
	name, path string
	size       int64
	hdr        store.SnapshotHeader
}

// listSnapshots lists the snapshots of dir, newest first; files that are
// not snapshots are left out. A missing dir has none.
func listSnapshots(dir string) ([]snapshotFile, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("--snapshot-dir %s: %v", dir, pathErrReason(err))
	}
	var snaps []snapshotFile
	for _, e := range entries {
		if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		fi, err := e.Info()
		if err != nil {
			continue
		}
		hdr, err := store.ReadSnapshotHeader(path)
		if err != nil {
			if !store.IsEtcdSnapshot(path) {
				continue
			}
			hdr = store.SnapshotHeader{Backend: "etcd", Created: fi.ModTime().UTC()}
		}
		snaps = append(snaps, snapshotFile{name: e.Name(), path: path, size: fi.Size(), hdr: hdr})
	}
	slices.SortFunc(snaps, func(a, b snapshotFile) int {
		if c := b.hdr.Created.Compare(a.hdr.Created); c != 0 {
			return c
		}
		return strings.Compare(b.name, a.name)
	})
	return snaps, nil
}

// pruneSnapshots deletes the snapshots named <name>-... in dir beyond
// the newest keep, as k3s prunes its own, and returns their paths.
func pruneSnapshots(dir, name string, keep int) ([]string, error) {
	snaps, err := listSnapshots(dir)
	if err != nil {
		return nil, err
	}
	var removed []string
	kept := 0
	for _, s := range snaps {
		if !strings.HasPrefix(s.name, name+"-") {
			continue
		}
		if kept < keep {
			kept++
			continue
		}
		if err := os.Remove(s.path); err != nil {
			return removed, err
		}
		removed = append(removed, s.path)
	}
	return removed, nil
}

// takeSnapshot writes a snapshot named <name>-<node>-<unix time> into
// dir and returns its path.
func takeSnapshot(ctx context.Context, sn store.Snapshotter, dir, name, node string) (string, store.SnapshotInfo, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", store.SnapshotInfo{}, err
	}
	path := filepath.Join(dir, snapshotFileName(name, node, time.Now()))
	info, err := writeSnapshot(ctx, sn, path)
	return path, info, err
}

// runSnapshotSchedule takes the scheduled snapshots until ctx ends, each
// followed by a prune to the retention, as k3s does after its own. A
// failed snapshot is logged and the next one is still taken.
func runSnapshotSchedule(ctx context.Context, sched cron.Schedule, sn store.Snapshotter, cfg *serverConfig, log *slog.Logger) {
	for {
		t := time.NewTimer(time.Until(sched.Next(time.Now())))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		start := time.Now()
		path, info, err := takeSnapshot(ctx, sn, cfg.SnapshotDir, snapshotNameScheduled, cfg.NodeName)
		if err != nil {
			if ctx.Err() == nil {
				log.Error("scheduled snapshot failed", "dir", cfg.SnapshotDir, "err", err)
			}
			continue
		}
		log.Info("scheduled snapshot taken", "path", path, "revision", info.Revision, "keys", info.Keys, "bytes", info.Bytes, "took", time.Since(start).Round(time.Millisecond))
		removed, err := pruneSnapshots(cfg.SnapshotDir, snapshotNameScheduled, cfg.SnapshotRetention)
		if len(removed) > 0 {
			log.Info("pruned scheduled snapshots", "removed", removed, "retention", cfg.SnapshotRetention)
		}
		if err != nil {
			log.Error("pruning scheduled snapshots failed", "dir", cfg.SnapshotDir, "err", err)
		}
	}
}

// startSnapshots starts the scheduled snapshots of the embedded store;
// the function it returns waits for them to stop (after ctx ends), so
// that the store is not closed under one.
func startSnapshots(ctx context.Context, cfg *serverConfig, st store.Store, log *slog.Logger) func() {
	sn, ok := st.(store.Snapshotter)
	switch {
	case cfg.SnapshotSchedule == nil:
		return func() {}
	case !ok:
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runSnapshotSchedule(ctx, cfg.SnapshotSchedule, sn, cfg, log)
	}()
	return func() { <-done }
}

// versionFile records the version of the bonsai that last used a data
// dir, so that a newer one knows to take a snapshot first.
func versionFile(dataDir string) string { return filepath.Join(dataDir, "bonsai-version") }

// snapshotBeforeUpgrade takes a pre-upgrade snapshot of a store that an
// older bonsai used last (or one from before bonsai recorded its version)
// before anything of this version writes to it, then records this
// version. A development build (a version that is not semantic) takes
// none and records nothing.
func snapshotBeforeUpgrade(ctx context.Context, cfg *serverConfig, st store.Store, hadStore bool, log *slog.Logger) error {
	sn, ok := st.(store.Snapshotter)
	cur, err := utilversion.ParseSemantic(version)
	if !ok || err != nil {
		return nil
	}
	last := ""
	b, err := os.ReadFile(versionFile(cfg.DataDir))
	switch {
	case err == nil:
		last = strings.TrimSpace(string(b))
		if last == version {
			return nil
		}
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("data dir %s: %v", cfg.DataDir, pathErrReason(err))
	case !hadStore:
		last = version // a new store: nothing to keep
	}
	older := last != version
	if prev, err := utilversion.ParseSemantic(last); err == nil {
		older = prev.LessThan(cur)
	}
	if older {
		path, info, err := takeSnapshot(ctx, sn, cfg.SnapshotDir, snapshotNamePreUpgrade, cfg.NodeName)
		if err != nil {
			return fmt.Errorf("snapshot before the data dir is first used by bonsai %s: %v", version, err)
		}
		from := last
		if from == "" {
			from = "a bonsai that did not record its version"
		}
		log.Info("took a snapshot before the first use of the data dir by this version", "from", from, "to", version, "path", path, "revision", info.Revision)
	}
	return store.WriteFileDurably(versionFile(cfg.DataDir), 0o600, func(w io.Writer) error {
		_, err := io.WriteString(w, version+"\n")
		return err
	})
}
