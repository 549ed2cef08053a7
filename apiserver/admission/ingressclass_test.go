package admission

import (
	"context"
	"errors"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestDefaultIngressClass(t *testing.T) {
	older := metav1.Now()
	newer := metav1.NewTime(older.Add(1e9))
	class := func(name string, at metav1.Time, isDefault string) *networkingv1.IngressClass {
		c := &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: at}}
		if isDefault != "" {
			c.Annotations = map[string]string{IngressClassDefaultAnnotation: isDefault}
		}
		return c
	}
	strp := func(s string) *string { return &s }
	for _, tc := range []struct {
		name    string
		classes []*networkingv1.IngressClass
		op      Operation
		ing     *networkingv1.Ingress
		want    *string
	}{
		{name: "no default", classes: []*networkingv1.IngressClass{class("a", older, ""), class("b", older, "false")},
			op: Create, ing: &networkingv1.Ingress{}},
		{name: "the default", classes: []*networkingv1.IngressClass{class("a", older, ""), class("bonsai", older, "true")},
			op: Create, ing: &networkingv1.Ingress{}, want: strp("bonsai")},
		{name: "newest of several defaults", classes: []*networkingv1.IngressClass{class("old", older, "true"), class("new", newer, "true")},
			op: Create, ing: &networkingv1.Ingress{}, want: strp("new")},
		{name: "same age: by name", classes: []*networkingv1.IngressClass{class("b", older, "true"), class("a", older, "true")},
			op: Create, ing: &networkingv1.Ingress{}, want: strp("a")},
		{name: "a class named stays", classes: []*networkingv1.IngressClass{class("bonsai", older, "true")},
			op: Create, ing: &networkingv1.Ingress{Spec: networkingv1.IngressSpec{IngressClassName: strp("other")}}, want: strp("other")},
		{name: "an empty class name stays", classes: []*networkingv1.IngressClass{class("bonsai", older, "true")},
			op: Create, ing: &networkingv1.Ingress{Spec: networkingv1.IngressSpec{IngressClassName: strp("")}}, want: strp("")},
		{name: "the old annotation is a choice", classes: []*networkingv1.IngressClass{class("bonsai", older, "true")},
			op: Create, ing: &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"kubernetes.io/ingress.class": "nginx"}}}},
		{name: "updates are left alone", classes: []*networkingv1.IngressClass{class("bonsai", older, "true")},
			op: Update, ing: &networkingv1.Ingress{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultIngressClass{IngressClasses: func(context.Context) ([]*networkingv1.IngressClass, error) { return tc.classes, nil }}
			if err := NewChain(p).Run(context.Background(), &attrs{op: tc.op, gvr: ingressesResource, obj: tc.ing, old: &networkingv1.Ingress{}}, nil); err != nil {
				t.Fatal(err)
			}
			got := tc.ing.Spec.IngressClassName
			if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
				t.Errorf("ingressClassName = %v, want %v", deref(got), deref(tc.want))
			}
		})
	}
	failing := DefaultIngressClass{IngressClasses: func(context.Context) ([]*networkingv1.IngressClass, error) {
		return nil, errors.New("no list")
	}}
	err := NewChain(failing).Run(context.Background(), &attrs{op: Create, gvr: ingressesResource, obj: &networkingv1.Ingress{}}, nil)
	if err == nil || !strings.Contains(err.Error(), "no list") {
		t.Errorf("err = %v, want the list's", err)
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return "\"" + *s + "\""
}
