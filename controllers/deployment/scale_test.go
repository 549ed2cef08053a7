package deployment

import (
	"fmt"
	"testing"
	"time"

	"bonsai.dev/bonsai/testsupport/clustertest"
)

// 1,000 replicas of a Deployment on 100 simulated nodes: logs how long
// until all are Available (the benchmark's figure; not a pass/fail
// bound here, a loaded CI machine would make it flaky).
func TestThousandReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 pods: not in -short")
	}
	e := start(t, 100)
	const n = 1000
	begin := time.Now()
	e.create(newDeployment("big", n))
	clustertest.Eventually(t, 120*time.Second, func() error {
		d := e.get("big")
		if d.Status.AvailableReplicas != n {
			return fmt.Errorf("%d of %d replicas available", d.Status.AvailableReplicas, n)
		}
		return nil
	})
	t.Logf("1000 replicas Available on 100 nodes in %s", time.Since(begin).Round(time.Millisecond))
}
