package ingress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	networkingclient "k8s.io/client-go/kubernetes/typed/networking/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/netplugin/ingress/routing"
)

// Defaults of the proxy's timeouts, ingress-nginx's: connecting to an
// endpoint, waiting for its response headers, a client's request
// headers, and an idle keep-alive connection of a client.
const (
	DefaultDialTimeout           = 5 * time.Second
	DefaultResponseHeaderTimeout = 60 * time.Second
	DefaultReadHeaderTimeout     = 60 * time.Second
	DefaultIdleTimeout           = 75 * time.Second
)

// maxTries bounds the endpoints a request is tried on when connecting
// fails (ingress-nginx's proxy-next-upstream-tries).
const maxTries = 3

// TLSSecretType is the only type of Secret a TLS entry may name.
const TLSSecretType = corev1.SecretTypeTLS

// Config is what the controller serves and how.
type Config struct {
	// RESTConfig reaches the API server as the controller's user.
	RESTConfig *rest.Config
	// Informers supply what the controller reads; the caller starts
	// them after New.
	Informers *client.Informers
	// NodeName is the node the controller serves on.
	NodeName string
	// Addresses, when set, are what served Ingresses get as
	// status.loadBalancer.ingress (the listeners are bound to one
	// address); otherwise the Node's InternalIPs, or FallbackIPs while
	// the Node has none.
	Addresses, FallbackIPs []netip.Addr
	// HTTP and HTTPS are the listeners served (either may be nil);
	// their ports are what Ingresses are reached on.
	HTTP, HTTPS net.Listener
	// Timeouts, zero for the defaults above.
	DialTimeout, ResponseHeaderTimeout, ReadHeaderTimeout, IdleTimeout time.Duration
	Logger                                                             *slog.Logger
}

// Controller serves Ingresses. New makes one, Run runs it.
type Controller struct {
	cfg  Config
	log  *slog.Logger
	net  networkingclient.NetworkingV1Interface
	core rest.Interface

	ingresses, classes, services, slices, secrets, nodes cache.SharedIndexInformer

	state    atomic.Pointer[state]
	kick     chan struct{}
	built    chan struct{} // closed once the first state is in place
	recorder record.EventRecorder

	// Of the build loop alone.
	warned map[string]string    // Ingress key → the problems last reported
	certs  map[string]certEntry // Secret key → its parsed certificate

	statusMu sync.Mutex
	status   map[string][]networkingv1.IngressLoadBalancerIngress // Ingress key → what its status should be; nil: none of ours
	statusQ  workqueue.TypedRateLimitingInterface[string]

	transport   *upstreamTransport
	proxy       *httputil.ReverseProxy
	defaultCert *tls.Certificate
	servers     []*http.Server
}

// state is one configuration, read by requests, replaced whole.
type state struct {
	table     *routing.Table
	upstreams map[upstreamKey]*upstream
	certs     map[string]*tls.Certificate // by host
	wildCerts map[string]*tls.Certificate // by ".suffix" of a "*.suffix" host
	// Built is when this state was swapped in (for change latency).
	built time.Time
}

// New checks cfg and registers the controller's informers.
func New(cfg Config) (*Controller, error) {
	if cfg.RESTConfig == nil || cfg.Informers == nil {
		return nil, errors.New("ingress: Config.RESTConfig and Config.Informers are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&cfg.DialTimeout, DefaultDialTimeout}, {&cfg.ResponseHeaderTimeout, DefaultResponseHeaderTimeout},
		{&cfg.ReadHeaderTimeout, DefaultReadHeaderTimeout}, {&cfg.IdleTimeout, DefaultIdleTimeout}} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	rc := rest.CopyConfig(cfg.RESTConfig)
	rc.ContentType = "application/vnd.kubernetes.protobuf"
	rc.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	nc, err := networkingclient.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	cs, err := client.NewClientset(rc)
	if err != nil {
		return nil, err
	}
	cert, err := selfSignedCertificate()
	if err != nil {
		return nil, err
	}
	c := &Controller{
		cfg: cfg, log: cfg.Logger.With("component", "ingress"), net: nc, core: cs.Core.RESTClient(),
		kick: make(chan struct{}, 1), built: make(chan struct{}),
		warned: map[string]string{}, certs: map[string]certEntry{},
		status: map[string][]networkingv1.IngressLoadBalancerIngress{},
		statusQ: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "ingress-status"}),
		defaultCert: cert,
	}
	inf := cfg.Informers
	c.ingresses = inf.For(&networkingv1.Ingress{})
	c.classes = inf.For(&networkingv1.IngressClass{})
	c.services = inf.For(&corev1.Service{})
	c.slices = inf.For(&discoveryv1.EndpointSlice{})
	if err := client.IndexSlicesByService(c.slices); err != nil {
		return nil, err
	}
	c.secrets = inf.ForFields(&corev1.Secret{}, fields.OneTermEqualSelector("type", string(TLSSecretType)))
	c.nodes = inf.ForFields(&corev1.Node{}, fields.OneTermEqualSelector("metadata.name", cfg.NodeName))
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.trigger() },
		UpdateFunc: func(any, any) { c.trigger() },
		DeleteFunc: func(any) { c.trigger() },
	}
	for _, i := range []cache.SharedIndexInformer{c.ingresses, c.classes, c.services, c.slices, c.secrets, c.nodes} {
		if _, err := i.AddEventHandler(handler); err != nil {
			return nil, err
		}
	}
	c.transport = newUpstreamTransport(cfg.DialTimeout, cfg.ResponseHeaderTimeout)
	c.proxy = &httputil.ReverseProxy{
		Rewrite:      c.rewrite,
		Transport:    roundTripper{c},
		ErrorHandler: c.proxyError,
		ErrorLog:     slog.NewLogLogger(c.log.Handler(), slog.LevelDebug),
		// Responses stream: ReverseProxy flushes after every write of
		// a response of unknown length or of text/event-stream; one of
		// known length goes out as its buffer fills.
		FlushInterval: 0,
		// Without a pool every response would allocate its own 32 KB
		// copy buffer, which at thousands of requests a second is
		// most of what the garbage collector sees.
		BufferPool: copyBuffers{},
	}
	return c, nil
}

