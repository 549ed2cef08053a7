package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"bonsai.dev/bonsai/apiserver/authn"
)

// Token lifetimes, as kube-apiserver's defaults and validation have them.
const (
	defaultTokenExpirationSeconds = 3600
	minTokenExpirationSeconds     = 10 * 60
	maxTokenExpirationSeconds     = 1 << 32
	// legacyTokenExpirationSeconds is what the ServiceAccount admission
	// asks for in the projected volume it adds. A pod-bound token of that
	// lifetime for the API server is issued for a year instead, with a
	// "warnafter" at the asked expiry, so clients that never re-read the
	// file keep working while their staleness shows.
	legacyTokenExpirationSeconds = 3607
	extendedTokenExpiration      = 365 * 24 * time.Hour
)

var tokenRequestKind = schema.GroupKind{Group: "authentication.k8s.io", Kind: "TokenRequest"}

// createToken serves serviceaccounts/token (TokenRequest), as
// kube-apiserver's TokenREST does: a JWT for the account, bound to a pod,
// a secret or a node when asked, for the asked audiences (default the API
// server's) and lifetime.
func (s *Server) createToken(w http.ResponseWriter, r *http.Request, ri requestInfo, res *resource) error {
	format, err := negotiate(r, res, false)
	if err != nil {
		return err
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	req := &authenticationv1.TokenRequest{}
	if err := decodeRequest(nil, r, body, req, validationIgnore); err != nil {
		return err
	}
	// Admission sees the TokenRequest (kind authentication.k8s.io/v1
	// TokenRequest, resource serviceaccounts, subresource token,
	// operation CREATE), as kube-apiserver sends it.
	adm, _, err := s.admitSubresourceCreate(r, res, ri, authenticationv1.SchemeGroupVersion.WithKind("TokenRequest"), req)
	if err != nil {
		return err
	}
	ctx := r.Context()
	if req.Name != "" && req.Name != ri.name {
		return apierrors.NewInvalid(tokenRequestKind, ri.name, field.ErrorList{field.Invalid(field.NewPath("metadata", "name"), req.Name, "must match the service account name if specified")})
	}
	if req.Namespace != "" && req.Namespace != ri.namespace {
		return apierrors.NewInvalid(tokenRequestKind, ri.name, field.ErrorList{field.Invalid(field.NewPath("metadata", "namespace"), req.Namespace, "must match the service account namespace if specified")})
	}
	obj, _, err := s.getObject(ctx, res, ri.namespace, ri.name)
	if err != nil {
		return err
	}
	sa := obj.(*corev1.ServiceAccount)
	if len(req.Spec.Audiences) == 0 {
		req.Spec.Audiences = s.apiAudiences()
	}
	if req.Spec.ExpirationSeconds == nil {
		req.Spec.ExpirationSeconds = ptrTo[int64](defaultTokenExpirationSeconds)
	}
	req.Name, req.Namespace = sa.Name, sa.Namespace
	// Taken before the token is built, so that the expiry in the status
	// is never later than the token's own.
	now := time.Now()
	req.CreationTimestamp = metav1.NewTime(now)
	req.Status = authenticationv1.TokenRequestStatus{}
	if errs := validateTokenRequest(req); len(errs) > 0 {
		return apierrors.NewInvalid(tokenRequestKind, "", errs)
	}
	if err := s.admitNodeToken(ctx, qualified(res), ri.namespace, ri.name, req.Spec.BoundObjectRef); err != nil {
		return err
	}
	if err := adm.validate(ctx); err != nil {
		return err
	}
	binding, err := s.tokenBinding(ctx, ri.namespace, ri.name, req.Spec.BoundObjectRef)
	if err != nil {
		return err
	}
	exp := time.Duration(*req.Spec.ExpirationSeconds) * time.Second
	var warnAfter time.Duration
	if binding.Pod != nil && *req.Spec.ExpirationSeconds == legacyTokenExpirationSeconds && s.forAPIServer(req.Spec.Audiences) {
		warnAfter, exp = exp, extendedTokenExpiration
	}
	// dryRun is not looked at: kube-apiserver issues the token anyway,
	// nothing being stored either way.
	if req.Status.Token, err = s.saSigner.Issue(sa, binding, req.Spec.Audiences, now, exp, warnAfter); err != nil {
		return apierrors.NewInternalError(fmt.Errorf("failed to generate token: %v", err))
	}
	req.Status.ExpirationTimestamp = metav1.NewTime(now.Add(time.Duration(*req.Spec.ExpirationSeconds) * time.Second))
	req.SetGroupVersionKind(authenticationv1.SchemeGroupVersion.WithKind("TokenRequest"))
	writeObject(w, http.StatusCreated, req, format)
	return nil
}

// forAPIServer: every audience is one of the API server's.
func (s *Server) forAPIServer(audiences []string) bool {
	for _, a := range audiences {
		if !slices.Contains(s.apiAudiences(), a) {
			return false
		}
	}
	return true
}

func validateTokenRequest(req *authenticationv1.TokenRequest) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("spec", "expirationSeconds")
	switch exp := *req.Spec.ExpirationSeconds; {
	case exp < minTokenExpirationSeconds:
		errs = append(errs, field.Invalid(p, exp, "may not specify a duration less than 10 minutes"))
	case exp > maxTokenExpirationSeconds:
		errs = append(errs, field.Invalid(p, exp, "may not specify a duration larger than 2^32 seconds"))
	}
	return errs
}

