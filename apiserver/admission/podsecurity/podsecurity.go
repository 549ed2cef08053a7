// Package podsecurity is kube-apiserver's PodSecurity admission plugin:
// the Pod Security Standards (privileged, baseline, restricted) enforced,
// audited and warned about per namespace through the
// pod-security.kubernetes.io/{enforce,audit,warn}[-version] labels, with
// defaults and exemptions from a PodSecurityConfiguration
// (pod-security.admission.config.k8s.io/v1).
//
// The decisions are upstream's own: k8s.io/pod-security-admission's
// Admission (label parsing, exemptions, which updates are evaluated, the
// workload templates, the dry run of a namespace's pods when its enforce
// label tightens) with its policy checks and messages. This package is the
// part kube-apiserver keeps in plugin/pkg/admission/security/podsecurity:
// which requests reach it, and how its answer becomes a Status error,
// Warning headers and audit annotations.
//
// It owns none of the API server's state: namespaces and pods come
// through the NamespaceGetter and PodLister it is given, and it must not
// import the apiserver package.
package podsecurity

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	basemetrics "k8s.io/component-base/metrics"
	psadmission "k8s.io/pod-security-admission/admission"
	admissionapi "k8s.io/pod-security-admission/admission/api"
	"k8s.io/pod-security-admission/admission/api/load"
	"k8s.io/pod-security-admission/admission/api/validation"
	"k8s.io/pod-security-admission/api"
	psametrics "k8s.io/pod-security-admission/metrics"
	"k8s.io/pod-security-admission/policy"
)

// PluginName is the plugin's name in an AdmissionConfiguration.
const PluginName = "PodSecurity"

// LabelPrefix starts the namespace labels the plugin reads (and its audit
// annotations' keys).
const LabelPrefix = "pod-security.kubernetes.io/"

// Configuration is upstream's PodSecurityConfiguration, defaulted.
type Configuration = admissionapi.PodSecurityConfiguration

// NamespaceGetter reads a namespace; only its labels are used.
type NamespaceGetter = psadmission.NamespaceGetter

// PodLister lists the pods of a namespace, for the dry run of a new
// enforce level.
type PodLister = psadmission.PodLister

// LoadConfiguration decodes and checks a PodSecurityConfiguration (any of
// pod-security.admission.config.k8s.io/v1, v1beta1, v1alpha1); no data
// gives upstream's defaults: privileged:latest for all three modes, no
// exemptions.
func LoadConfiguration(data []byte) (*Configuration, error) {
	cfg, err := load.LoadFromData(data)
	if err != nil {
		return nil, err
	}
	if errs := validation.ValidatePodSecurityConfiguration(cfg); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return cfg, nil
}

// Plugin is the PodSecurity admission of one API server.
type Plugin struct {
	delegate *psadmission.Admission
	metrics  basemetrics.KubeRegistry
}

// New builds the plugin over cfg (nil: the defaults). served is the
// Kubernetes minor the server serves, which the metrics compare policy
// versions with ("future" above it), as kube-apiserver's own version.
func New(cfg *Configuration, namespaces NamespaceGetter, pods PodLister, served api.Version) (*Plugin, error) {
	if cfg == nil {
		var err error
		if cfg, err = LoadConfiguration(nil); err != nil {
			return nil, err
		}
	}
	// No emulation version: the checks of the newest policy version
	// this module knows, as kube-apiserver when it emulates no older
	// release.
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		return nil, fmt.Errorf("could not create PodSecurityRegistry: %w", err)
	}
	// A registry per plugin: several servers in one process (tests) must
	// not register the same counters twice.
	recorder := psametrics.NewPrometheusRecorder(served)
	reg := basemetrics.NewKubeRegistry()
	recorder.MustRegister(reg.MustRegister)
	a := &psadmission.Admission{
		Configuration:    cfg,
		Evaluator:        evaluator,
		Metrics:          recorder,
		PodSpecExtractor: psadmission.DefaultPodSpecExtractor{},
		NamespaceGetter:  namespaces,
		PodLister:        pods,
	}
	if err := a.CompleteConfiguration(); err != nil {
		return nil, fmt.Errorf("%s configuration error: %w", PluginName, err)
	}
	if err := a.ValidateConfiguration(); err != nil {
		return nil, fmt.Errorf("%s invalid: %w", PluginName, err)
	}
	return &Plugin{delegate: a, metrics: reg}, nil
}

