// Package clusterroleaggregation fills the rules of every ClusterRole
// that has an aggregationRule with the rules of the ClusterRoles its
// selectors match, as kube-controller-manager's clusterrole-aggregation
// controller does: that is how admin, edit and view pick up what other
// roles (for example a CRD's) label as theirs.
//
// It writes only the rules of aggregated ClusterRoles; it never changes
// a role without an aggregationRule.
package clusterroleaggregation

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sort"

	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"bonsai.dev/bonsai/client"
	"bonsai.dev/bonsai/controllers/worker"
)

// Config is what the controller needs.
type Config struct {
	RESTConfig *rest.Config
	Informers  *client.Informers
	Logger     *slog.Logger
}

// Controller is the clusterrole-aggregation controller.
type Controller struct {
	cfg   Config
	rbac  rest.Interface
	roles cache.SharedIndexInformer
	queue workqueue.TypedRateLimitingInterface[string]
}

// New builds the controller and registers its handlers.
func New(cfg Config) (*Controller, error) {
	if cfg.RESTConfig == nil || cfg.Informers == nil {
		return nil, fmt.Errorf("clusterrole-aggregation controller: RESTConfig and Informers are required")
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	rc, err := client.REST(cfg.RESTConfig, "/apis", rbacv1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	c := &Controller{
		cfg: cfg, rbac: rc,
		roles: cfg.Informers.For(&rbacv1.ClusterRole{}),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "clusterrole_aggregation"}),
	}
	// Any role may be picked up by any selector: a change to one
	// re-syncs every aggregated role.
	enqueueAll := func(any) {
		for _, obj := range c.roles.GetStore().List() {
			if r := obj.(*rbacv1.ClusterRole); r.AggregationRule != nil {
				c.queue.Add(r.Name)
			}
		}
	}
	if _, err := c.roles.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueueAll,
		UpdateFunc: func(_, obj any) { enqueueAll(obj) },
		DeleteFunc: enqueueAll,
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// Run works until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	worker.Run(ctx, c.queue, 1, c.sync, c.cfg.Logger, "clusterrole", c.roles.HasSynced)
	return nil
}

func (c *Controller) sync(ctx context.Context, name string) error {
	obj, ok, err := c.roles.GetStore().GetByKey(name)
	if err != nil || !ok {
		return err
	}
	role := obj.(*rbacv1.ClusterRole)
	if role.AggregationRule == nil {
		return nil
	}
	var selectors []labels.Selector
	for i := range role.AggregationRule.ClusterRoleSelectors {
		sel, err := metav1.LabelSelectorAsSelector(&role.AggregationRule.ClusterRoleSelectors[i])
		if err != nil {
			return nil // validation refuses these; nothing to do
		}
		selectors = append(selectors, sel)
	}
	var sources []*rbacv1.ClusterRole
	for _, o := range c.roles.GetStore().List() {
		r := o.(*rbacv1.ClusterRole)
		if r.Name == role.Name {
			continue
		}
		for _, sel := range selectors {
			if sel.Matches(labels.Set(r.Labels)) {
				sources = append(sources, r)
				break
			}
		}
	}
	sort.Slice(sources, func(i, j int) bool { return sources[i].Name < sources[j].Name })
	rules := []rbacv1.PolicyRule{}
	for _, src := range sources {
		for _, rule := range src.Rules {
			if !hasRule(rules, rule) {
				rules = append(rules, rule)
			}
		}
	}
	if apiequality.Semantic.DeepEqual(rules, role.Rules) || (len(rules) == 0 && len(role.Rules) == 0) {
		return nil
	}
	updated := role.DeepCopy()
	updated.Rules = rules
	err = c.rbac.Put().Resource("clusterroles").Name(role.Name).Body(updated).Do(ctx).Error()
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func hasRule(rules []rbacv1.PolicyRule, r rbacv1.PolicyRule) bool {
	for _, x := range rules {
		if apiequality.Semantic.DeepEqual(x, r) {
			return true
		}
	}
	return false
}
