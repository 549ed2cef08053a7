// Package helm is k3s's helm-controller in-process: it installs, upgrades
// and uninstalls the helm.cattle.io/v1 HelmCharts of every namespace with
// the Helm SDK, merging the valuesContent of the HelmChartConfig of the
// same name and namespace over the chart's. Releases are stored as helm
// stores them (Secrets sh.helm.release.v1.NAME.vN in the target
// namespace), so that the helm CLI sees them. Charts come from
// spec.chartContent, a repository (spec.repo), a URL, or a .tgz in the
// manifests directory named by k3s's static URL
// https://%{KUBERNETES_API}%/static/charts/NAME.tgz.
package helm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"sync"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/kube"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/yaml"

	"bonsai.dev/bonsai/client"
)

const (
	// Finalizer holds a HelmChart until its release is uninstalled:
	// k3s's, so that k3s's HelmCharts are handled alike.
	Finalizer = "wrangler.cattle.io/on-helm-chart-remove"
	// AnnotationUnmanaged leaves a HelmChart to someone else, as in k3s.
	AnnotationUnmanaged = "helmcharts.helm.cattle.io/unmanaged"
	// AnnotationManagedBy names the controller that claimed a HelmChart;
	// one another controller claimed is left alone.
	AnnotationManagedBy = "helmcharts.cattle.io/managed-by"
	ManagedBy           = "bonsai"
	// LabelHash on a release (and its Secret) is the hash of the chart
	// source and values it was made from.
	LabelHash = "bonsai.dev/helmchart-hash"
	// FieldManager writes the HelmCharts' status.
	FieldManager = "bonsai-helm-controller"
	// MaxHistory is how many revisions of a release are kept (helm's
	// default for upgrades).
	MaxHistory = 10
	// DefaultResync is how often every HelmChart is checked against its
	// release (a release deleted or changed by hand).
	DefaultResync = 30 * time.Second
	// FileCheckInterval is how often the .tgz files of static chart
	// URLs are looked at: a file added or replaced is installed then.
	FileCheckInterval = 2 * time.Second
)

var (
	chartGVR  = schema.GroupVersionResource{Group: "helm.cattle.io", Version: "v1", Resource: "helmcharts"}
	configGVR = schema.GroupVersionResource{Group: "helm.cattle.io", Version: "v1", Resource: "helmchartconfigs"}
)

// Config is a Controller's.
type Config struct {
	// RESTConfig must be allowed everything (system:masters): charts may
	// hold any kind.
	RESTConfig *rest.Config
	// ChartDirs are searched in order for the NAME.tgz of a static
	// chart URL.
	ChartDirs []string
	Resync    time.Duration
	Logger    *slog.Logger
}

// Controller runs HelmCharts.
type Controller struct {
	cfg     Config
	dyn     dynamic.Interface
	cs      kubernetes.Interface
	getter  *restGetter
	queue   workqueue.TypedRateLimitingInterface[string]
	charts  cache.SharedIndexInformer
	configs cache.SharedIndexInformer
	events  record.EventRecorder
	log     *slog.Logger

	mu sync.Mutex
	// files are the chart files each HelmChart's static URL may name,
	// by HelmChart key, as they were when it was last handled.
	files map[string]map[string]fileStamp
}

// fileStamp is what a stat says of a chart file.
type fileStamp struct {
	exists bool
	mtime  int64 // ns
	size   int64
}

func stamp(path string) fileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	return fileStamp{exists: true, mtime: fi.ModTime().UnixNano(), size: fi.Size()}
}

// New checks cfg.
func New(cfg Config) (*Controller, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Resync == 0 {
		cfg.Resync = DefaultResync
	}
	dyn, err := dynamic.NewForConfig(cfg.RESTConfig)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg.RESTConfig)
	if err != nil {
		return nil, err
	}
	g, err := newRESTGetter(cfg.RESTConfig)
	if err != nil {
		return nil, err
	}
	return &Controller{cfg: cfg, dyn: dyn, cs: cs, getter: g, log: cfg.Logger.With("component", "helm-controller"), files: map[string]map[string]fileStamp{}}, nil
}

