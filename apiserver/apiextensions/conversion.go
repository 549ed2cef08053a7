package apiextensions

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// Env is what serving a CRD's versions takes of the API server.
type Env struct {
	// Ctx ends with the server: conversion calls end with it.
	Ctx context.Context
	// Service reads a Service (conversion webhooks named by a Service are
	// called at its cluster IP).
	Service func(ctx context.Context, namespace, name string) (*corev1.Service, error)
}

// webhookConverter converts custom objects between a CRD's versions by
// calling its conversion webhook with a ConversionReview, over HTTPS
// verified with the CRD's caBundle, as upstream's webhook converter does.
type webhookConverter struct {
	env    Env
	crd    string
	gk     schema.GroupKind
	url    string // a URL webhook
	svc    *apiextensionsv1.ServiceReference
	client *http.Client
	// review is the ConversionReview version sent: the first of the CRD's
	// conversionReviewVersions bonsai speaks (v1, then v1beta1).
	review string
}

// conversionTimeout is upstream's fixed timeout for conversion webhooks.
const conversionTimeout = 30 * time.Second

func newWebhookConverter(env Env, crd *apiextensionsv1.CustomResourceDefinition) (*webhookConverter, error) {
	conv := crd.Spec.Conversion
	if conv == nil || conv.Strategy != apiextensionsv1.WebhookConverter || conv.Webhook == nil || conv.Webhook.ClientConfig == nil {
		return nil, nil
	}
	cc := conv.Webhook.ClientConfig
	wc := &webhookConverter{env: env, crd: crd.Name, gk: schema.GroupKind{Group: crd.Spec.Group, Kind: crd.Spec.Names.Kind}, svc: cc.Service}
	if cc.URL != nil {
		wc.url = *cc.URL
	}
	for _, v := range conv.Webhook.ConversionReviewVersions {
		if v == "v1" || v == "v1beta1" {
			wc.review = v
			break
		}
	}
	if wc.review == "" {
		return nil, fmt.Errorf("none of the conversionReviewVersions %v is supported (v1, v1beta1)", conv.Webhook.ConversionReviewVersions)
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(cc.CABundle) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(cc.CABundle) {
			return nil, fmt.Errorf("caBundle of %s holds no PEM certificate", crd.Name)
		}
		tc.RootCAs = pool
	}
	if wc.svc != nil {
		// The certificate names the Service, not the address dialled.
		tc.ServerName = wc.svc.Name + "." + wc.svc.Namespace + ".svc"
	}
	wc.client = &http.Client{Timeout: conversionTimeout, Transport: &http.Transport{TLSClientConfig: tc, Proxy: nil}}
	return wc, nil
}

// endpoint is where the webhook is called: its URL, or its Service's
// cluster IP and port, with the path.
func (c *webhookConverter) endpoint(ctx context.Context) (string, error) {
	if c.svc == nil {
		return c.url, nil
	}
	svc, err := c.env.Service(ctx, c.svc.Namespace, c.svc.Name)
	if err != nil {
		return "", fmt.Errorf("service %s/%s: %w", c.svc.Namespace, c.svc.Name, err)
	}
	if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return "", fmt.Errorf("service %s/%s has no cluster IP", c.svc.Namespace, c.svc.Name)
	}
	port := int32(443)
	if c.svc.Port != nil {
		port = *c.svc.Port
	}
	path := ""
	if c.svc.Path != nil {
		path = *c.svc.Path
	}
	return "https://" + net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(port))) + path, nil
}

// convert asks the webhook for u in version to (a group version string).
func (c *webhookConverter) convert(u *unstructured.Unstructured, to string) (*unstructured.Unstructured, error) {
	out, err := c.convertMany([]*unstructured.Unstructured{u}, to)
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// convertMany converts objects in one ConversionReview, as upstream does
// for a list.
func (c *webhookConverter) convertMany(objs []*unstructured.Unstructured, to string) ([]*unstructured.Unstructured, error) {
	fail := func(err error) ([]*unstructured.Unstructured, error) {
		return nil, fmt.Errorf("conversion webhook for %s failed: %w", schema.FromAPIVersionAndKind(to, c.gk.Kind), err)
	}
	ctx, cancel := context.WithTimeout(c.env.Ctx, conversionTimeout)
	defer cancel()
	url, err := c.endpoint(ctx)
	if err != nil {
		return fail(err)
	}
	raws := make([]runtime.RawExtension, len(objs))
	for i, u := range objs {
		if raws[i].Raw, err = json.Marshal(u.Object); err != nil {
			return fail(err)
		}
	}
	uid := uuid.NewUUID()
	review := apiextensionsv1.ConversionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/" + c.review, Kind: "ConversionReview"},
		Request:  &apiextensionsv1.ConversionRequest{UID: uid, DesiredAPIVersion: to, Objects: raws},
	}
	body, err := json.Marshal(review)
	if err != nil {
		return fail(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return fail(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return fail(err)
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(io.LimitReader(resp.Body, maxConversionResponse))
	if err != nil {
		return fail(err)
	}
	if resp.StatusCode != http.StatusOK {
		return fail(fmt.Errorf("webhook answered %s", resp.Status))
	}
	var out apiextensionsv1.ConversionReview
	if err := json.Unmarshal(rb, &out); err != nil {
		return fail(fmt.Errorf("decoding the ConversionReview: %w", err))
	}
	r := out.Response
	switch {
	case r == nil:
		return fail(fmt.Errorf("no response provided"))
	case r.UID != uid:
		return fail(fmt.Errorf("expected response.uid=%q, got %q", uid, r.UID))
	case r.Result.Status != metav1.StatusSuccess:
		return fail(fmt.Errorf("%s", r.Result.Message))
	case len(r.ConvertedObjects) != len(objs):
		return fail(fmt.Errorf("expected %d converted objects, got %d", len(objs), len(r.ConvertedObjects)))
	}
	converted := make([]*unstructured.Unstructured, len(objs))
	for i, u := range objs {
		conv := &unstructured.Unstructured{}
		if err := conv.UnmarshalJSON(r.ConvertedObjects[i].Raw); err != nil {
			return fail(fmt.Errorf("invalid converted object at index %d: %w", i, err))
		}
		if conv.GetAPIVersion() != to {
			return fail(fmt.Errorf("invalid converted object at index %d: expected apiVersion %q, got %q", i, to, conv.GetAPIVersion()))
		}
		if conv.GetKind() != u.GetKind() {
			return fail(fmt.Errorf("invalid converted object at index %d: expected kind %q, got %q", i, u.GetKind(), conv.GetKind()))
		}
		restoreMeta(conv, u)
		converted[i] = conv
	}
	return converted, nil
}

// maxConversionResponse bounds a ConversionReview answer: a list's worth
// of objects.
const maxConversionResponse = 64 << 20

// restoreMeta keeps the original's metadata in a converted object but for
// labels and annotations, which the webhook may change, as upstream does.
func restoreMeta(conv, orig *unstructured.Unstructured) {
	md, ok := orig.Object["metadata"].(map[string]any)
	if !ok {
		return
	}
	md = runtime.DeepCopyJSONValue(md).(map[string]any)
	if cm, ok := conv.Object["metadata"].(map[string]any); ok {
		for _, k := range []string{"labels", "annotations"} {
			if v, ok := cm[k]; ok {
				md[k] = v
			} else {
				delete(md, k)
			}
		}
	}
	conv.Object["metadata"] = md
}
