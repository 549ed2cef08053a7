package containerd

import "testing"

func TestRestrictOOMScoreAdj(t *testing.T) {
	for _, tc := range []struct {
		adj, own int
		canLower bool
		want     int
	}{
		{-997, 0, true, -997},
		{-997, 0, false, 0},
		{-997, -500, false, -500},
		{1000, 0, false, 1000},
		{500, 600, false, 600},
	} {
		if got := restrictOOMScoreAdj(tc.adj, tc.own, tc.canLower); got != tc.want {
			t.Errorf("restrictOOMScoreAdj(%d, %d, %v) = %d, want %d", tc.adj, tc.own, tc.canLower, got, tc.want)
		}
	}
}
