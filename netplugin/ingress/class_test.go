package ingress

import (
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/testsupport/clustertest"
)

func TestEnsureClassKeepsAUsersDefault(t *testing.T) {
	e := clustertest.New(t, clustertest.Options{})
	cs := kubernetes.NewForConfigOrDie(e.ConfigFor(&authn.User{Name: "admin", Groups: []string{"system:masters", authn.GroupAuthenticated}}))
	ctx := t.Context()
	users := &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: "nginx-example",
		Annotations: map[string]string{networkingv1.AnnotationIsDefaultIngressClass: "true"}},
		Spec: networkingv1.IngressClassSpec{Controller: "k8s.io/ingress-nginx"}}
	if _, err := cs.NetworkingV1().IngressClasses().Create(ctx, users, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	created, isDefault, err := EnsureClass(ctx, cs.NetworkingV1())
	if err != nil || !created || isDefault {
		t.Fatalf("EnsureClass: created %v, default %v, %v; want created, not default", created, isDefault, err)
	}
	ic, err := cs.NetworkingV1().IngressClasses().Get(ctx, ClassName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ic.Annotations[networkingv1.AnnotationIsDefaultIngressClass]; ok || ic.Spec.Controller != ControllerName {
		t.Errorf("class %+v", ic)
	}
	// A user takes the mark off bonsai's class: a restart leaves it so.
	if created, _, err := EnsureClass(ctx, cs.NetworkingV1()); err != nil || created {
		t.Errorf("second EnsureClass: created %v, %v", created, err)
	}
	// New Ingresses get the user's default.
	ing, err := cs.NetworkingV1().Ingresses("default").Create(ctx, &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "i"},
		Spec: networkingv1.IngressSpec{DefaultBackend: &networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "s", Port: port80}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ing.Spec.IngressClassName == nil || *ing.Spec.IngressClassName != "nginx-example" {
		t.Errorf("ingressClassName %v, want nginx-example", ing.Spec.IngressClassName)
	}
}

func TestServes(t *testing.T) {
	name := func(s string) *string { return &s }
	ing := func(class *string, annotation string) *networkingv1.Ingress {
		i := &networkingv1.Ingress{Spec: networkingv1.IngressSpec{IngressClassName: class}}
		if annotation != "" {
			i.Annotations = map[string]string{"kubernetes.io/ingress.class": annotation}
		}
		return i
	}
	ours := map[string]bool{"bonsai": true, "bonsai-internal": true}
	for _, c := range []struct {
		what string
		def  string
		ing  *networkingv1.Ingress
		want bool
	}{
		{"our class", "", ing(name("bonsai"), ""), true},
		{"another class of our controller", "nginx", ing(name("bonsai-internal"), ""), true},
		{"another controller's class", "bonsai", ing(name("nginx"), ""), false},
		{"a class that does not exist", "", ing(name("missing"), ""), false},
		{"the old annotation naming ours", "nginx", ing(nil, "bonsai"), true},
		{"the old annotation naming another", "bonsai", ing(nil, "nginx"), false},
		{"no class, no default", "", ing(nil, ""), true},
		{"no class, ours the default", "bonsai", ing(nil, ""), true},
		{"no class, another default", "nginx", ing(nil, ""), false},
	} {
		if got := (classView{ours: ours, defaultClass: c.def}).serves(c.ing); got != c.want {
			t.Errorf("%s: serves = %v", c.what, got)
		}
	}
}
