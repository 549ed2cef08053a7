package kubelet

import (
	"testing"
	"time"

	"bonsai.dev/bonsai/kubelet/cri"
)

func TestImagesToRemove(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	img := func(id string, age time.Duration, size int64) cri.Image {
		return cri.Image{ID: id, CreatedAt: now.Add(-age), Size: size}
	}
	imgs := []cri.Image{
		img("young", time.Minute, 100),
		img("used", time.Hour, 100),
		img("old", 3*time.Hour, 100),
		img("older", 5*time.Hour, 100),
		img("mid", 2*time.Hour, 100),
	}
	inUse := map[string]bool{"used": true}
	for _, tc := range []struct {
		toFree int64
		want   []string
	}{
		{toFree: 0, want: nil},
		{toFree: 1, want: []string{"older"}},
		{toFree: 150, want: []string{"older", "old"}},
		{toFree: 10_000, want: []string{"older", "old", "mid"}}, // never young or used ones
	} {
		got := imagesToRemove(imgs, inUse, now, tc.toFree)
		var ids []string
		for _, g := range got {
			ids = append(ids, g.ID)
		}
		if len(ids) != len(tc.want) {
			t.Errorf("toFree %d: removed %v, want %v", tc.toFree, ids, tc.want)
			continue
		}
		for i := range ids {
			if ids[i] != tc.want[i] {
				t.Errorf("toFree %d: removed %v, want %v", tc.toFree, ids, tc.want)
			}
		}
	}
}
