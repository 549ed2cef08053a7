package ingress

import (
	"context"
	"fmt"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	networkingclient "k8s.io/client-go/kubernetes/typed/networking/v1"
)

// The IngressClass bonsai creates and the controller name it serves.
const (
	ClassName      = "bonsai"
	ControllerName = "bonsai.dev/ingress"
)

// EnsureClass creates the IngressClass ClassName unless it exists,
// marked the default class unless another class already is: a user's
// default stays the default. An existing class is left as it is, so a
// user may take the mark off it, or change it otherwise.
func EnsureClass(ctx context.Context, c networkingclient.IngressClassesGetter) (created bool, isDefault bool, err error) {
	if _, err := c.IngressClasses().Get(ctx, ClassName, metav1.GetOptions{}); err == nil {
		return false, false, nil
	} else if !apierrors.IsNotFound(err) {
		return false, false, fmt.Errorf("get IngressClass %s: %w", ClassName, err)
	}
	list, err := c.IngressClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, false, fmt.Errorf("list IngressClasses: %w", err)
	}
	isDefault = true
	for _, ic := range list.Items {
		if ic.Annotations[networkingv1.AnnotationIsDefaultIngressClass] == "true" {
			isDefault = false
		}
	}
	ic := &networkingv1.IngressClass{
		ObjectMeta: metav1.ObjectMeta{Name: ClassName, Labels: map[string]string{"app.kubernetes.io/managed-by": "bonsai"}},
		Spec:       networkingv1.IngressClassSpec{Controller: ControllerName},
	}
	if isDefault {
		ic.Annotations = map[string]string{networkingv1.AnnotationIsDefaultIngressClass: "true"}
	}
	_, err = c.IngressClasses().Create(ctx, ic, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return false, false, nil
	}
	if err != nil {
		return false, false, fmt.Errorf("create IngressClass %s: %w", ClassName, err)
	}
	return true, isDefault, nil
}
