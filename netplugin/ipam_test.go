package netplugin

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestAllocatableRange(t *testing.T) {
	tests := []struct {
		prefix      string
		first, last string
		wantErr     string
	}{
		{prefix: "10.42.0.0/24", first: "10.42.0.2", last: "10.42.0.254"},
		{prefix: "10.42.3.0/24", first: "10.42.3.2", last: "10.42.3.254"},
		{prefix: "10.42.0.0/16", first: "10.42.0.2", last: "10.42.255.254"},
		{prefix: "10.42.0.8/29", first: "10.42.0.10", last: "10.42.0.14"},
		{prefix: "10.42.0.77/24", first: "10.42.0.2", last: "10.42.0.254"}, // host bits ignored
		{prefix: "10.42.0.0/30", wantErr: "too small"},
		{prefix: "10.42.0.0/32", wantErr: "too small"},
		{prefix: "fd00::/64", first: "fd00::2", last: "fd00::ffff:ffff:ffff:ffff"},
		{prefix: "fd00:1:2:3::/125", first: "fd00:1:2:3::2", last: "fd00:1:2:3::7"},
		{prefix: "fd00::/126", wantErr: "too small: need at least a /125"},
	}
	for _, tt := range tests {
		t.Run(tt.prefix, func(t *testing.T) {
			first, last, err := allocatableRange(netip.MustParsePrefix(tt.prefix))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if first.String() != tt.first || last.String() != tt.last {
				t.Errorf("range = %s-%s, want %s-%s", first, last, tt.first, tt.last)
			}
		})
	}
}

func openTestIPAM(t *testing.T, dir, prefix string) *ipam {
	t.Helper()
	a, err := openIPAM(dir, netip.MustParsePrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.close() })
	return a
}

func mustAllocate(t *testing.T, a *ipam, id string) netip.Addr {
	t.Helper()
	ip, err := a.allocate(ipamRecord{ID: id})
	if err != nil {
		t.Fatalf("allocate %s: %v", id, err)
	}
	return ip
}

// allocated lists the owner of every allocation, by address.
func allocated(a *ipam) map[string]string {
	out := map[string]string{}
	for ip, rec := range a.allocations() {
		out[ip.String()] = rec.ID
	}
	return out
}

func TestIPAMAllocate(t *testing.T) {
	tests := []struct {
		name   string
		prefix string
		ops    []string // "+id" allocates, "-id" releases
		want   map[string]string
		// wantErr is the error the last op must fail with.
		wantErr string
	}{
		{
			name:   "in order, skipping network and gateway",
			prefix: "10.1.0.0/24",
			ops:    []string{"+a", "+b", "+c"},
			want:   map[string]string{"10.1.0.2": "a", "10.1.0.3": "b", "10.1.0.4": "c"},
		},
		{
			name:   "same pod twice gets the same address",
			prefix: "10.1.0.0/24",
			ops:    []string{"+a", "+a", "+b"},
			want:   map[string]string{"10.1.0.2": "a", "10.1.0.3": "b"},
		},
		{
			name:   "a released address is not reused at once",
			prefix: "10.1.0.0/24",
			ops:    []string{"+a", "+b", "-a", "+c"},
			want:   map[string]string{"10.1.0.3": "b", "10.1.0.4": "c"},
		},
		{
			name:   "wraps around to released addresses, never the broadcast",
			prefix: "10.1.0.8/29", // .10-.14
			ops:    []string{"+a", "+b", "+c", "+d", "+e", "-b", "+f"},
			want:   map[string]string{"10.1.0.10": "a", "10.1.0.11": "f", "10.1.0.12": "c", "10.1.0.13": "d", "10.1.0.14": "e"},
		},
		{
			name:    "exhausted",
			prefix:  "10.1.0.8/29",
			ops:     []string{"+a", "+b", "+c", "+d", "+e", "+f"},
			want:    map[string]string{"10.1.0.10": "a", "10.1.0.11": "b", "10.1.0.12": "c", "10.1.0.13": "d", "10.1.0.14": "e"},
			wantErr: "pod CIDR 10.1.0.8/29 exhausted",
		},
		{
			name:   "IPv6: in order, the last address too",
			prefix: "fd00:9::/125", // ::2-::7
			ops:    []string{"+a", "+b", "+c", "+d", "+e", "+f"},
			want:   map[string]string{"fd00:9::2": "a", "fd00:9::3": "b", "fd00:9::4": "c", "fd00:9::5": "d", "fd00:9::6": "e", "fd00:9::7": "f"},
		},
		{
			name:    "IPv6 exhausted",
			prefix:  "fd00:9::/125",
			ops:     []string{"+a", "+b", "+c", "+d", "+e", "+f", "+g"},
			want:    map[string]string{"fd00:9::2": "a", "fd00:9::3": "b", "fd00:9::4": "c", "fd00:9::5": "d", "fd00:9::6": "e", "fd00:9::7": "f"},
			wantErr: "pod CIDR fd00:9::/125 exhausted: all 6 addresses",
		},
		{
			name:   "releasing an unknown pod is fine",
			prefix: "10.1.0.0/24",
			ops:    []string{"+a", "-nobody", "-a", "-a"},
			want:   map[string]string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := openTestIPAM(t, t.TempDir(), tt.prefix)
			var err error
			for _, op := range tt.ops {
				id := op[1:]
				if op[0] == '+' {
					_, err = a.allocate(ipamRecord{ID: id})
				} else {
					err = a.releaseID(id)
				}
				if err != nil && tt.wantErr == "" {
					t.Fatalf("%s: %v", op, err)
				}
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("last op: err = %v, want it to contain %q", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, allocated(a)); diff != "" {
				t.Errorf("allocations (-want +got):\n%s", diff)
			}
			// What is in memory is what is on disk.
			if diff := cmp.Diff(tt.want, filesIn(t, a.dir)); diff != "" {
				t.Errorf("allocation files (-want +got):\n%s", diff)
			}
		})
	}
}

