package serviceaccount

import (
	"bonsai.dev/bonsai/controllers/kit"
	"bonsai.dev/bonsai/controllers/worker"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// The ConfigMap the root CA publisher keeps, as upstream names it.
const (
	RootCACertConfigMapName = "kube-root-ca.crt"
	rootCAKey               = "ca.crt"
	DescriptionAnnotation   = "kubernetes.io/description"
	Description             = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. " +
		"No other usage is guaranteed across distributions of Kubernetes clusters."
)

// RootCAPublisher is the root-ca-cert-publisher controller.
type RootCAPublisher struct {
	cfg      Config
	nsInf    cache.SharedIndexInformer
	cmInf    cache.SharedIndexInformer
	cmLister corelisters.ConfigMapLister
	queue    workqueue.TypedRateLimitingInterface[string]
	log      *slog.Logger
}

// NewRootCAPublisher builds the publisher of cfg.RootCA; Run starts it.
func NewRootCAPublisher(cfg Config) (*RootCAPublisher, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if len(cfg.RootCA) == 0 {
		return nil, errors.New("root-ca-cert-publisher: no root CA to publish")
	}
	p := &RootCAPublisher{
		cfg:   cfg,
		nsInf: cfg.Informers.For(&corev1.Namespace{}),
		// Only the CA ConfigMaps: the API server filters, so ConfigMaps
		// at large are neither cached nor decoded here.
		cmInf: cfg.Informers.ForFields(&corev1.ConfigMap{}, fields.OneTermEqualSelector("metadata.name", RootCACertConfigMapName)),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "root_ca_cert_publisher"}),
		log: cfg.Logger,
	}
	p.cmLister = corelisters.NewConfigMapLister(p.cmInf.GetIndexer())
	if _, err := p.cmInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, cur any) { p.enqueueConfigMap(cur) },
		DeleteFunc: p.enqueueConfigMap,
	}); err != nil {
		return nil, err
	}
	if _, err := p.nsInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if ns, ok := kit.Unwrap[*corev1.Namespace](obj); ok {
				p.queue.Add(ns.Name)
			}
		},
		UpdateFunc: func(_, cur any) {
			if ns, ok := kit.Unwrap[*corev1.Namespace](cur); ok && ns.Status.Phase == corev1.NamespaceActive {
				p.queue.Add(ns.Name)
			}
		},
	}); err != nil {
		return nil, err
	}
	return p, nil
}

// enqueueConfigMap looks again at a namespace whose CA ConfigMap was
// changed or deleted.
func (p *RootCAPublisher) enqueueConfigMap(obj any) {
	if cm, ok := kit.Unwrap[*corev1.ConfigMap](obj); ok && cm.Name == RootCACertConfigMapName {
		p.queue.Add(cm.Namespace)
	}
}

// Run works until ctx ends.
func (p *RootCAPublisher) Run(ctx context.Context) error {
	worker.Run(ctx, p.queue, p.cfg.Workers, p.sync, p.log, "namespace", p.nsInf.HasSynced, p.cmInf.HasSynced)
	return nil
}

// sync creates the namespace's CA ConfigMap, or puts its data and
// description back.
func (p *RootCAPublisher) sync(ctx context.Context, ns string) error {
	want := map[string]string{rootCAKey: string(p.cfg.RootCA)}
	cm, err := p.cmLister.ConfigMaps(ns).Get(RootCACertConfigMapName)
	switch {
	case apierrors.IsNotFound(err):
		cm = &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: RootCACertConfigMapName, Annotations: map[string]string{DescriptionAnnotation: Description}},
			Data:       want,
		}
		_, err := p.cfg.Client.Core.ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
		// A namespace that is gone or going needs no CA.
		if err == nil || apierrors.IsNotFound(err) || apierrors.IsAlreadyExists(err) || apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			return nil
		}
		return fmt.Errorf("create %s/%s: %w", ns, RootCACertConfigMapName, err)
	case err != nil:
		return err
	}
	if maps.Equal(cm.Data, want) && cm.Annotations[DescriptionAnnotation] != "" {
		return nil
	}
	// The informer's copy is shared: change a copy.
	cm = cm.DeepCopy()
	cm.Data = want
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[DescriptionAnnotation] = Description
	if _, err := p.cfg.Client.Core.ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("update %s/%s: %w", ns, RootCACertConfigMapName, err)
	}
	return nil
}