// Run installs the CRDs, then handles HelmCharts until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	core, err := client.Core(c.cfg.RESTConfig)
	if err != nil {
		return err
	}
	c.events = client.NewRecorder(ctx, core, "helm-controller")
	if err := c.ensureCRDs(ctx); err != nil {
		return err
	}
	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Second, 5*time.Minute),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "helmcharts"})
	defer c.queue.ShutDown()
	f := dynamicinformer.NewDynamicSharedInformerFactory(c.dyn, c.cfg.Resync)
	c.charts = f.ForResource(chartGVR).Informer()
	c.configs = f.ForResource(configGVR).Informer()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	handler := cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) }, DeleteFunc: enqueue}
	if _, err := c.charts.AddEventHandler(handler); err != nil {
		return err
	}
	// A HelmChartConfig's key is its HelmChart's.
	if _, err := c.configs.AddEventHandler(handler); err != nil {
		return err
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.charts.HasSynced, c.configs.HasSynced) {
		return nil
	}
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	go c.watchFiles(ctx)
	for c.next(ctx) {
	}
	return nil
}

// ensureCRDs applies the HelmChart and HelmChartConfig CRDs and waits
// until they are served.
func (c *Controller) ensureCRDs(ctx context.Context) error {
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	var objs []*unstructured.Unstructured
	for _, y := range []string{helmChartCRD, helmChartConfigCRD} {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(y), &u.Object); err != nil {
			return err
		}
		objs = append(objs, u)
	}
	for {
		var err error
		for _, u := range objs {
			if err == nil {
				_, err = c.dyn.Resource(crds).Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
			}
		}
		for _, gvr := range []schema.GroupVersionResource{chartGVR, configGVR} {
			if err == nil {
				_, err = c.dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
			}
		}
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c *Controller) next(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	err := c.sync(ctx, key)
	var se *specError
	switch {
	case err == nil, errors.As(err, &se):
		// A spec error waits for the objects to change.
		c.queue.Forget(key)
	case ctx.Err() != nil:
	default:
		c.queue.AddRateLimited(key)
	}
	return true
}

// sync brings one HelmChart's release to what it asks for.
func (c *Controller) sync(ctx context.Context, key string) error {
	obj, exists, err := c.charts.GetIndexer().GetByKey(key)
	if err != nil || !exists {
		c.watch(key, nil)
		return err
	}
	hc := obj.(*unstructured.Unstructured).DeepCopy()
	if !c.manages(hc) || hc.GetDeletionTimestamp() != nil {
		c.watch(key, nil)
	} else {
		c.watch(key, chartFiles(hc, c.cfg.ChartDirs))
	}
	if !c.manages(hc) {
		if hc.GetDeletionTimestamp() != nil && c.releasedByUser(hc) {
			// Made unmanaged after it was installed: the release is
			// the user's now, the HelmChart must not hang on our
			// finalizer.
			return c.dropFinalizer(ctx, hc)
		}
		return nil
	}
	if hc.GetDeletionTimestamp() != nil {
		if !slices.Contains(hc.GetFinalizers(), Finalizer) {
			return nil
		}
		return c.remove(ctx, hc)
	}
	if !slices.Contains(hc.GetFinalizers(), Finalizer) || hc.GetAnnotations()[AnnotationManagedBy] != ManagedBy {
		hc.SetFinalizers(append(slices.DeleteFunc(hc.GetFinalizers(), func(f string) bool { return f == Finalizer }), Finalizer))
		ann := hc.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann[AnnotationManagedBy] = ManagedBy
		hc.SetAnnotations(ann)
		upd, err := c.dyn.Resource(chartGVR).Namespace(hc.GetNamespace()).Update(ctx, hc, metav1.UpdateOptions{FieldManager: FieldManager})
		if err != nil {
			return err
		}
		hc = upd
	}
	var hcc *unstructured.Unstructured
	if o, ok, _ := c.configs.GetIndexer().GetByKey(key); ok {
		hcc = o.(*unstructured.Unstructured)
	}
	p, err := makePlan(hc, hcc, c.cfg.ChartDirs)
	if err != nil {
		c.failed(ctx, hc, err)
		return err
	}
	rel, err := c.deploy(ctx, hc, p)
	if err != nil {
		c.failed(ctx, hc, err)
		return err
	}
	c.deployed(ctx, hc, rel)
	return nil
}