// filesIn reads the allocation files of an IPAM dir the way a restart
// would, by address.
func filesIn(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, err := netip.ParseAddr(e.Name()); err != nil {
			continue
		}
		var rec ipamRecord
		data, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		if err := json.Unmarshal(data, &rec); err != nil {
			t.Fatalf("allocation file %s: %v", e.Name(), err)
		}
		out[e.Name()] = rec.ID
	}
	return out
}

func TestIPAMPersistsAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	a, err := openIPAM(dir, netip.MustParsePrefix("10.1.0.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	rec := ipamRecord{ID: "a", Namespace: "default", Name: "web", HostPorts: []HostPort{{Protocol: "TCP", HostPort: 80, ContainerPort: 8080}}}
	ipA, err := a.allocate(rec)
	if err != nil {
		t.Fatal(err)
	}
	ipB := mustAllocate(t, a, "b")
	if err := a.close(); err != nil {
		t.Fatal(err)
	}

	a = openTestIPAM(t, dir, "10.1.0.0/24")
	got, gotRec, ok := a.lookup("a")
	if !ok || got != ipA {
		t.Fatalf("after reopen: a = %s %v, want %s", got, ok, ipA)
	}
	if diff := cmp.Diff(rec, gotRec); diff != "" {
		t.Errorf("record after reopen (-want +got):\n%s", diff)
	}
	if got, _, _ := a.lookup("b"); got != ipB {
		t.Errorf("after reopen: b = %s, want %s", got, ipB)
	}
	if ipC := mustAllocate(t, a, "c"); ipC == ipA || ipC == ipB {
		t.Errorf("c got %s, which is in use", ipC)
	}
}

// A crash is a process that stops between any two writes. The state on
// disk at that moment is all a restart has; these cases build it by hand.
func TestIPAMCrashSafety(t *testing.T) {
	tests := []struct {
		name string
		// files to add to a state dir holding a=10.1.0.2, b=10.1.0.3.
		files map[string]string
		want  map[string]string
	}{
		{
			name: "no Teardown: both allocations survive",
			want: map[string]string{"10.1.0.2": "a", "10.1.0.3": "b"},
		},
		{
			name:  "crash before the rename: the temp file is dropped",
			files: map[string]string{ipamTmpPrefix + "10.1.0.4-123": `{"id":"c"}`},
			want:  map[string]string{"10.1.0.2": "a", "10.1.0.3": "b"},
		},
		{
			name:  "unreadable record: address stays reserved, owner unknown",
			files: map[string]string{"10.1.0.4": `{"id":`},
			want:  map[string]string{"10.1.0.2": "a", "10.1.0.3": "b", "10.1.0.4": ""},
		},
		{
			name:  "empty record: address stays reserved, owner unknown",
			files: map[string]string{"10.1.0.5": ``},
			want:  map[string]string{"10.1.0.2": "a", "10.1.0.3": "b", "10.1.0.5": ""},
		},
		{
			name:  "second address for one pod: kept reserved, owner unknown",
			files: map[string]string{"10.1.0.6": `{"id":"b"}`},
			want:  map[string]string{"10.1.0.2": "a", "10.1.0.3": "b", "10.1.0.6": ""},
		},
		{
			name:  "allocation outside a changed pod CIDR is kept",
			files: map[string]string{"10.9.0.7": `{"id":"old"}`},
			want:  map[string]string{"10.1.0.2": "a", "10.1.0.3": "b", "10.9.0.7": "old"},
		},
		{
			name:  "files that are not allocations are ignored",
			files: map[string]string{"README": "hi", "10.1.0.300": "x"},
			want:  map[string]string{"10.1.0.2": "a", "10.1.0.3": "b"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			a := openTestIPAM(t, dir, "10.1.0.0/27")
			mustAllocate(t, a, "a")
			mustAllocate(t, a, "b")
			// The crash: the process is gone without closing anything.
			// Copy what is on disk and start from the copy (the original
			// stays locked by the "dead" process, as its flock would not).
			crashed := t.TempDir()
			copyDir(t, dir, crashed)
			for name, content := range tt.files {
				if err := os.WriteFile(filepath.Join(crashed, name), []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
			}

			b := openTestIPAM(t, crashed, "10.1.0.0/27")
			if diff := cmp.Diff(tt.want, allocated(b)); diff != "" {
				t.Errorf("allocations after restart (-want +got):\n%s", diff)
			}
			if entries, _ := filepath.Glob(filepath.Join(crashed, ipamTmpPrefix+"*")); len(entries) > 0 {
				t.Errorf("temp files left after restart: %v", entries)
			}
			// No address is handed out twice: fill the rest of the range.
			seen := map[netip.Addr]bool{}
			for ip := range b.allocations() {
				seen[ip] = true
			}
			for i := 0; ; i++ {
				ip, err := b.allocate(ipamRecord{ID: fmt.Sprintf("fill-%d", i)})
				if err != nil {
					if !strings.Contains(err.Error(), "exhausted") {
						t.Fatal(err)
					}
					break
				}
				if seen[ip] {
					t.Fatalf("%s handed out twice", ip)
				}
				seen[ip] = true
			}
			// Ownerless addresses come back only through releaseIP (GC).
			for ip, rec := range b.allocations() {
				if rec.ID == "" {
					if err := b.releaseIP(ip); err != nil {
						t.Fatal(err)
					}
					if got, err := b.allocate(ipamRecord{ID: "reclaimed-" + ip.String()}); err != nil || got != ip {
						t.Errorf("after releasing ownerless %s: allocate = %s, %v", ip, got, err)
					}
				}
			}
		})
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func TestIPAMLockedByAnotherOpener(t *testing.T) {
	dir := t.TempDir()
	openTestIPAM(t, dir, "10.1.0.0/24")
	if _, err := openIPAM(dir, netip.MustParsePrefix("10.1.0.0/24")); err == nil || !strings.Contains(err.Error(), "in use by another process") {
		t.Fatalf("second open: err = %v, want 'in use by another process'", err)
	}
}

func TestIPAMConcurrentAllocations(t *testing.T) {
	a := openTestIPAM(t, t.TempDir(), "10.1.0.0/24")
	const pods = 100
	ips := make([]netip.Addr, pods)
	var wg sync.WaitGroup
	for i := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ip, err := a.allocate(ipamRecord{ID: fmt.Sprintf("pod-%d", i)})
			if err != nil {
				t.Error(err)
			}
			ips[i] = ip
		}()
	}
	wg.Wait()
	seen := map[netip.Addr]int{}
	for i, ip := range ips {
		if j, dup := seen[ip]; dup {
			t.Errorf("%s given to pod-%d and pod-%d", ip, j, i)
		}
		seen[ip] = i
	}
}