// trigger asks the build loop for a new state; several triggers before
// it runs make one build.
func (c *Controller) trigger() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Run ensures the IngressClass, then builds and serves until ctx ends;
// it returns once the listeners are closed. Requests in flight when ctx
// ends get a few seconds to finish.
func (c *Controller) Run(ctx context.Context) error {
	go c.ensureClass(ctx)
	if !c.cfg.Informers.WaitForCacheSync(ctx) {
		return ctx.Err()
	}
	c.recorder = client.NewRecorder(ctx, c.core, "bonsai-ingress")
	c.build()
	close(c.built)
	go c.buildLoop(ctx)
	go c.statusLoop(ctx)
	go c.transport.sweep(ctx)
	errs := make(chan error, 2)
	for _, l := range []struct {
		ln    net.Listener
		https bool
	}{{c.cfg.HTTP, false}, {c.cfg.HTTPS, true}} {
		if l.ln == nil {
			continue
		}
		srv := c.newServer(l.https)
		c.servers = append(c.servers, srv)
		go func() {
			var err error
			if l.https {
				err = srv.ServeTLS(l.ln, "", "")
			} else {
				err = srv.Serve(l.ln)
			}
			errs <- err
		}()
	}
	c.log.Info("serving Ingresses", "class", ClassName, "controller", ControllerName, "http", addrOf(c.cfg.HTTP), "https", addrOf(c.cfg.HTTPS))
	select {
	case <-ctx.Done():
	case err := <-errs:
		if !errors.Is(err, http.ErrServerClosed) {
			c.shutdown()
			return err
		}
	}
	c.shutdown()
	return nil
}

func addrOf(ln net.Listener) string {
	if ln == nil {
		return "off"
	}
	return ln.Addr().String()
}

func (c *Controller) shutdown() {
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range c.servers {
		if err := s.Shutdown(sctx); err != nil {
			s.Close()
		}
	}
	c.transport.closeIdle(true)
}

func (c *Controller) newServer(https bool) *http.Server {
	srv := &http.Server{
		Handler:           c,
		ReadHeaderTimeout: c.cfg.ReadHeaderTimeout,
		IdleTimeout:       c.cfg.IdleTimeout,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          slog.NewLogLogger(c.log.Handler(), slog.LevelDebug),
	}
	if https {
		srv.TLSConfig = &tls.Config{
			MinVersion:     tls.VersionTLS12,
			GetCertificate: c.certificate,
			NextProtos:     []string{"h2", "http/1.1"},
		}
	}
	return srv
}

// ensureClass creates the IngressClass, retrying while the API is not
// there yet.
func (c *Controller) ensureClass(ctx context.Context) {
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 10*time.Second) {
		created, isDefault, err := EnsureClass(ctx, c.net)
		if err == nil {
			if created {
				c.log.Info("created the IngressClass", "name", ClassName, "controller", ControllerName, "default", isDefault)
			}
			return
		}
		c.log.Warn("IngressClass not created yet", "name", ClassName, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

// buildLoop rebuilds the state on every trigger. A short wait after a
// trigger lets a burst of events (a Deployment's endpoints) make one
// build; changes still apply within a few milliseconds.
func (c *Controller) buildLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.kick:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Millisecond):
		}
		c.build()
	}
}

