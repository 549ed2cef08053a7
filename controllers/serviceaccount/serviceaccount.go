// Package serviceaccount holds the two controllers that give every
// namespace what its pods need to reach the API: the serviceaccount
// controller, which keeps a "default" ServiceAccount in each active
// namespace, and the root CA publisher, which keeps the cluster CA in
// each namespace's "kube-root-ca.crt" ConfigMap, as
// kube-controller-manager's serviceaccount and root-ca-cert-publisher
// controllers do.
//
// They own those ServiceAccounts' existence and those ConfigMaps' data
// and description annotation, nothing else: a default account an admin
// changed is left as it is, and neither touches Terminating namespaces.
package serviceaccount

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/kit"
	"bonsai.dev/bonsai/controllers/worker"
)

// DefaultServiceAccountName is the account every namespace gets.
const DefaultServiceAccountName = "default"

// Config is what the controllers are built from.
type Config struct {
	Client    *client.Clientset
	Informers *client.Informers
	Logger    *slog.Logger
	// RootCA is the PEM bundle the root CA publisher writes: the CA that
	// signs the API server's serving certificate.
	RootCA []byte
	// Workers sync namespaces in parallel (default 1, as upstream runs
	// both controllers).
	Workers int
}

// Controller is the serviceaccount controller.
type Controller struct {
	cfg      Config
	nsInf    cache.SharedIndexInformer
	saInf    cache.SharedIndexInformer
	nsLister corelisters.NamespaceLister
	saLister corelisters.ServiceAccountLister
	queue    workqueue.TypedRateLimitingInterface[string]
	log      *slog.Logger
}

// New builds the serviceaccount controller; Run starts it.
func New(cfg Config) (*Controller, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	c := &Controller{
		cfg:   cfg,
		nsInf: cfg.Informers.For(&corev1.Namespace{}),
		saInf: cfg.Informers.For(&corev1.ServiceAccount{}),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "serviceaccount"}),
		log: cfg.Logger,
	}
	c.nsLister = corelisters.NewNamespaceLister(c.nsInf.GetIndexer())
	c.saLister = corelisters.NewServiceAccountLister(c.saInf.GetIndexer())
	// A deleted default account is made again; any namespace event may
	// be the one that makes it active.
	if _, err := c.saInf.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		if sa, ok := kit.Unwrap[*corev1.ServiceAccount](obj); ok && sa.Name == DefaultServiceAccountName {
			c.queue.Add(sa.Namespace)
		}
	}}); err != nil {
		return nil, err
	}
	if _, err := c.nsInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueueNamespace,
		UpdateFunc: func(_, cur any) { c.enqueueNamespace(cur) },
	}); err != nil {
		return nil, err
	}
	return c, nil
}

func (cfg *Config) check() error {
	if cfg.Client == nil || cfg.Informers == nil {
		return errors.New("serviceaccount: Client and Informers are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 1
	}
	return nil
}

func (c *Controller) enqueueNamespace(obj any) {
	if ns, ok := kit.Unwrap[*corev1.Namespace](obj); ok {
		c.queue.Add(ns.Name)
	}
}

// Run works until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	worker.Run(ctx, c.queue, c.cfg.Workers, c.sync, c.log, "namespace", c.nsInf.HasSynced, c.saInf.HasSynced)
	return nil
}

// sync makes the default account of an active namespace.
func (c *Controller) sync(ctx context.Context, name string) error {
	ns, err := c.nsLister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if ns.Status.Phase != corev1.NamespaceActive || ns.DeletionTimestamp != nil {
		return nil
	}
	if _, err := c.saLister.ServiceAccounts(name).Get(DefaultServiceAccountName); err == nil {
		return nil
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: DefaultServiceAccountName}}
	_, err = c.cfg.Client.Core.ServiceAccounts(name).Create(ctx, sa, metav1.CreateOptions{})
	switch {
	case err == nil, apierrors.IsAlreadyExists(err):
		return nil
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause), apierrors.IsNotFound(err):
		// The namespace went away meanwhile: nothing to make.
		return nil
	}
	return fmt.Errorf("create default service account in %s: %w", name, err)
}
