package daemonset

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/cache"

	"bonsai.dev/bonsai/controllers/history"
	"bonsai.dev/bonsai/controllers/kit"
)

// sync drives one DaemonSet toward one up-to-date pod per wanted node and
// writes its status.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	ds, err := c.dsLister.DaemonSets(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.expectations.Forget(key)
		return nil
	}
	if err != nil {
		return err
	}
	nodes, err := c.nodeLister.List(labels.Everything())
	if err != nil {
		return err
	}
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil || sel.Empty() {
		c.recorder.Event(ds, corev1.EventTypeWarning, "SelectingAll", "This daemon set is selecting all pods. A non-empty selector is required.")
		return nil
	}
	if ds.DeletionTimestamp != nil {
		return nil
	}
	cur, old, err := c.constructHistory(ctx, ds)
	if err != nil {
		return fmt.Errorf("construct history: %w", err)
	}
	hash := cur.Labels[history.HashLabel]
	if !c.expectations.Satisfied(key) {
		// Acting on a cache behind our own writes would double pods; only
		// status, without claiming this generation was seen.
		return c.updateStatus(ctx, ds, nodes, hash, false)
	}
	err = c.manage(ctx, ds, nodes, hash)
	if err == nil && c.expectations.Satisfied(key) && ds.Spec.UpdateStrategy.Type == appsv1.RollingUpdateDaemonSetStrategyType {
		err = c.rollingUpdate(ctx, ds, nodes, hash)
	}
	if err == nil {
		err = c.cleanupHistory(ctx, ds, old)
	}
	return errors.Join(err, c.updateStatus(ctx, ds, nodes, hash, true))
}

// daemonPods claims ds's pods and maps them by the node each is for.
// Terminal pods being deleted are left out unless withDeletedTerminal:
// they are gone as far as placement goes, but history must not drop
// their revisions.
func (c *Controller) daemonPods(ctx context.Context, ds *appsv1.DaemonSet, withDeletedTerminal bool) (map[string][]*corev1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return nil, err
	}
	all, err := c.podLister.Pods(ds.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	m := &kit.RefManager[*corev1.Pod]{
		Owner: ds, Kind: controllerKind, Selector: sel,
		Patch:    kit.PatchWith(c.client.Core.Pods),
		CanAdopt: kit.RecheckOwner(ds, c.client.Apps.DaemonSets(ds.Namespace).Get),
	}
	pods, err := m.Claim(ctx, all, nil)
	byNode := map[string][]*corev1.Pod{}
	for _, p := range pods {
		if !withDeletedTerminal && p.DeletionTimestamp != nil && (p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded) {
			continue
		}
		node, nerr := targetNode(p)
		if nerr != nil {
			c.log.Warn("daemon pod without a node", "pod", p.Namespace+"/"+p.Name, "err", nerr)
			continue
		}
		byNode[node] = append(byNode[node], p)
	}
	return byNode, err
}

// manage creates the pods nodes lack and deletes those that must go:
// pods on nodes the DaemonSet no longer wants, failed pods (with
// back-off), succeeded ones, extra ones.
func (c *Controller) manage(ctx context.Context, ds *appsv1.DaemonSet, nodes []*corev1.Node, hash string) error {
	byNode, err := c.daemonPods(ctx, ds, false)
	if err != nil {
		return err
	}
	var create, del []string
	exists := make(map[string]bool, len(nodes))
	for _, node := range nodes {
		exists[node.Name] = true
		cr, dl := c.podsShouldBeOnNode(node, byNode[node.Name], ds, hash)
		create, del = append(create, cr...), append(del, dl...)
	}
	// Pods for nodes that are gone never get scheduled, so pod GC never
	// deletes them: that is ours to do.
	for node, pods := range byNode {
		if exists[node] {
			continue
		}
		for _, p := range pods {
			if p.Spec.NodeName == "" && p.DeletionTimestamp == nil {
				del = append(del, p.Name)
			}
		}
	}
	return c.syncNodes(ctx, ds, del, create, hash)
}

