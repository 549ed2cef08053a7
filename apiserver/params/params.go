// Package params reads a request's query parameters as kube-apiserver's
// parameter codec does, so that every client's spelling means what it
// means to Kubernetes: the Python client sends watch=True, some clients
// send ports=8080,9090, and a value that does not parse is a 400 with
// the conversion's own message.
//
// The options of the meta.k8s.io group (ListOptions, CreateOptions,
// UpdateOptions, PatchOptions, DeleteOptions, TableOptions) are decoded
// by k8s.io/apimachinery's own parameter codec and checked by its own
// validation. The core group's options (PodLogOptions, PodExecOptions,
// PodAttachOptions, PodPortForwardOptions) have their conversions in
// kube-apiserver itself; here they are read field by field with the same
// apimachinery conversions those generated functions call.
package params

import (
	"fmt"
	"net/url"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Bool is a boolean parameter: false when absent; otherwise its first
// value is false only when it is "0" or "false" in any case, and true
// for anything else, the empty value included.
func Bool(q url.Values, name string) bool {
	var b bool
	if v, ok := q[name]; ok && len(v) > 0 {
		runtime.Convert_Slice_string_To_bool(&v, &b, nil)
	}
	return b
}

// BoolPtr is Bool for an optional field: nil when absent.
func BoolPtr(q url.Values, name string) *bool {
	var b *bool
	if v, ok := q[name]; ok && len(v) > 0 {
		runtime.Convert_Slice_string_To_Pointer_bool(&v, &b, nil)
	}
	return b
}

// Int64Ptr is an optional integer parameter: nil when absent, its first
// value in base 10 otherwise.
func Int64Ptr(q url.Values, name string) (*int64, error) {
	var n *int64
	if v, ok := q[name]; ok && len(v) > 0 {
		if err := runtime.Convert_Slice_string_To_Pointer_int64(&v, &n, nil); err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
	}
	return n, nil
}

// String is a parameter's first value, "" when absent.
func String(q url.Values, name string) string {
	var s string
	if v, ok := q[name]; ok && len(v) > 0 {
		runtime.Convert_Slice_string_To_string(&v, &s, nil)
	}
	return s
}

// metaGroupVersion is the version the meta options are decoded from, as
// kube-apiserver's handlers decode them.
var metaGroupVersion = metav1.SchemeGroupVersion

// decode fills into from q with apimachinery's parameter codec; what does
// not convert is a 400 carrying the conversion's message.
func decode(q url.Values, into runtime.Object) error {
	if err := metainternalversionscheme.ParameterCodec.DecodeParameters(q, metaGroupVersion, into); err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	return nil
}

// invalid is the 422 kube-apiserver answers for options that decoded but
// break the rules of their kind.
func invalid(kind string, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: kind}, "", errs)
}

// List decodes a list's or a watch's options: selectors parsed, integers
// and booleans converted. The rules that tie the options together
// (resourceVersionMatch, sendInitialEvents) are the caller's: they
// depend on what the server serves.
func List(q url.Values) (metainternalversion.ListOptions, error) {
	var o metainternalversion.ListOptions
	err := decode(q, &o)
	return o, err
}

// Create decodes and validates a create's options.
func Create(q url.Values) (*metav1.CreateOptions, error) {
	o := &metav1.CreateOptions{}
	if err := decode(q, o); err != nil {
		return nil, err
	}
	return o, invalid("CreateOptions", metav1validation.ValidateCreateOptions(o))
}

// Update decodes and validates an update's options.
func Update(q url.Values) (*metav1.UpdateOptions, error) {
	o := &metav1.UpdateOptions{}
	if err := decode(q, o); err != nil {
		return nil, err
	}
	return o, invalid("UpdateOptions", metav1validation.ValidateUpdateOptions(o))
}

// Patch decodes and validates a patch's options for its patch type.
func Patch(q url.Values, pt types.PatchType) (*metav1.PatchOptions, error) {
	o := &metav1.PatchOptions{}
	if err := decode(q, o); err != nil {
		return nil, err
	}
	return o, invalid("PatchOptions", metav1validation.ValidatePatchOptions(o, pt))
}