// Built is closed once the first configuration serves.
func (c *Controller) Built() <-chan struct{} { return c.built }

// ---- which Ingresses are ours

// classView is what the IngressClasses say about serving.
type classView struct {
	ours         map[string]bool // class names of our controller
	defaultClass string          // the newest default class, "" if none
}

func (c *Controller) classView() classView {
	v := classView{ours: map[string]bool{}}
	var defaults []*networkingv1.IngressClass
	for _, o := range c.classes.GetStore().List() {
		ic := o.(*networkingv1.IngressClass)
		if ic.Spec.Controller == ControllerName {
			v.ours[ic.Name] = true
		}
		if ic.Annotations[networkingv1.AnnotationIsDefaultIngressClass] == "true" {
			defaults = append(defaults, ic)
		}
	}
	// As the DefaultIngressClass admission picks among several.
	sort.Slice(defaults, func(i, j int) bool {
		ti, tj := defaults[i].CreationTimestamp, defaults[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return tj.Before(&ti)
		}
		return defaults[i].Name < defaults[j].Name
	})
	if len(defaults) > 0 {
		v.defaultClass = defaults[0].Name
	}
	return v
}

// serves reports whether ing is the controller's: its class is one of
// ours (by ingressClassName, or the old annotation naming our class), or
// it names none while there is no default class or ours is it.
func (v classView) serves(ing *networkingv1.Ingress) bool {
	if ing.Spec.IngressClassName != nil {
		return v.ours[*ing.Spec.IngressClassName]
	}
	if a, ok := ing.Annotations["kubernetes.io/ingress.class"]; ok {
		return a == ClassName
	}
	return v.defaultClass == "" || v.ours[v.defaultClass]
}

// ---- building a state

// problem is something wrong with an Ingress, reported as a Warning.
type problem struct{ reason, msg string }

func (c *Controller) build() {
	view := c.classView()
	var served []*networkingv1.Ingress
	all := c.ingresses.GetStore().List()
	for _, o := range all {
		ing := o.(*networkingv1.Ingress)
		if ing.DeletionTimestamp == nil && view.serves(ing) {
			served = append(served, ing)
		}
	}
	sortByAge(served)
	st := &state{
		table:     routing.New(served),
		upstreams: map[upstreamKey]*upstream{},
		certs:     map[string]*tls.Certificate{},
		wildCerts: map[string]*tls.Certificate{},
	}
	old := c.state.Load()
	problems := map[string][]problem{}
	usedSecrets := map[string]bool{}
	for _, ing := range served {
		key := ing.Namespace + "/" + ing.Name
		var probs []problem
		for _, b := range backendsOf(ing) {
			if b.Resource != nil {
				probs = append(probs, problem{"UnsupportedBackend", fmt.Sprintf("backend %s: resource backends are not served by %s; requests to it get 503", resourceName(b.Resource), ControllerName)})
				continue
			}
			if b.Service == nil {
				continue
			}
			uk := upstreamKey{ns: ing.Namespace, svc: b.Service.Name, portName: b.Service.Port.Name, portNumber: b.Service.Port.Number}
			up := st.upstreams[uk]
			if up == nil {
				up = c.resolve(uk)
				if old != nil && old.upstreams[uk] != nil {
					up.next = old.upstreams[uk].next // round robin goes on
				}
				st.upstreams[uk] = up
			}
			if up.problem != nil {
				probs = append(probs, *up.problem)
			}
		}
		probs = append(probs, c.addCerts(st, ing, usedSecrets)...)
		problems[key] = dedupe(probs)
	}
	for k := range c.certs {
		if !usedSecrets[k] {
			delete(c.certs, k)
		}
	}
	st.built = time.Now()
	c.state.Store(st)
	c.report(served, problems)
	c.setStatuses(all, view)
}