// tokenBinding resolves spec.boundObjectRef: the pod (which must run as
// the account) with its node, the secret or the node, with the uid
// checked when the reference gives one.
func (s *Server) tokenBinding(ctx context.Context, namespace, saName string, ref *authenticationv1.BoundObjectReference) (authn.TokenBinding, error) {
	var b authn.TokenBinding
	if ref == nil {
		return b, nil
	}
	var uid types.UID
	gvk := schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind)
	switch {
	case gvk.Group == "" && gvk.Kind == "Pod":
		obj, _, err := s.getObject(ctx, s.reg.byGVR[gvr("", "v1", "pods")], namespace, ref.Name)
		if err != nil {
			return b, err
		}
		b.Pod = obj.(*corev1.Pod)
		if b.Pod.Spec.ServiceAccountName != saName {
			return b, apierrors.NewBadRequest(fmt.Sprintf("cannot bind token for serviceaccount %q to pod running with different serviceaccount name.", saName))
		}
		uid = b.Pod.UID
		if b.Pod.Spec.NodeName != "" {
			// A pod's node that is gone still names itself in the
			// token, without a uid.
			node, _, err := s.getObject(ctx, s.reg.byGVR[gvr("", "v1", "nodes")], "", b.Pod.Spec.NodeName)
			switch {
			case apierrors.IsNotFound(err):
				b.Node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: b.Pod.Spec.NodeName}}
			case err != nil:
				return b, err
			default:
				b.Node = node.(*corev1.Node)
			}
		}
	case gvk.Group == "" && gvk.Kind == "Secret":
		obj, _, err := s.getObject(ctx, s.reg.byGVR[gvr("", "v1", "secrets")], namespace, ref.Name)
		if err != nil {
			return b, err
		}
		b.Secret = obj.(*corev1.Secret)
		uid = b.Secret.UID
	case gvk.Group == "" && gvk.Kind == "Node":
		obj, _, err := s.getObject(ctx, s.reg.byGVR[gvr("", "v1", "nodes")], "", ref.Name)
		if err != nil {
			return b, err
		}
		b.Node = obj.(*corev1.Node)
		uid = b.Node.UID
	default:
		return b, apierrors.NewBadRequest(fmt.Sprintf("cannot bind token to object of type %s", gvk.String()))
	}
	if ref.UID != "" && ref.UID != uid {
		return b, apierrors.NewConflict(schema.GroupResource{Group: gvk.Group, Resource: gvk.Kind}, ref.Name,
			fmt.Errorf("the UID in the bound object reference (%s) does not match the UID in record. The object might have been deleted and then recreated", ref.UID))
	}
	return b, nil
}

// storeObjects is how the service-account authenticator reads the
// accounts, pods, secrets and nodes tokens name: straight from the store, so a
// deletion takes effect on the next request.
type storeObjects struct{ s *Server }

func (g storeObjects) get(res, namespace, name string) (any, error) {
	ctx, cancel := context.WithTimeout(g.s.ctx, 10*time.Second)
	defer cancel()
	obj, _, err := g.s.getObject(ctx, g.s.reg.byGVR[gvr("", "v1", res)], namespace, name)
	return obj, err
}

func (g storeObjects) GetServiceAccount(namespace, name string) (*corev1.ServiceAccount, error) {
	obj, err := g.get("serviceaccounts", namespace, name)
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.ServiceAccount), nil
}

func (g storeObjects) GetPod(namespace, name string) (*corev1.Pod, error) {
	obj, err := g.get("pods", namespace, name)
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.Pod), nil
}

func (g storeObjects) GetSecret(namespace, name string) (*corev1.Secret, error) {
	obj, err := g.get("secrets", namespace, name)
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.Secret), nil
}

func (g storeObjects) GetNode(name string) (*corev1.Node, error) {
	obj, err := g.get("nodes", "", name)
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.Node), nil
}