// Delete decodes a delete's options from its query; a delete whose body
// carries DeleteOptions takes them from the body instead, and its query
// is not read, as in kube-apiserver.
func Delete(q url.Values) (*metav1.DeleteOptions, error) {
	o := &metav1.DeleteOptions{}
	if err := decode(q, o); err != nil {
		return nil, err
	}
	return o, nil
}

// ValidateDelete checks DeleteOptions from the query or the body.
func ValidateDelete(o *metav1.DeleteOptions) error {
	return invalid("DeleteOptions", metav1validation.ValidateDeleteOptions(o))
}

// Table decodes and validates the options of a response given as a
// Table; a bad value is a 400, as kube-apiserver answers it.
func Table(q url.Values) (*metav1.TableOptions, error) {
	o := &metav1.TableOptions{}
	if err := decode(q, o); err != nil {
		return nil, err
	}
	switch errs := metav1validation.ValidateTableOptions(o); len(errs) {
	case 0:
		return o, nil
	case 1:
		return nil, apierrors.NewBadRequest(fmt.Sprintf("Unable to convert to Table as requested: %v", errs[0].Error()))
	default:
		return nil, apierrors.NewBadRequest(fmt.Sprintf("Unable to convert to Table as requested: %v", errs))
	}
}

// PodLog decodes pods/log's options (validation is the caller's).
func PodLog(q url.Values) (*corev1.PodLogOptions, error) {
	o := &corev1.PodLogOptions{
		Container:                    String(q, "container"),
		Follow:                       Bool(q, "follow"),
		Previous:                     Bool(q, "previous"),
		Timestamps:                   Bool(q, "timestamps"),
		InsecureSkipTLSVerifyBackend: Bool(q, "insecureSkipTLSVerifyBackend"),
	}
	var err error
	if o.SinceSeconds, err = Int64Ptr(q, "sinceSeconds"); err != nil {
		return nil, err
	}
	if v, ok := q["sinceTime"]; ok && len(v) > 0 {
		if err := metav1.Convert_Slice_string_To_Pointer_v1_Time(&v, &o.SinceTime, nil); err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
	}
	if o.TailLines, err = Int64Ptr(q, "tailLines"); err != nil {
		return nil, err
	}
	if o.LimitBytes, err = Int64Ptr(q, "limitBytes"); err != nil {
		return nil, err
	}
	if v, ok := q["stream"]; ok && len(v) > 0 {
		s := v[0]
		o.Stream = &s
	}
	return o, nil
}

// PodExec decodes pods/exec's options: every command value, in order.
func PodExec(q url.Values) *corev1.PodExecOptions {
	return &corev1.PodExecOptions{
		Stdin:     Bool(q, "stdin"),
		Stdout:    Bool(q, "stdout"),
		Stderr:    Bool(q, "stderr"),
		TTY:       Bool(q, "tty"),
		Container: String(q, "container"),
		Command:   q["command"],
	}
}

// PodAttach decodes pods/attach's options.
func PodAttach(q url.Values) *corev1.PodAttachOptions {
	return &corev1.PodAttachOptions{
		Stdin:     Bool(q, "stdin"),
		Stdout:    Bool(q, "stdout"),
		Stderr:    Bool(q, "stderr"),
		TTY:       Bool(q, "tty"),
		Container: String(q, "container"),
	}
}

// PodPortForward decodes pods/portforward's options: ports as repeated
// parameters, comma-separated lists, or both.
func PodPortForward(q url.Values) (*corev1.PodPortForwardOptions, error) {
	o := &corev1.PodPortForwardOptions{}
	if v, ok := q["ports"]; ok && len(v) > 0 {
		if err := metav1.Convert_Slice_string_To_Slice_int32(&v, &o.Ports, nil); err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
	}
	return o, nil
}
