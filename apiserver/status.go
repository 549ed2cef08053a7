package apiserver

import (
	"encoding/json"
	"fmt"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// writeStatus answers with a metav1.Status, as Kubernetes does for every
// error.
func writeStatus(w http.ResponseWriter, st *metav1.Status) {
	st.Kind, st.APIVersion = "Status", "v1"
	st.Status = metav1.StatusFailure
	if st.Code >= 200 && st.Code < 300 {
		st.Status = metav1.StatusSuccess
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(int(st.Code))
	json.NewEncoder(w).Encode(st)
}

func statusf(code int32, reason metav1.StatusReason, format string, args ...any) *metav1.Status {
	return &metav1.Status{Code: code, Reason: reason, Message: fmt.Sprintf(format, args...)}
}
