package garbagecollector

import (
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"bonsai.dev/bonsai/testsupport/clustertest"
)

// Background deletion of an owner of 2,000 dependents: logs how long the
// collector takes.
func TestBackgroundCascadeOfMany(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 2,000 objects")
	}
	e := start(t)
	owner := e.configMap("default", "owner", nil)
	const n = 2000
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("dep-%05d", i), Namespace: "default", Labels: map[string]string{"many": "yes"},
				OwnerReferences: []metav1.OwnerReference{ownedBy(owner, "ConfigMap", true)}}}
			if _, err := e.Client.Core.ConfigMaps("default").Create(e.Ctx, cm, metav1.CreateOptions{}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	begin := time.Now()
	e.delete("default", "owner", "")
	clustertest.Eventually(t, 2*time.Minute, func() error {
		list, err := e.Client.Core.ConfigMaps("default").List(e.Ctx, metav1.ListOptions{LabelSelector: "many=yes"})
		if err != nil {
			return err
		}
		if len(list.Items) > 0 {
			return fmt.Errorf("%d dependents left", len(list.Items))
		}
		return nil
	})
	t.Logf("%d dependents collected in %s", n, time.Since(begin))
}