func (c *Controller) podsShouldBeOnNode(node *corev1.Node, pods []*corev1.Pod, ds *appsv1.DaemonSet, hash string) (create, del []string) {
	run, keep := shouldRun(node, ds)
	switch {
	case run && len(pods) == 0:
		return []string{node.Name}, nil
	case keep:
		var running []*corev1.Pod
		for _, p := range pods {
			switch {
			case p.DeletionTimestamp != nil:
			case p.Status.Phase == corev1.PodFailed:
				// The kubelet may be rejecting the pod: replace it, but
				// not in a hot loop.
				key := string(ds.UID) + "/" + node.Name
				now := c.clock.Now()
				if c.failedPods.IsInBackOffSinceUpdate(key, now) {
					c.enqueueAfter(ds, c.failedPods.Get(key))
					continue
				}
				c.failedPods.Next(key, now)
				c.recorder.Eventf(ds, corev1.EventTypeWarning, "FailedDaemonPod", "Found failed daemon pod %s/%s on node %s, will try to kill it", p.Namespace, p.Name, node.Name)
				del = append(del, p.Name)
			case p.Status.Phase == corev1.PodSucceeded:
				c.recorder.Eventf(ds, corev1.EventTypeNormal, "SucceededDaemonPod", "Found succeeded daemon pod %s/%s on node %s, will try to delete it", p.Namespace, p.Name, node.Name)
				del = append(del, p.Name)
			default:
				running = append(running, p)
			}
		}
		slices.SortStableFunc(running, olderFirst)
		if !allowsSurge(ds) {
			// One pod per node: keep the oldest.
			for _, p := range running[min(1, len(running)):] {
				del = append(del, p.Name)
			}
			return create, del
		}
		if len(running) == 0 {
			if run {
				create = append(create, node.Name)
			}
			return create, del
		}
		// Surging allows one old pod beside one new pod; the old one goes
		// once the new one is available (or at once if it is not Ready).
		var oldest, newest *corev1.Pod
		gen := templateGeneration(ds)
		for _, p := range running {
			switch {
			case podUpdated(p, hash, gen) && newest == nil:
				newest = p
			case !podUpdated(p, hash, gen) && oldest == nil:
				oldest = p
			default:
				del = append(del, p.Name)
			}
		}
		if newest != nil && oldest != nil && (!kit.IsPodReady(oldest) || kit.IsPodAvailable(newest, ds.Spec.MinReadySeconds, c.clock.Now())) {
			del = append(del, oldest.Name)
		}
	case len(pods) > 0:
		for _, p := range pods {
			if p.DeletionTimestamp == nil {
				del = append(del, p.Name)
			}
		}
	}
	return create, del
}

// olderFirst orders pods as upstream's podByCreationTimestampAndPhase:
// oldest first, Running before others at the same time.
func olderFirst(a, b *corev1.Pod) int {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		if a.CreationTimestamp.Before(&b.CreationTimestamp) {
			return -1
		}
		return 1
	}
	ar, br := a.Status.Phase == corev1.PodRunning, b.Status.Phase == corev1.PodRunning
	switch {
	case ar && !br:
		return -1
	case br && !ar:
		return 1
	}
	return 0
}

// allowsSurge says whether the rolling update may run a new pod beside an
// old one.
func allowsSurge(ds *appsv1.DaemonSet) bool {
	n, err := surgeCount(ds, 1)
	return err == nil && n > 0
}

func surgeCount(ds *appsv1.DaemonSet, desired int) (int, error) {
	ru := ds.Spec.UpdateStrategy.RollingUpdate
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ru == nil || ru.MaxSurge == nil {
		return 0, nil
	}
	return intstr.GetScaledValueFromIntOrPercent(ru.MaxSurge, desired, true)
}

func unavailableCount(ds *appsv1.DaemonSet, desired int) (int, error) {
	ru := ds.Spec.UpdateStrategy.RollingUpdate
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ru == nil || ru.MaxUnavailable == nil {
		return 0, nil
	}
	return intstr.GetScaledValueFromIntOrPercent(ru.MaxUnavailable, desired, true)
}

// syncNodes deletes pods by name and creates one pod for each node named,
// creations in batches that double while they succeed (upstream's slow
// start), so a quota or admission failure costs one call, not hundreds.
func (c *Controller) syncNodes(ctx context.Context, ds *appsv1.DaemonSet, del, create []string, hash string) error {
	key := keyOf(ds)
	create, del = create[:min(len(create), burstReplicas)], del[:min(len(del), burstReplicas)]
	c.expectations.Expect(key, len(create), len(del))
	tmpl := podTemplate(ds, hash)
	var (
		mu   sync.Mutex
		errs []error
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	for pos, batch := 0, 1; pos < len(create); pos, batch = pos+batch, 2*batch {
		batch = min(batch, len(create)-pos)
		before := len(errs)
		var wg sync.WaitGroup
		for _, node := range create[pos : pos+batch] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := c.createPod(ctx, ds, tmpl, node); err != nil {
					c.expectations.Lower(key, 1, 0)
					fail(err)
				}
			}()
		}
		wg.Wait()
		if len(errs) > before {
			// The rest were never tried: stop expecting them.
			c.expectations.Lower(key, len(create)-pos-batch, 0)
			break
		}
	}
	var wg sync.WaitGroup
	for _, name := range del {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := c.client.Core.Pods(ds.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
			if err != nil {
				c.expectations.Lower(key, 0, 1)
				if !apierrors.IsNotFound(err) {
					c.recorder.Eventf(ds, corev1.EventTypeWarning, "FailedDelete", "Error deleting: %v", err)
					fail(fmt.Errorf("delete pod %s: %w", name, err))
				}
				return
			}
			c.recorder.Eventf(ds, corev1.EventTypeNormal, "SuccessfulDelete", "Deleted pod: %s", name)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (c *Controller) createPod(ctx context.Context, ds *appsv1.DaemonSet, tmpl *corev1.PodTemplateSpec, node string) error {
	t := tmpl.DeepCopy()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName:    podPrefix(ds.Name),
			Namespace:       ds.Namespace,
			Labels:          t.Labels,
			Annotations:     t.Annotations,
			Finalizers:      t.Finalizers,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ds, controllerKind)},
		},
		Spec: t.Spec,
	}
	pod.Spec.Affinity = nodeAffinityFor(pod.Spec.Affinity, node)
	created, err := c.client.Core.Pods(ds.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			return nil
		}
		c.recorder.Eventf(ds, corev1.EventTypeWarning, "FailedCreate", "Error creating: %v", err)
		return fmt.Errorf("create pod for node %s: %w", node, err)
	}
	c.recorder.Eventf(ds, corev1.EventTypeNormal, "SuccessfulCreate", "Created pod: %s", created.Name)
	return nil
}

