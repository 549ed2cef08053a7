package admission

import (
	"context"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// IngressClassDefaultAnnotation "true" on an IngressClass makes it the
// class of new Ingresses that name none.
const IngressClassDefaultAnnotation = networkingv1.AnnotationIsDefaultIngressClass

// ingressClassAnnotation is the class annotation that came before the
// ingressClassName field; an Ingress carrying it has chosen a class.
const ingressClassAnnotation = "kubernetes.io/ingress.class"

var ingressesResource = schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "ingresses"}

// DefaultIngressClass is kube-apiserver's plugin of that name: a new
// Ingress that names no class (neither ingressClassName nor the old
// kubernetes.io/ingress.class annotation) gets the default IngressClass,
// the newest if several are marked, as upstream since 1.28. Updates are
// left alone, so an Ingress made before any default stays classless.
type DefaultIngressClass struct {
	// IngressClasses lists the cluster's IngressClasses.
	IngressClasses func(ctx context.Context) ([]*networkingv1.IngressClass, error)
}

func (DefaultIngressClass) Name() string              { return "DefaultIngressClass" }
func (DefaultIngressClass) Handles(op Operation) bool { return op == Create }

func (d DefaultIngressClass) Admit(ctx context.Context, a Attributes) error {
	ing, ok := a.GetObject().(*networkingv1.Ingress)
	if !ok || a.GetResource() != ingressesResource || a.GetSubresource() != "" {
		return nil
	}
	if ing.Spec.IngressClassName != nil {
		return nil
	}
	if _, ok := ing.Annotations[ingressClassAnnotation]; ok {
		return nil
	}
	classes, err := d.IngressClasses(ctx)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if name, ok := newestDefault(classes, func(c *networkingv1.IngressClass) bool {
		return c.Annotations[IngressClassDefaultAnnotation] == "true"
	}); ok {
		ing.Spec.IngressClassName = &name
	}
	return nil
}
