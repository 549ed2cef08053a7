package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// workloadParams size the workloads suite.
type workloadParams struct {
	nodes, replicas, nsObjects int
	settle, idle               time.Duration
}

func workloadParamsFor(quick bool) workloadParams {
	if quick {
		return workloadParams{nodes: 20, replicas: 200, nsObjects: 1000, settle: 10 * time.Second, idle: 5 * time.Second}
	}
	return workloadParams{nodes: 100, replicas: 1000, nsObjects: 5000, settle: 40 * time.Second, idle: 15 * time.Second}
}

type workloadResults struct {
	available, rollout, nsGone, idleCPU *float64
	sliceWrites                         *float64
}

// workloadsSuite drives the workload controllers of a real `bonsai server
// --simulated-nodes N`: a Deployment from create to every replica
// Available, a rolling update of it to completion, the deletion of a
// namespace full of objects, and the server's CPU while nothing changes.
func workloadsSuite(ctx context.Context, b *bench) ([]Row, error) {
	p := workloadParamsFor(b.quick)
	res := &workloadResults{}
	rows := func() []Row { return workloadRows(p, res) }
	srv, stop, err := startSuiteServer(ctx, b, "workloads", "--cluster-cidr", simClusterCIDR, "--simulated-nodes", strconv.Itoa(p.nodes))
	if err != nil {
		return rows(), err
	}
	defer stop()
	cfg, err := srv.restConfig("bonsai-bench-workloads")
	if err != nil {
		return rows(), err
	}
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return rows(), err
	}
	if _, err := waitSimReady(ctx, cs, p.nodes, 2*time.Minute); err != nil {
		return rows(), fmt.Errorf("%w\n%s", err, srv.logTail())
	}

	b.logf("workloads: a Deployment of %s replicas on %d simulated nodes", fmtNum(float64(p.replicas)), p.nodes)
	d := benchDeployment(int32(p.replicas))
	start := time.Now()
	if d, err = cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return rows(), err
	}
	if err := waitDeployment(ctx, cs, d.Name, d.Generation, p.replicas); err != nil {
		return rows(), fmt.Errorf("deployment: %w\n%s", err, srv.logTail())
	}
	res.available = ms(time.Since(start))

	// Steady: no controller should have anything to do once the events
	// of the burst (one Scheduled per pod, written one at a time by the
	// scheduler's recorder) are out.
	if err := sleep(ctx, p.settle); err != nil {
		return rows(), err
	}
	pid := strconv.Itoa(srv.cmd.Process.Pid)
	t0, c0, err := time.Now(), uint64(0), error(nil)
	if c0, err = cpuTicks(pid); err != nil {
		return rows(), err
	}
	if err := sleep(ctx, p.idle); err != nil {
		return rows(), err
	}
	c1, err := cpuTicks(pid)
	if err != nil {
		return rows(), err
	}
	// Linux reports process times in 100 Hz ticks.
	res.idleCPU = num(float64(c1-c0) / 100 / time.Since(t0).Seconds() * 100)

	b.logf("workloads: a rolling update of the %s replicas", fmtNum(float64(p.replicas)))
	start = time.Now()
	d, err = cs.AppsV1().Deployments("default").Get(ctx, d.Name, metav1.GetOptions{})
	if err != nil {
		return rows(), err
	}
	d.Spec.Template.Annotations = map[string]string{"bench/rollout": "2"}
	if d, err = cs.AppsV1().Deployments("default").Update(ctx, d, metav1.UpdateOptions{}); err != nil {
		return rows(), err
	}
	if err := waitDeployment(ctx, cs, d.Name, d.Generation, p.replicas); err != nil {
		return rows(), fmt.Errorf("rollout: %w\n%s", err, srv.logTail())
	}
	res.rollout = ms(time.Since(start))

	b.logf("workloads: deleting a namespace of %s ConfigMaps", fmtNum(float64(p.nsObjects)))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bulk"}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return rows(), err
	}
	ac := &apiClients{kubeconfig: filepath.Join(srv.dir, "kubeconfig.yaml")}
	defer ac.closeAll()
	if err := createMany(ctx, ac, "bulk", "cm", p.nsObjects, 16, 256); err != nil {
		return rows(), err
	}
	start = time.Now()
	if err := cs.CoreV1().Namespaces().Delete(ctx, "bulk", metav1.DeleteOptions{}); err != nil {
		return rows(), err
	}
	for {
		_, err := cs.CoreV1().Namespaces().Get(ctx, "bulk", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Since(start) > 2*time.Minute {
			return rows(), fmt.Errorf("namespace bulk still there after 2 minutes (%v)\n%s", err, srv.logTail())
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return rows(), err
		}
	}
	res.nsGone = ms(time.Since(start))

	// Last, as a Service in front of a Deployment this size slows the
	// rows above (the Endpoints and EndpointSlice controllers rewrite
	// 1,000 addresses as the pods come): the EndpointSlice controller's
	// writes while another Deployment comes up behind a Service, counted
	// from a watch of its slices.
	b.logf("workloads: EndpointSlice writes while %s replicas come up behind a Service", fmtNum(float64(p.replicas)))
	sliced := benchDeployment(int32(p.replicas))
	sliced.Name = "sliced"
	sliced.Spec.Selector.MatchLabels = map[string]string{"app": "sliced"}
	sliced.Spec.Template.Labels = map[string]string{"app": "sliced"}
	sliceWrites, err := countSliceWrites(ctx, cs, sliced, p.replicas)
	if err != nil {
		return rows(), err
	}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, sliced, metav1.CreateOptions{}); err != nil {
		return rows(), err
	}
	select {
	case n := <-sliceWrites:
		res.sliceWrites = num(float64(n))
	case <-time.After(3 * time.Minute):
		return rows(), fmt.Errorf("the EndpointSlices of Service sliced do not list %d ready endpoints after 3 minutes\n%s", p.replicas, srv.logTail())
	}
	return rows(), nil
}