// podPrefix is the generateName of a controller's pods: its name and a
// dash, unless that is not a valid name prefix.
func podPrefix(name string) string {
	if p := name + "-"; len(validation.IsDNS1123Subdomain(p+"x")) == 0 {
		return p
	}
	return name
}

// updateStatus counts ds's pods into its status; observedGeneration only
// when this sync acted on the current generation.
func (c *Controller) updateStatus(ctx context.Context, ds *appsv1.DaemonSet, nodes []*corev1.Node, hash string, observed bool) error {
	byNode, err := c.daemonPods(ctx, ds, false)
	if err != nil {
		return err
	}
	var st appsv1.DaemonSetStatus
	now := c.clock.Now()
	gen := templateGeneration(ds)
	for _, node := range nodes {
		run, _ := shouldRun(node, ds)
		pods := byNode[node.Name]
		if !run {
			if len(pods) > 0 {
				st.NumberMisscheduled++
			}
			continue
		}
		st.DesiredNumberScheduled++
		if len(pods) == 0 {
			continue
		}
		st.CurrentNumberScheduled++
		pods = slices.Clone(pods)
		slices.SortStableFunc(pods, olderFirst)
		p := pods[0]
		if kit.IsPodReady(p) {
			st.NumberReady++
			if kit.IsPodAvailable(p, ds.Spec.MinReadySeconds, now) {
				st.NumberAvailable++
			}
		}
		if podUpdated(p, hash, gen) {
			st.UpdatedNumberScheduled++
		}
	}
	st.NumberUnavailable = st.DesiredNumberScheduled - st.NumberAvailable
	if ds.Spec.MinReadySeconds > 0 && st.NumberReady != st.NumberAvailable {
		c.enqueueAfter(ds, time.Duration(ds.Spec.MinReadySeconds)*time.Second)
	}
	return c.storeStatus(ctx, ds, st, observed)
}

func (c *Controller) storeStatus(ctx context.Context, ds *appsv1.DaemonSet, st appsv1.DaemonSetStatus, observed bool) error {
	s := ds.Status
	if s.DesiredNumberScheduled == st.DesiredNumberScheduled && s.CurrentNumberScheduled == st.CurrentNumberScheduled &&
		s.NumberMisscheduled == st.NumberMisscheduled && s.NumberReady == st.NumberReady &&
		s.UpdatedNumberScheduled == st.UpdatedNumberScheduled && s.NumberAvailable == st.NumberAvailable &&
		s.NumberUnavailable == st.NumberUnavailable && s.ObservedGeneration >= ds.Generation {
		return nil
	}
	dsc := c.client.Apps.DaemonSets(ds.Namespace)
	toUpdate := ds.DeepCopy()
	for i := 0; ; i++ {
		if observed {
			toUpdate.Status.ObservedGeneration = ds.Generation
		}
		toUpdate.Status.DesiredNumberScheduled = st.DesiredNumberScheduled
		toUpdate.Status.CurrentNumberScheduled = st.CurrentNumberScheduled
		toUpdate.Status.NumberMisscheduled = st.NumberMisscheduled
		toUpdate.Status.NumberReady = st.NumberReady
		toUpdate.Status.UpdatedNumberScheduled = st.UpdatedNumberScheduled
		toUpdate.Status.NumberAvailable = st.NumberAvailable
		toUpdate.Status.NumberUnavailable = st.NumberUnavailable
		_, err := dsc.UpdateStatus(ctx, toUpdate, metav1.UpdateOptions{})
		if err == nil || i >= statusUpdateRetries {
			if err != nil {
				return fmt.Errorf("update status: %w", err)
			}
			return nil
		}
		if toUpdate, err = dsc.Get(ctx, ds.Name, metav1.GetOptions{}); err != nil {
			return fmt.Errorf("get for status update: %w", err)
		}
	}
}
