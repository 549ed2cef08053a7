package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"bonsai.dev/bonsai/apiserver/pki"
)

// Flood is a running bonsai's overload test: Nodes clients with node
// certificates (system:node:flood-<i>, issued by the data dir's CA)
// renew their Leases every RenewEvery while Users client-go clients, each
// on its own connection, create ConfigMaps as fast as the server lets
// them, for Duration. Each client is its own program's, as it would be
// on a real cluster: client-go would otherwise share one connection.
type Flood struct {
	DataDir    string // the server's, for its kubeconfig and CA
	Nodes      int
	Users      int
	RenewEvery time.Duration
	Duration   time.Duration
	// UserToken authenticates the flooding clients (a --token-file
	// user allowed to create ConfigMaps in Namespace).
	UserToken, Namespace string
	// OnNodesCreated, when set, runs once the Nodes and their Leases
	// exist, before the flood (to post their status, say).
	OnNodesCreated func()
}

// FloodNodeName is the name of the i-th node of a Flood.
func FloodNodeName(i int) string { return fmt.Sprintf("flood-%d", i) }

// FloodResult is what the nodes and the users got.
type FloodResult struct {
	// Renewals are the Lease renewals' latencies; RenewFailures those
	// that failed, with the first error.
	Renewals      []time.Duration
	RenewFailures int
	FirstFailure  error
	// LongestGap is the longest time a node went without a successful
	// renewal.
	LongestGap time.Duration
	// Created and TooMany count the users' creates answered 201 and 429.
	Created, TooMany, OtherErrors int
}

// Run creates the nodes and their Leases, floods, and returns the result.
func (f Flood) Run(ctx context.Context) (*FloodResult, error) {
	admin, err := floodClient(f.DataDir, nil)
	if err != nil {
		return nil, err
	}
	ca, err := pki.LoadAuthority(filepath.Join(f.DataDir, "tls"))
	if err != nil {
		return nil, err
	}
	nodes := make([]kubernetes.Interface, f.Nodes)
	created := make([]*coordinationv1.Lease, f.Nodes)
	for i := range nodes {
		name := FloodNodeName(i)
		if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
		cert, key, err := ca.IssueClient("system:node:"+name, []string{"system:nodes"})
		if err != nil {
			return nil, err
		}
		if nodes[i], err = floodClient(f.DataDir, func(c *rest.Config) {
			c.BearerToken, c.CertData, c.KeyData = "", cert, key
		}); err != nil {
			return nil, err
		}
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: corev1.NamespaceNodeLease},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &name, LeaseDurationSeconds: ptr32(40), RenewTime: &metav1.MicroTime{Time: time.Now()}}}
		if created[i], err = nodes[i].CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, lease, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("node %s creates its lease: %w", name, err)
		}
	}
	users := make([]kubernetes.Interface, f.Users)
	for i := range users {
		if users[i], err = floodClient(f.DataDir, func(c *rest.Config) {
			c.BearerToken, c.CertData, c.KeyData = f.UserToken, nil, nil
		}); err != nil {
			return nil, err
		}
	}

	if f.OnNodesCreated != nil {
		f.OnNodesCreated()
	}
	res := &FloodResult{}
	var mu sync.Mutex
	fctx, cancel := context.WithTimeout(ctx, f.Duration)
	defer cancel()
	var wg sync.WaitGroup
	for i, u := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; fctx.Err() == nil; n++ {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("flood-%d-%d", i, n)}, Data: map[string]string{"k": "v"}}
				_, err := u.CoreV1().ConfigMaps(f.Namespace).Create(fctx, cm, metav1.CreateOptions{})
				mu.Lock()
				switch {
				case err == nil:
					res.Created++
				case apierrors.IsTooManyRequests(err):
					res.TooMany++
				case fctx.Err() == nil:
					res.OtherErrors++
				}
				mu.Unlock()
			}
		}()
	}
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := FloodNodeName(i)
			leases := n.CoordinationV1().Leases(corev1.NamespaceNodeLease)
			lease := created[i]
			last := time.Now()
			tick := time.NewTicker(f.RenewEvery)
			defer tick.Stop()
			for {
				select {
				case <-fctx.Done():
					return
				case <-tick.C:
				}
				start := time.Now()
				// As the kubelet renews: an update of the Lease it last
				// wrote, a read only after a conflict.
				lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
				renewed, err := leases.Update(ctx, lease, metav1.UpdateOptions{})
				if apierrors.IsConflict(err) {
					if lease, err = leases.Get(ctx, name, metav1.GetOptions{}); err == nil {
						lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
						renewed, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
					}
				}
				if err == nil {
					lease = renewed
				}
				d := time.Since(start)
				mu.Lock()
				if err != nil {
					res.RenewFailures++
					if res.FirstFailure == nil {
						res.FirstFailure = fmt.Errorf("node %s: %w", name, err)
					}
				} else {
					res.Renewals = append(res.Renewals, d)
					if gap := time.Since(last); gap > res.LongestGap {
						res.LongestGap = gap
					}
					last = time.Now()
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return res, nil
}

func ptr32(v int32) *int32 { return &v }

// floodClient is a clientset on a connection of its own, unthrottled,
// from the data dir's admin kubeconfig with its credentials changed by
// set (nil: the admin's).
func floodClient(dataDir string, set func(*rest.Config)) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dataDir, "kubeconfig.yaml"))
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.UserAgent = -1, "bonsai-flood"
	cfg.Timeout = 30 * time.Second
	if set != nil {
		set(cfg)
	}
	cfg.Dial = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfigAndClient(cfg, hc)
}

var errNoRenewals = errors.New("no lease was renewed")

// Percentile is the p-th percentile (0-100) of ds, sorted in place.
func Percentile(ds []time.Duration, p float64) (time.Duration, error) {
	if len(ds) == 0 {
		return 0, errNoRenewals
	}
	slices.Sort(ds)
	return ds[int(float64(len(ds)-1)*p/100)], nil
}