// Gatherer gives the plugin's metrics (pod_security_evaluations_total,
// pod_security_exemptions_total, pod_security_errors_total).
func (p *Plugin) Gatherer() prometheus.Gatherer { return p.metrics }

var (
	namespacesResource = corev1.Resource("namespaces")
	podsResource       = corev1.Resource("pods")
)

// Handles says whether requests on gr reach the plugin: pods, namespaces
// and the kinds with a pod template (ReplicationController, PodTemplate,
// ReplicaSet, Deployment, StatefulSet, DaemonSet, Job, CronJob).
func (p *Plugin) Handles(gr schema.GroupResource) bool {
	return gr == podsResource || gr == namespacesResource || p.delegate.PodSpecExtractor.HasPodSpec(gr)
}

// Request is one create or update under admission. Objects are the typed
// v1 objects of the resource (a *corev1.Pod for pods and their
// subresources, a *appsv1.Deployment for deployments ...). Namespace is
// the object's, or for a Namespace its own name, as kube-apiserver's
// attributes give it.
type Request struct {
	Operation         admissionv1.Operation
	Resource          schema.GroupVersionResource
	Subresource       string
	Kind              schema.GroupVersionKind
	Namespace, Name   string
	UserName          string
	Object, OldObject runtime.Object
}

// Decision is the plugin's answer: Err (nil when allowed) is the Status
// error to return; Warnings go to the client as Warning headers;
// AuditAnnotations (keys under pod-security.kubernetes.io/) go to the
// request's audit event.
type Decision struct {
	Err              error
	Warnings         []string
	AuditAnnotations map[string]string
}

// Validate admits r as kube-apiserver's PodSecurity plugin does: only
// creates and updates of the handled resources are evaluated.
func (p *Plugin) Validate(ctx context.Context, r *Request) Decision {
	if r.Operation != admissionv1.Create && r.Operation != admissionv1.Update {
		return Decision{}
	}
	if !p.Handles(r.Resource.GroupResource()) {
		return Decision{}
	}
	attrs := &api.AttributesRecord{
		Name: r.Name, Namespace: r.Namespace, Kind: r.Kind, Resource: r.Resource, Subresource: r.Subresource,
		Operation: r.Operation, Object: r.Object, OldObject: r.OldObject, Username: r.UserName,
	}
	res := p.delegate.Validate(ctx, attrs)
	d := Decision{Warnings: res.Warnings}
	if len(res.AuditAnnotations) > 0 {
		d.AuditAnnotations = make(map[string]string, len(res.AuditAnnotations))
		for k, v := range res.AuditAnnotations {
			d.AuditAnnotations[api.AuditAnnotationPrefix+k] = v
		}
	}
	if !res.Allowed {
		// A generic Forbidden, with the message, reason, details and
		// code of upstream's answer when it has them.
		err := apierrors.NewForbidden(r.Resource.GroupResource(), r.Name, errors.New("Not allowed by PodSecurity"))
		if s := res.Result; s != nil {
			if s.Message != "" {
				err.ErrStatus.Message = s.Message
			}
			if s.Reason != "" {
				err.ErrStatus.Reason = s.Reason
			}
			if s.Details != nil {
				err.ErrStatus.Details = s.Details
			}
			if s.Code != 0 {
				err.ErrStatus.Code = s.Code
			}
		}
		d.Err = err
	}
	return d
}
