package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"bonsai.dev/bonsai/testsupport/testenv"
)

// webhookSuite measures what an admission webhook adds to a create: the
// same steady ConfigMap creates with no webhook, with a no-op validating
// webhook called by URL, and with one called through a Service (its
// endpoints read per call), the webhook server (e2e/testdata/webhook)
// running on the host.
func webhookSuite(ctx context.Context, b *bench) ([]Row, error) {
	ops, rate := 400, 50
	if b.quick {
		ops = 150
	}
	var p50, p99 [3]*float64
	rows := func() []Row {
		row := func(name string, v *float64, t *Target) Row {
			return Row{Name: "webhook: " + name, Unit: "ms", Bonsai: v, Target: t}
		}
		diff := func(a, b *float64) *float64 {
			if a == nil || b == nil {
				return nil
			}
			return num(*a - *b)
		}
		return []Row{
			row("create p50, no webhook", p50[0], nil),
			row("create p99, no webhook", p99[0], nil),
			row("create p50, no-op webhook by URL", p50[1], nil),
			row("create p99, no-op webhook by URL", p99[1], nil),
			row("create p50, no-op webhook by Service", p50[2], nil),
			row("round-trip overhead per create p50 (URL)", diff(p50[1], p50[0]), atMost(2, "ms")),
			row("round-trip overhead per create p50 (Service)", diff(p50[2], p50[0]), atMost(2, "ms")),
		}
	}
	bin, err := buildBonsai(ctx, b)
	if err != nil {
		return rows(), err
	}
	cfgFile := filepath.Join(b.dir, "webhook-empty-config.yaml")
	if err := os.WriteFile(cfgFile, nil, 0o600); err != nil {
		return rows(), err
	}
	srv, _, err := startBonsai(ctx, b, bin, cfgFile, filepath.Join(b.dir, "webhook-server"))
	if err != nil {
		return rows(), err
	}
	defer srv.stop()
	whDir := filepath.Join(b.dir, "webhook")
	if err := os.MkdirAll(whDir, 0o700); err != nil {
		return rows(), err
	}
	b.logf("webhook: building and starting the webhook server")
	wh, err := testenv.StartWebhook(whDir, "bench-webhook.default.svc")
	if err != nil {
		return rows(), err
	}
	b.onCleanup(wh.Stop)
	defer wh.Stop()

	ac := &apiClients{kubeconfig: filepath.Join(srv.dir, "kubeconfig.yaml")}
	defer ac.closeAll()
	cs, err := ac.client()
	if err != nil {
		return rows(), err
	}
	if err := webhookService(ctx, cs, wh.Port); err != nil {
		return rows(), err
	}
	cms := cs.CoreV1().ConfigMaps("default")
	v := payload(3, 1000)
	measure := func(prefix string, i int) error {
		// Warm the connections (client and webhook) first.
		for j := 0; j < 20; j++ {
			if _, err := cms.Create(ctx, configMap(fmt.Sprintf("%s-warm-%02d", prefix, j), v), metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		lat, err := steady(ctx, ops, rate, func(j int) error {
			_, err := cms.Create(ctx, configMap(fmt.Sprintf("%s-%04d", prefix, j), v), metav1.CreateOptions{})
			return err
		})
		if err != nil {
			return err
		}
		p50[i], p99[i] = ms(percentile(lat, 0.5)), ms(percentile(lat, 0.99))
		return nil
	}
	hooks := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	for i, cc := range []*admissionregistrationv1.WebhookClientConfig{
		nil,
		{URL: ptr(wh.URL("/allow")), CABundle: wh.CABundle},
		{Service: &admissionregistrationv1.ServiceReference{Namespace: "default", Name: "bench-webhook", Path: ptr("/allow")}, CABundle: wh.CABundle},
	} {
		name := []string{"none", "url", "service"}[i]
		b.logf("webhook: %d creates at %d/s, webhook: %s", ops, rate, name)
		if cc != nil {
			cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "bench"},
				Webhooks: []admissionregistrationv1.ValidatingWebhook{{
					Name: "allow.bench.bonsai.dev", ClientConfig: *cc,
					Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
						Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
					SideEffects:             ptr(admissionregistrationv1.SideEffectClassNone),
					AdmissionReviewVersions: []string{"v1"},
				}}}
			hooks.Delete(ctx, "bench", metav1.DeleteOptions{})
			if _, err := hooks.Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
				return rows(), err
			}
		}
		if err := measure(name, i); err != nil {
			return rows(), fmt.Errorf("creates with webhook %s: %w", name, err)
		}
	}
	return rows(), nil
}

// webhookService makes a selectorless Service whose endpoint is the
// webhook server on the host.
func webhookService(ctx context.Context, cs *kubernetes.Clientset, port int) error {
	_, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "bench-webhook"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(int32(port))}}}}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	_, err = cs.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "bench-webhook-host", Labels: map[string]string{discoveryv1.LabelServiceName: "bench-webhook"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"127.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("https"), Port: ptr(int32(port))}},
	}, metav1.CreateOptions{})
	return err
}

func ptr[T any](v T) *T { return &v }