// watch records the chart files of key's HelmChart as they are now.
func (c *Controller) watch(key string, paths []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(paths) == 0 {
		delete(c.files, key)
		return
	}
	m := make(map[string]fileStamp, len(paths))
	for _, p := range paths {
		m[p] = stamp(p)
	}
	c.files[key] = m
}

// watchFiles hands a HelmChart to the worker when one of its chart
// files appears, changes or goes.
func (c *Controller) watchFiles(ctx context.Context) {
	t := time.NewTicker(FileCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		for key, m := range c.files {
			for p, was := range m {
				if now := stamp(p); now != was {
					m[p] = now
					c.queue.Add(key)
				}
			}
		}
		c.mu.Unlock()
	}
}

// manages says whether a HelmChart is this controller's, as k3s's does.
func (c *Controller) manages(hc *unstructured.Unstructured) bool {
	ann := hc.GetAnnotations()
	if _, ok := ann[AnnotationUnmanaged]; ok {
		return false
	}
	if by, ok := ann[AnnotationManagedBy]; ok && by != ManagedBy {
		return false
	}
	chart, _, _ := unstructured.NestedString(hc.Object, "spec", "chart")
	content, _, _ := unstructured.NestedString(hc.Object, "spec", "chartContent")
	return chart != "" || content != ""
}

// actionConfig is helm's for releases in namespace ns.
func (c *Controller) actionConfig(ns string) *action.Configuration {
	debug := func(format string, v ...any) {
		if c.log.Enabled(context.Background(), slog.LevelDebug) {
			c.log.Debug(fmt.Sprintf(format, v...), "namespace", ns)
		}
	}
	kc := &kube.Client{Factory: factory{c.getter}, Namespace: ns, Log: debug}
	d := driver.NewSecrets(c.cs.CoreV1().Secrets(ns))
	d.Log = debug
	return &action.Configuration{RESTClientGetter: c.getter, KubeClient: kc, Releases: storage.Init(d), Log: debug}
}

// deploy installs or upgrades p's release unless it is up to date.
func (c *Controller) deploy(ctx context.Context, hc *unstructured.Unstructured, p *plan) (*release.Release, error) {
	cfg := c.actionConfig(p.target)
	last, err := cfg.Releases.Last(p.release)
	if err != nil && !errors.Is(err, driver.ErrReleaseNotFound) {
		return nil, fmt.Errorf("release %s/%s: %v", p.target, p.release, err)
	}
	if last != nil && last.Info.Status == release.StatusDeployed && last.Labels[LabelHash] == p.hash {
		return last, nil
	}
	ch, err := p.src.load(ctx)
	if err != nil {
		return nil, err
	}
	install, replace := last == nil, false
	if last != nil {
		switch st := last.Info.Status; {
		case st == release.StatusUninstalled:
			install, replace = true, true
		case st == release.StatusFailed || st.IsPending():
			// A failed operation, or one bonsai stopped in the middle of.
			if p.failurePolicy == FailurePolicyAbort {
				return nil, fmt.Errorf("release %s/%s is %s and failurePolicy is abort: fix it by hand (helm rollback or uninstall)", p.target, p.release, st)
			}
			c.log.Info("reinstalling a release", "release", p.target+"/"+p.release, "status", st)
			c.events.Eventf(hc, corev1.EventTypeNormal, "Reinstall", "release %s/%s is %s: uninstalling it to install it again (failurePolicy reinstall)", p.target, p.release, st)
			if err := c.uninstall(cfg, p.release, p.timeout); err != nil {
				return nil, err
			}
			install = true
		}
	}
	labels := map[string]string{LabelHash: p.hash}
	start := time.Now()
	var rel *release.Release
	if install {
		i := action.NewInstall(cfg)
		i.ReleaseName, i.Namespace = p.release, p.target
		i.CreateNamespace, i.Replace = p.createNamespace, replace
		i.Timeout, i.Labels = p.timeout, labels
		rel, err = i.RunWithContext(ctx, ch, p.values)
	} else {
		u := action.NewUpgrade(cfg)
		u.Namespace = p.target
		// The HelmChart says all the values: what it no longer says
		// goes back to the chart's default.
		u.ResetValues = true
		u.MaxHistory, u.Timeout, u.Labels = MaxHistory, p.timeout, labels
		rel, err = u.RunWithContext(ctx, p.release, ch, p.values)
	}
	what := map[bool]string{true: "install", false: "upgrade"}[install]
	if err != nil {
		return nil, fmt.Errorf("%s %s/%s: %v", what, p.target, p.release, err)
	}
	chartName := ch.Metadata.Name + "-" + ch.Metadata.Version
	c.log.Info(what+"ed a chart", "helmchart", hc.GetNamespace()+"/"+hc.GetName(), "release", p.target+"/"+p.release,
		"chart", chartName, "revision", rel.Version, "took", time.Since(start).Round(time.Millisecond))
	reason := map[bool]string{true: "Installed", false: "Upgraded"}[install]
	c.events.Eventf(hc, corev1.EventTypeNormal, reason, "%sed %s as release %s/%s revision %d", what, chartName, p.target, p.release, rel.Version)
	return rel, nil
}

