// webhook is an admission webhook server as operators ship them: HTTPS,
// AdmissionReview v1. The e2e tests and the bench build and run it.
//
//	/mutate   labels the object e2e.bonsai.dev/mutated=true (a JSON patch)
//	          and answers with a warning
//	/validate refuses objects labelled e2e.bonsai.dev/deny
//	/allow    allows everything, changing nothing
//
// It prints "listening" on stdout once it serves.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	mutatedLabel = "e2e.bonsai.dev/mutated"
	denyLabel    = "e2e.bonsai.dev/deny"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8443", "address to serve on")
	cert := flag.String("cert", "", "serving certificate (PEM)")
	key := flag.String("key", "", "serving key (PEM)")
	flag.Parse()
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "webhook:", err)
		os.Exit(1)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/mutate", review(mutate))
	mux.HandleFunc("/validate", review(validate))
	mux.HandleFunc("/allow", review(func(*admissionv1.AdmissionRequest, metav1.Object) *admissionv1.AdmissionResponse {
		return &admissionv1.AdmissionResponse{Allowed: true}
	}))
	fmt.Println("listening")
	if err := http.ServeTLS(l, mux, *cert, *key); err != nil {
		fmt.Fprintln(os.Stderr, "webhook:", err)
		os.Exit(1)
	}
}

// review decodes an AdmissionReview, lets f answer it, and encodes the
// answer for the same request.
func review(f func(*admissionv1.AdmissionRequest, metav1.Object) *admissionv1.AdmissionResponse) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var rev admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&rev); err != nil || rev.Request == nil {
			http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
			return
		}
		raw := rev.Request.Object.Raw
		if len(raw) == 0 {
			raw = rev.Request.OldObject.Raw
		}
		var obj metav1.PartialObjectMetadata
		if err := json.Unmarshal(raw, &obj); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		resp := f(rev.Request, &obj)
		resp.UID = rev.Request.UID
		rev.Request, rev.Response = nil, resp
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(&rev)
	}
}

func mutate(req *admissionv1.AdmissionRequest, obj metav1.Object) *admissionv1.AdmissionResponse {
	var op map[string]any
	if obj.GetLabels() == nil {
		op = map[string]any{"op": "add", "path": "/metadata/labels", "value": map[string]string{mutatedLabel: "true"}}
	} else {
		op = map[string]any{"op": "add", "path": "/metadata/labels/" + strings.ReplaceAll(mutatedLabel, "/", "~1"), "value": "true"}
	}
	patch, _ := json.Marshal([]any{op})
	pt := admissionv1.PatchTypeJSONPatch
	return &admissionv1.AdmissionResponse{Allowed: true, Patch: patch, PatchType: &pt,
		Warnings: []string{fmt.Sprintf("%s %s labelled by the e2e webhook", strings.ToLower(req.Kind.Kind), obj.GetName())}}
}

func validate(_ *admissionv1.AdmissionRequest, obj metav1.Object) *admissionv1.AdmissionResponse {
	if _, ok := obj.GetLabels()[denyLabel]; ok {
		return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{
			Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden, Message: "objects labelled " + denyLabel + " are refused"}}
	}
	return &admissionv1.AdmissionResponse{Allowed: true}
}
