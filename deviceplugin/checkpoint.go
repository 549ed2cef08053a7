package deviceplugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// checkpoint is what survives a restart, in the kubelet's own file
// (<root>/device-plugins/kubelet_internal_checkpoint) and close to its
// layout: every container's devices with the plugin's Allocate answer,
// and the resources that were registered.
type checkpoint struct {
	Data     checkpointData `json:"Data"`
	Checksum uint64         `json:"Checksum"`
}

type checkpointData struct {
	PodDeviceEntries  []checkpointEntry   `json:"PodDeviceEntries"`
	RegisteredDevices map[string][]string `json:"RegisteredDevices"`
}

type checkpointEntry struct {
	PodUID        string   `json:"PodUID"`
	PodNamespace  string   `json:"PodNamespace"`
	PodName       string   `json:"PodName"`
	ContainerName string   `json:"ContainerName"`
	ResourceName  string   `json:"ResourceName"`
	DeviceIDs     []string `json:"DeviceIDs"`
	AllocResp     []byte   `json:"AllocResp"`
}

func (m *Manager) checkpointPath() string { return filepath.Join(m.dir, checkpointFile) }

func checksum(d checkpointData) (uint64, error) {
	b, err := json.Marshal(d)
	if err != nil {
		return 0, err
	}
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64(), nil
}

// persist asks for the current allocations to be written and returns the
// generation to wait for.
func (m *Manager) persist() uint64 {
	m.persistMu.Lock()
	m.wantGen++
	g := m.wantGen
	m.persistMu.Unlock()
	select {
	case m.persistKick <- struct{}{}:
	default:
	}
	return g
}

// waitPersisted waits until generation g is on disk.
func (m *Manager) waitPersisted(ctx context.Context, g uint64) error {
	for {
		m.persistMu.Lock()
		done, ch := m.doneGen, m.persisted
		m.persistMu.Unlock()
		if done >= g {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("device checkpoint: %w", ctx.Err())
		}
	}
}

// persistLoop writes the checkpoint whenever asked, one write for all the
// changes made while the last one ran; a failed write is retried.
func (m *Manager) persistLoop(ctx context.Context) {
	for {
		select {
		case <-m.persistKick:
		case <-ctx.Done():
			m.persistMu.Lock()
			pending := m.wantGen > m.doneGen
			m.persistMu.Unlock()
			if pending {
				m.saveCheckpoint()
			}
			return
		}
		m.persistMu.Lock()
		g := m.wantGen
		m.persistMu.Unlock()
		if err := m.saveCheckpoint(); err != nil {
			m.log.Warn("device checkpoint not written; retrying", "err", err)
			time.AfterFunc(time.Second, func() {
				select {
				case m.persistKick <- struct{}{}:
				default:
				}
			})
			continue
		}
		m.persistMu.Lock()
		if g > m.doneGen {
			m.doneGen = g
		}
		close(m.persisted)
		m.persisted = make(chan struct{})
		m.persistMu.Unlock()
	}
}

// saveCheckpoint writes the allocations durably (temp file, fsync,
// rename), so that a crash leaves the old or the new file, never half.
func (m *Manager) saveCheckpoint() error {
	m.mu.Lock()
	d := checkpointData{RegisteredDevices: map[string][]string{}}
	for name, r := range m.resources {
		ids := make([]string, 0, len(r.devices))
		for id := range r.devices {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		d.RegisteredDevices[name] = ids
	}
	for uid, a := range m.allocs {
		for cname, rs := range a.containers {
			for res, al := range rs {
				raw, err := proto.Marshal(al.Response)
				if err != nil {
					m.mu.Unlock()
					return err
				}
				d.PodDeviceEntries = append(d.PodDeviceEntries, checkpointEntry{
					PodUID: string(uid), PodNamespace: a.Namespace, PodName: a.Name,
					ContainerName: cname, ResourceName: res, DeviceIDs: al.DeviceIDs, AllocResp: raw,
				})
			}
		}
	}
	m.mu.Unlock()
	sort.Slice(d.PodDeviceEntries, func(i, j int) bool {
		a, b := d.PodDeviceEntries[i], d.PodDeviceEntries[j]
		if a.PodUID != b.PodUID {
			return a.PodUID < b.PodUID
		}
		if a.ContainerName != b.ContainerName {
			return a.ContainerName < b.ContainerName
		}
		return a.ResourceName < b.ResourceName
	})
	sum, err := checksum(d)
	if err != nil {
		return err
	}
	b, err := json.Marshal(checkpoint{Data: d, Checksum: sum})
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(m.dir, ".checkpoint-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), m.checkpointPath())
}

// restore reads the checkpoint: pods keep their devices, and resources
// that were registered come back with no devices (capacity 0) until their
// plugin registers again or the grace period ends.
func (m *Manager) restore() error {
	b, err := os.ReadFile(m.checkpointPath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var cp checkpoint
	if err := json.Unmarshal(b, &cp); err != nil {
		return fmt.Errorf("checkpoint %s is corrupt: %v", m.checkpointPath(), err)
	}
	if sum, err := checksum(cp.Data); err != nil || sum != cp.Checksum {
		return fmt.Errorf("checkpoint %s is corrupt: checksum mismatch", m.checkpointPath())
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for name := range cp.Data.RegisteredDevices {
		m.resource(name)
	}
	for _, e := range cp.Data.PodDeviceEntries {
		resp := &pluginapi.ContainerAllocateResponse{}
		if err := proto.Unmarshal(e.AllocResp, resp); err != nil {
			return fmt.Errorf("checkpoint %s is corrupt: %v", m.checkpointPath(), err)
		}
		uid := types.UID(e.PodUID)
		a := m.allocs[uid]
		if a == nil {
			a = &podAllocation{Namespace: e.PodNamespace, Name: e.PodName, containers: map[string]map[string]*allocation{}}
			m.allocs[uid] = a
		}
		if a.containers[e.ContainerName] == nil {
			a.containers[e.ContainerName] = map[string]*allocation{}
		}
		a.containers[e.ContainerName][e.ResourceName] = &allocation{DeviceIDs: e.DeviceIDs, Response: resp}
		m.resource(e.ResourceName)
	}
	for _, r := range m.resources {
		m.scheduleRemoval(r)
	}
	m.log.Info("device allocations restored", "pods", len(m.allocs), "resources", len(cp.Data.RegisteredDevices))
	return nil
}