func benchDeployment(replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": "bench"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "bench:1"}}},
			},
		},
	}
}

// waitDeployment watches a Deployment until its controller has seen
// generation and every one of n replicas is updated and available, with
// no old ones left.
func waitDeployment(ctx context.Context, cs kubernetes.Interface, name string, generation int64, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	done := func(d *appsv1.Deployment) bool {
		s := d.Status
		return s.ObservedGeneration >= generation && int(s.UpdatedReplicas) == n && int(s.AvailableReplicas) == n && int(s.Replicas) == n
	}
	lw := cache.NewListWatchFromClient(cs.AppsV1().RESTClient(), "deployments", "default", fields.OneTermEqualSelector("metadata.name", name))
	_, err := watchtools.UntilWithSync(ctx, lw, &appsv1.Deployment{}, nil, func(ev watch.Event) (bool, error) {
		d, ok := ev.Object.(*appsv1.Deployment)
		return ok && done(d), nil
	})
	return err
}

func workloadRows(p workloadParams, r *workloadResults) []Row {
	row := func(name, unit string, v *float64, t *Target) Row {
		return Row{Name: "workloads: " + name, Unit: unit, Bonsai: v, Target: t}
	}
	rows := []Row{
		row(fmt.Sprintf("Deployment of %s replicas on %d simulated nodes, create to all Available", fmtNum(float64(p.replicas)), p.nodes), "ms", r.available, nil),
		row(fmt.Sprintf("rolling update of the %s replicas to completion", fmtNum(float64(p.replicas))), "ms", r.rollout, nil),
		row(fmt.Sprintf("EndpointSlice writes while the %s replicas come up behind a Service (fewest possible: %d)", fmtNum(float64(p.replicas)), (p.replicas+99)/100), "writes", r.sliceWrites, nil),
		row(fmt.Sprintf("namespace of %s ConfigMaps, delete to gone", fmtNum(float64(p.nsObjects))), "ms", r.nsGone, nil),
		row(fmt.Sprintf("server CPU, steady with %s pods on %d simulated nodes (their leases included)", fmtNum(float64(p.replicas)), p.nodes), "% of a core", r.idleCPU, nil),
	}
	if p.replicas == 1000 {
		rows[0].Target = atMost(5000, "ms")
		rows[1].Target = atMost(10000, "ms")
	}
	if p.nsObjects == 5000 {
		rows[3].Target = atMost(10000, "ms")
	}
	return rows
}

// countSliceWrites creates a Service for d's pods and counts the writes to
// its EndpointSlices (each write is one watch event) until they list
// ready endpoints in all; the count arrives on the channel.
func countSliceWrites(ctx context.Context, cs kubernetes.Interface, d *appsv1.Deployment, ready int) (<-chan int, error) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: d.Name, Namespace: d.Namespace},
		Spec: corev1.ServiceSpec{Selector: d.Spec.Selector.MatchLabels, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
	if _, err := cs.CoreV1().Services(d.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	w, err := cs.DiscoveryV1().EndpointSlices(d.Namespace).Watch(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + d.Name})
	if err != nil {
		return nil, err
	}
	out := make(chan int, 1)
	go func() {
		defer w.Stop()
		writes := 0
		endpoints := map[string]int{} // ready endpoints by slice
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*discoveryv1.EndpointSlice)
			if !ok {
				continue
			}
			writes++
			n := 0
			for _, e := range s.Endpoints {
				if e.Conditions.Ready != nil && *e.Conditions.Ready {
					n++
				}
			}
			if ev.Type == watch.Deleted {
				n = 0
			}
			endpoints[s.Name] = n
			total := 0
			for _, n := range endpoints {
				total += n
			}
			if total >= ready {
				out <- writes
				return
			}
		}
	}()
	return out, nil
}
