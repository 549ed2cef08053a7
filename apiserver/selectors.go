package apiserver

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
)

func (res *resource) supportsField(label string) bool {
	if label == "metadata.name" || (label == "metadata.namespace" && res.namespaced) {
		return true
	}
	_, ok := res.fields[label]
	return ok
}

func (res *resource) fieldSet(obj runtime.Object, m metav1.Object) fields.Set {
	set := fields.Set{"metadata.name": m.GetName()}
	if res.namespaced {
		set["metadata.namespace"] = m.GetNamespace()
	}
	for k, f := range res.fields {
		set[k] = f(obj)
	}
	return set
}