func sortByAge(ings []*networkingv1.Ingress) {
	sort.SliceStable(ings, func(i, j int) bool {
		a, b := ings[i], ings[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
	})
}

func backendsOf(ing *networkingv1.Ingress) []*networkingv1.IngressBackend {
	var out []*networkingv1.IngressBackend
	if ing.Spec.DefaultBackend != nil {
		out = append(out, ing.Spec.DefaultBackend)
	}
	for i := range ing.Spec.Rules {
		if h := ing.Spec.Rules[i].HTTP; h != nil {
			for j := range h.Paths {
				out = append(out, &h.Paths[j].Backend)
			}
		}
	}
	return out
}

func resourceName(r *corev1.TypedLocalObjectReference) string {
	g := ""
	if r.APIGroup != nil && *r.APIGroup != "" {
		g = "." + *r.APIGroup
	}
	return r.Kind + g + " " + r.Name
}

func dedupe(ps []problem) []problem {
	seen := map[problem]bool{}
	out := ps[:0]
	for _, p := range ps {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// report sends a Warning event for each problem of an Ingress when its
// problems change (or the Ingress does): a bad Ingress is told once, not
// on every rebuild.
func (c *Controller) report(served []*networkingv1.Ingress, problems map[string][]problem) {
	seen := map[string]bool{}
	for _, ing := range served {
		key := ing.Namespace + "/" + ing.Name
		seen[key] = true
		var b strings.Builder
		fmt.Fprintf(&b, "%s/%d", ing.UID, ing.Generation)
		for _, p := range problems[key] {
			b.WriteString("\n" + p.reason + ": " + p.msg)
		}
		if c.warned[key] == b.String() {
			continue
		}
		c.warned[key] = b.String()
		for _, p := range problems[key] {
			c.log.Warn("Ingress not fully served", "ingress", key, "reason", p.reason, "problem", p.msg)
			if c.recorder != nil {
				c.recorder.Event(ing, corev1.EventTypeWarning, p.reason, p.msg)
			}
		}
	}
	for k := range c.warned {
		if !seen[k] {
			delete(c.warned, k)
		}
	}
}

// ---- status

// addresses are the served Ingresses' status.loadBalancer.ingress.
func (c *Controller) addresses() []networkingv1.IngressLoadBalancerIngress {
	ips := slices.Clone(c.cfg.Addresses)
	if len(ips) == 0 {
		if o, ok, _ := c.nodes.GetStore().GetByKey(c.cfg.NodeName); ok {
			for _, a := range o.(*corev1.Node).Status.Addresses {
				if a.Type != corev1.NodeInternalIP {
					continue
				}
				if ip, err := netip.ParseAddr(a.Address); err == nil {
					ips = append(ips, ip)
				}
			}
		}
	}
	if len(ips) == 0 {
		ips = slices.Clone(c.cfg.FallbackIPs)
	}
	slices.SortFunc(ips, func(a, b netip.Addr) int { return a.Compare(b) })
	ips = slices.Compact(ips)
	out := make([]networkingv1.IngressLoadBalancerIngress, 0, len(ips))
	for _, ip := range ips {
		out = append(out, networkingv1.IngressLoadBalancerIngress{IP: ip.String()})
	}
	return out
}

// setStatuses queues the Ingresses whose status is not what it should
// be: our addresses for those served, none of ours for the others (an
// Ingress moved to another class loses what we gave it, nothing else).
func (c *Controller) setStatuses(all []any, view classView) {
	want := c.addresses()
	c.statusMu.Lock()
	defer c.statusMu.Unlock()
	clear(c.status)
	for _, o := range all {
		ing := o.(*networkingv1.Ingress)
		key := ing.Namespace + "/" + ing.Name
		have := ing.Status.LoadBalancer.Ingress
		switch {
		case ing.DeletionTimestamp != nil:
		case view.serves(ing):
			if len(want) > 0 && !equality.Semantic.DeepEqual(have, want) {
				c.status[key] = want
				c.statusQ.Add(key)
			}
		case len(have) > 0 && equality.Semantic.DeepEqual(have, want):
			c.status[key] = nil
			c.statusQ.Add(key)
		}
	}
}

func (c *Controller) statusLoop(ctx context.Context) {
	go func() {
		<-ctx.Done()
		c.statusQ.ShutDown()
	}()
	for {
		key, quit := c.statusQ.Get()
		if quit {
			return
		}
		if err := c.syncStatus(ctx, key); err != nil {
			c.log.Error("update Ingress status", "ingress", key, "err", err)
			c.statusQ.AddRateLimited(key)
		} else {
			c.statusQ.Forget(key)
		}
		c.statusQ.Done(key)
	}
}

func (c *Controller) syncStatus(ctx context.Context, key string) error {
	c.statusMu.Lock()
	want, ok := c.status[key]
	c.statusMu.Unlock()
	if !ok {
		return nil // settled since
	}
	o, exists, err := c.ingresses.GetStore().GetByKey(key)
	if err != nil || !exists {
		return err
	}
	ing := o.(*networkingv1.Ingress)
	if equality.Semantic.DeepEqual(ing.Status.LoadBalancer.Ingress, want) {
		return nil
	}
	update := ing.DeepCopy()
	update.Status.LoadBalancer.Ingress = want
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = c.net.Ingresses(ing.Namespace).UpdateStatus(ctx, update, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // the informer brings the newer object, and a build
	}
	return err
}
