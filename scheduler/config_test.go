package scheduler

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestLoadOptions(t *testing.T) {
	good := `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
percentageOfNodesToScore: 30
podInitialBackoffSeconds: 2
podMaxBackoffSeconds: 20
profiles:
- schedulerName: default-scheduler
  plugins:
    score:
      disabled:
      - name: ImageLocality
      enabled:
      - name: NodeResourcesBalancedAllocation
        weight: 5
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
        resources:
        - name: vendor.example/gpu
          weight: 3
`
	want := DefaultOptions()
	want.PercentageOfNodesToScore = 30
	want.InitialBackoff, want.MaxBackoff = 2*time.Second, 20*time.Second
	delete(want.ScoreWeights, ImageLocalityName)
	want.ScoreWeights[BalancedAllocationName] = 5
	want.FitStrategy = MostAllocated
	want.FitResources = []ResourceSpec{{Name: gpu, Weight: 3}}

	for _, tc := range []struct {
		name, file, err string
		want            *Options
	}{
		{name: "full", file: good, want: &want},
		{name: "unknown field", file: "kind: KubeSchedulerConfiguration\nbogus: 1\n", err: "bogus"},
		{name: "another profile name", file: "profiles:\n- schedulerName: mine\n", err: "default-scheduler"},
		{name: "unknown plugin", file: "profiles:\n- plugins:\n    score:\n      enabled:\n      - name: Nope\n", err: "Nope"},
		{name: "bad strategy", file: "profiles:\n- pluginConfig:\n  - name: NodeResourcesFit\n    args:\n      scoringStrategy:\n        type: Random\n", err: "Random"},
		{name: "bad percentage", file: "percentageOfNodesToScore: 101\n", err: "percentageOfNodesToScore"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.yaml")
			if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := LoadOptions(path)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one naming %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(*tc.want, got); diff != "" {
				t.Errorf("options (-want +got):\n%s", diff)
			}
		})
	}
}