func (c *Controller) uninstall(cfg *action.Configuration, name string, timeout time.Duration) error {
	u := action.NewUninstall(cfg)
	u.Timeout, u.IgnoreNotFound = timeout, true
	if _, err := u.Run(name); err != nil && !errors.Is(err, driver.ErrReleaseNotFound) {
		return fmt.Errorf("uninstall %s: %v", name, err)
	}
	return nil
}

// remove uninstalls a deleted HelmChart's release, then lets it go.
func (c *Controller) remove(ctx context.Context, hc *unstructured.Unstructured) error {
	ns := targetNamespace(hc)
	cfg := c.actionConfig(ns)
	timeout := DefaultTimeout
	if s, _, _ := unstructured.NestedString(hc.Object, "spec", "timeout"); s != "" {
		if d, err := time.ParseDuration(s); err == nil && d > 0 {
			timeout = d
		}
	}
	_, lerr := cfg.Releases.Last(hc.GetName())
	if err := c.uninstall(cfg, hc.GetName(), timeout); err != nil {
		c.failed(ctx, hc, err)
		return err
	}
	if lerr == nil {
		c.log.Info("uninstalled a chart", "helmchart", hc.GetNamespace()+"/"+hc.GetName(), "release", ns+"/"+hc.GetName())
		c.events.Eventf(hc, corev1.EventTypeNormal, "Uninstalled", "uninstalled release %s/%s", ns, hc.GetName())
	}
	return c.dropFinalizer(ctx, hc)
}

// releasedByUser: a HelmChart this controller claimed, since annotated
// unmanaged.
func (c *Controller) releasedByUser(hc *unstructured.Unstructured) bool {
	ann := hc.GetAnnotations()
	_, unmanaged := ann[AnnotationUnmanaged]
	return unmanaged && ann[AnnotationManagedBy] == ManagedBy && slices.Contains(hc.GetFinalizers(), Finalizer)
}

