// Package history keeps the ControllerRevisions of the controllers that
// record their pod templates (DaemonSet, StatefulSet), as upstream's
// pkg/controller/history does: naming by hash with collision probing,
// ordering, equality, and creation that survives a hash collision.
// Claiming revisions (adoption and release) is kit's RefManager.
//
// It touches only ControllerRevisions; the callers own everything else.
package history

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/dump"
	"k8s.io/apimachinery/pkg/util/rand"
	appsclient "k8s.io/client-go/kubernetes/typed/apps/v1"
)

// HashLabel is the label a revision (and the pods made from it) carries
// with its hash.
const HashLabel = appsv1.ControllerRevisionHashLabelKey

// Name is a revision's name: the parent's name, cut so the whole stays a
// valid name, a dash and the hash.
func Name(parent, hash string) string {
	if len(parent) > 223 {
		parent = parent[:223]
	}
	return parent + "-" + hash
}

// HashObject is the hash of obj (a pod template) and, when not nil, a
// collision count, as upstream's controller.ComputeHash: fnv32a over a
// stable dump of the object, encoded so it is a safe label value.
func HashObject(obj any, collisionCount *int32) string {
	h := fnv.New32a()
	fmt.Fprintf(h, "%v", dump.ForHash(obj))
	if collisionCount != nil {
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], uint32(*collisionCount))
		h.Write(b[:])
	}
	return rand.SafeEncodeString(fmt.Sprint(h.Sum32()))
}

// HashRevision is the hash of a revision's data and, when not nil, a
// collision probe, as upstream's HashControllerRevision.
func HashRevision(rev *appsv1.ControllerRevision, probe *int32) string {
	h := fnv.New32()
	h.Write(rev.Data.Raw)
	if probe != nil {
		h.Write([]byte(strconv.FormatInt(int64(*probe), 10)))
	}
	return rand.SafeEncodeString(fmt.Sprint(h.Sum32()))
}

// New is a revision of parent (of kind parentKind) holding data, labelled
// with the template's labels and its hash, owned by parent as controller.
func New(parent metav1.Object, parentKind schema.GroupVersionKind, templateLabels map[string]string, data []byte, revision int64, collisionCount *int32) *appsv1.ControllerRevision {
	labels := make(map[string]string, len(templateLabels)+1)
	for k, v := range templateLabels {
		labels[k] = v
	}
	rev := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       parent.GetNamespace(),
			Labels:          labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(parent, parentKind)},
		},
		Data:     runtime.RawExtension{Raw: data},
		Revision: revision,
	}
	hash := HashRevision(rev, collisionCount)
	rev.Name = Name(parent.GetName(), hash)
	rev.Labels[HashLabel] = hash
	return rev
}

// TemplatePatch is what the revision of a DaemonSet's or StatefulSet's
// pod template holds, as upstream's getPatch: a strategic merge patch that
// replaces spec.template, which kubectl rollout undo sends back to the
// owner as is.
func TemplatePatch(template *corev1.PodTemplateSpec) ([]byte, error) {
	tmpl, err := json.Marshal(template)
	if err != nil {
		return nil, err
	}
	var t map[string]any
	if err := json.Unmarshal(tmpl, &t); err != nil {
		return nil, err
	}
	t["$patch"] = "replace"
	return json.Marshal(map[string]any{"spec": map[string]any{"template": t}})
}

// Sort orders revisions oldest first: by revision number, then creation
// time, then name.
func Sort(revs []*appsv1.ControllerRevision) {
	slices.SortStableFunc(revs, func(a, b *appsv1.ControllerRevision) int {
		switch {
		case a.Revision != b.Revision:
			return cmp.Compare(a.Revision, b.Revision)
		case !a.CreationTimestamp.Equal(&b.CreationTimestamp):
			if a.CreationTimestamp.Before(&b.CreationTimestamp) {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.Name, b.Name)
	})
}

// Equal says whether two revisions hold the same data.
func Equal(a, b *appsv1.ControllerRevision) bool {
	if a == nil || b == nil {
		return a == b
	}
	return bytes.Equal(a.Data.Raw, b.Data.Raw)
}

// FindEqual is the revisions of revs equal to needle, in revs' order.
func FindEqual(revs []*appsv1.ControllerRevision, needle *appsv1.ControllerRevision) []*appsv1.ControllerRevision {
	var out []*appsv1.ControllerRevision
	for _, r := range revs {
		if Equal(r, needle) {
			out = append(out, r)
		}
	}
	return out
}

// MaxRevision is the highest revision number of revs, 0 for none.
func MaxRevision(revs []*appsv1.ControllerRevision) int64 {
	var m int64
	for _, r := range revs {
		m = max(m, r.Revision)
	}
	return m
}

// Create creates rev for parent. When a revision of that name already
// exists with other data (a hash collision), it bumps *collisionCount and
// tries the next name, as upstream does; an existing equal revision is
// returned as is.
func Create(ctx context.Context, c appsclient.ControllerRevisionsGetter, parent metav1.Object, rev *appsv1.ControllerRevision, collisionCount *int32) (*appsv1.ControllerRevision, error) {
	clone := rev.DeepCopy()
	for {
		hash := HashRevision(rev, collisionCount)
		clone.Name = Name(parent.GetName(), hash)
		clone.Labels[HashLabel] = hash
		created, err := c.ControllerRevisions(parent.GetNamespace()).Create(ctx, clone, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			if err != nil {
				return nil, fmt.Errorf("create controller revision %s: %w", clone.Name, err)
			}
			return created, nil
		}
		exists, err := c.ControllerRevisions(parent.GetNamespace()).Get(ctx, clone.Name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("get controller revision %s: %w", clone.Name, err)
		}
		if bytes.Equal(exists.Data.Raw, clone.Data.Raw) {
			return exists, nil
		}
		*collisionCount++
	}
}

// SetRevision gives an existing revision a new revision number (a
// rollback to it makes it the newest).
func SetRevision(ctx context.Context, c appsclient.ControllerRevisionsGetter, rev *appsv1.ControllerRevision, revision int64) (*appsv1.ControllerRevision, error) {
	if rev.Revision == revision {
		return rev, nil
	}
	clone := rev.DeepCopy()
	clone.Revision = revision
	out, err := c.ControllerRevisions(rev.Namespace).Update(ctx, clone, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("renumber controller revision %s to %d: %w", rev.Name, revision, err)
	}
	return out, nil
}