func (c *Controller) dropFinalizer(ctx context.Context, hc *unstructured.Unstructured) error {
	hc.SetFinalizers(slices.DeleteFunc(hc.GetFinalizers(), func(f string) bool { return f == Finalizer }))
	_, err := c.dyn.Resource(chartGVR).Namespace(hc.GetNamespace()).Update(ctx, hc, metav1.UpdateOptions{FieldManager: FieldManager})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// failed records err in the HelmChart's status and, when it is new, in
// a Warning event and the log.
func (c *Controller) failed(ctx context.Context, hc *unstructured.Unstructured, err error) {
	if ctx.Err() != nil {
		return
	}
	msg := err.Error()
	old, _, _ := unstructured.NestedSlice(hc.Object, "status", "conditions")
	if conditionMessage(old, "Failed") != msg {
		c.log.Warn("cannot deploy a HelmChart", "helmchart", hc.GetNamespace()+"/"+hc.GetName(), "err", msg)
		c.events.Event(hc, corev1.EventTypeWarning, "Failed", msg)
	}
	status := c.baseStatus(hc)
	status["conditions"] = setCondition(setCondition(old, "Failed", "True", "Error", msg), "Deployed", "False", "Error", "")
	c.writeStatus(ctx, hc, status)
}

// deployed records a release up to date.
func (c *Controller) deployed(ctx context.Context, hc *unstructured.Unstructured, rel *release.Release) {
	old, _, _ := unstructured.NestedSlice(hc.Object, "status", "conditions")
	status := c.baseStatus(hc)
	status["revision"] = int64(rel.Version)
	if rel.Chart != nil && rel.Chart.Metadata != nil {
		status["chart"] = rel.Chart.Metadata.Name + "-" + rel.Chart.Metadata.Version
	}
	status["conditions"] = setCondition(setCondition(old, "Failed", "False", "Deployed", ""), "Deployed", "True", "Deployed",
		fmt.Sprintf("release %s/%s revision %d", rel.Namespace, rel.Name, rel.Version))
	c.writeStatus(ctx, hc, status)
}

func (c *Controller) baseStatus(hc *unstructured.Unstructured) map[string]any {
	status := map[string]any{"observedGeneration": hc.GetGeneration()}
	// What the last success recorded stays.
	for _, k := range []string{"revision", "chart"} {
		if v, ok, _ := unstructured.NestedFieldCopy(hc.Object, "status", k); ok {
			status[k] = v
		}
	}
	return status
}

// writeStatus writes status unless the HelmChart has it already.
func (c *Controller) writeStatus(ctx context.Context, hc *unstructured.Unstructured, status map[string]any) {
	cur, _, _ := unstructured.NestedMap(hc.Object, "status")
	// Compared as JSON would be: numbers as int64.
	norm := func(m map[string]any) map[string]any {
		b, _ := yaml.Marshal(m)
		var out map[string]any
		_ = yaml.Unmarshal(b, &out)
		return out
	}
	if reflect.DeepEqual(norm(cur), norm(status)) {
		return
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
		"metadata": map[string]any{"name": hc.GetName(), "namespace": hc.GetNamespace()},
		"status":   status,
	}}
	if _, err := c.dyn.Resource(chartGVR).Namespace(hc.GetNamespace()).ApplyStatus(ctx, hc.GetName(), u, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		c.log.Warn("cannot write a HelmChart's status", "helmchart", hc.GetNamespace()+"/"+hc.GetName(), "err", err)
	}
}

// setCondition sets one condition of conds, its transition time moving
// only with its status.
func setCondition(conds []any, typ, status, reason, msg string) []any {
	now := time.Now().UTC().Format(time.RFC3339)
	out := make([]any, 0, len(conds)+1)
	found := false
	for _, x := range conds {
		m, ok := x.(map[string]any)
		if !ok {
			continue
		}
		if m["type"] != typ {
			out = append(out, m)
			continue
		}
		found = true
		n := map[string]any{"type": typ, "status": status, "reason": reason, "message": msg, "lastTransitionTime": m["lastTransitionTime"]}
		if m["status"] != status || m["lastTransitionTime"] == nil {
			n["lastTransitionTime"] = now
		}
		out = append(out, n)
	}
	if !found {
		out = append(out, map[string]any{"type": typ, "status": status, "reason": reason, "message": msg, "lastTransitionTime": now})
	}
	return out
}

func conditionMessage(conds []any, typ string) string {
	for _, x := range conds {
		if m, ok := x.(map[string]any); ok && m["type"] == typ && m["status"] == "True" {
			s, _ := m["message"].(string)
			return s
		}
	}
	return ""
}
