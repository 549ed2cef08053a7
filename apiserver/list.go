package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"bonsai.dev/bonsai/apiserver/params"
	"bonsai.dev/bonsai/store"
)

// listOptions are a list's or watch's query parameters, parsed and checked.
type listOptions struct {
	labels          labels.Selector
	fields          fields.Selector
	limit           int64
	cont            string
	rv              string
	rvMatch         metav1.ResourceVersionMatch
	timeoutSeconds  int64
	bookmarks       bool
	sendInitial     *bool
	filtering       bool
	resourceVersion uint64 // rv parsed, 0 when empty or "0"
	// metadataOnly: the caller sends only each object's metadata (a
	// PartialObjectMetadata list or watch), so listObjects may give
	// PartialObjectMetadata decoded from the metadata alone.
	metadataOnly bool
}

// parseListOptions reads a list's (watch false) or a watch's query and
// checks it as kube-apiserver does: the rules for resourceVersionMatch and
// sendInitialEvents differ between the two.
func parseListOptions(r *http.Request, res *resource, watch bool) (listOptions, error) {
	var o listOptions
	opts, err := params.List(r.URL.Query())
	if err != nil {
		return o, err
	}
	o.labels, o.fields = opts.LabelSelector, opts.FieldSelector
	if o.labels == nil {
		o.labels = labels.Everything()
	}
	if o.fields == nil {
		o.fields = fields.Everything()
	}
	for _, req := range o.fields.Requirements() {
		if !res.supportsField(req.Field) {
			return o, apierrors.NewBadRequest(fmt.Sprintf("field label not supported: %s", req.Field))
		}
	}
	o.filtering = !o.labels.Empty() || !o.fields.Empty()
	// A negative limit asks for no paging, as in kube-apiserver.
	o.limit = max(opts.Limit, 0)
	o.cont, o.rv, o.rvMatch = opts.Continue, opts.ResourceVersion, opts.ResourceVersionMatch
	if o.rv != "" {
		if o.resourceVersion, err = strconv.ParseUint(o.rv, 10, 64); err != nil {
			return o, apierrors.NewBadRequest(fmt.Sprintf("invalid resource version: %v", field.Invalid(field.NewPath("resourceVersion"), o.rv, err.Error())))
		}
	}
	if o.cont != "" && o.rv != "" && o.rv != "0" {
		return o, apierrors.NewBadRequest("specifying resource version is not allowed when using continue")
	}
	if opts.TimeoutSeconds != nil {
		o.timeoutSeconds = *opts.TimeoutSeconds
	}
	o.bookmarks, o.sendInitial = opts.AllowWatchBookmarks, opts.SendInitialEvents
	var errs field.ErrorList
	if watch {
		errs = o.watchErrors()
	} else {
		errs = o.listErrors()
	}
	if len(errs) > 0 {
		return o, apierrors.NewInvalid(metav1.SchemeGroupVersion.WithKind("ListOptions").GroupKind(), "", errs)
	}
	return o, nil
}

var rvMatchPath = field.NewPath("resourceVersionMatch")

// listErrors are the rules for a list's resourceVersionMatch and
// sendInitialEvents.
func (o *listOptions) listErrors() field.ErrorList {
	var errs field.ErrorList
	if o.rvMatch != "" {
		if o.rv == "" {
			errs = append(errs, field.Forbidden(rvMatchPath, "resourceVersionMatch is forbidden unless resourceVersion is provided"))
		}
		if o.cont != "" {
			errs = append(errs, field.Forbidden(rvMatchPath, "resourceVersionMatch is forbidden when continue is provided"))
		}
		switch o.rvMatch {
		case metav1.ResourceVersionMatchExact:
			if o.rv == "0" {
				errs = append(errs, field.Forbidden(rvMatchPath, `resourceVersionMatch "exact" is forbidden for resourceVersion "0"`))
			}
		case metav1.ResourceVersionMatchNotOlderThan:
		default:
			errs = append(errs, field.NotSupported(rvMatchPath, o.rvMatch, []string{string(metav1.ResourceVersionMatchExact), string(metav1.ResourceVersionMatchNotOlderThan), ""}))
		}
	}
	if o.sendInitial != nil {
		errs = append(errs, field.Forbidden(field.NewPath("sendInitialEvents"), "sendInitialEvents is forbidden for list"))
	}
	return errs
}

// watchErrors are the rules for a watch's: resourceVersionMatch only
// with sendInitialEvents (a watch-list), and then NotOlderThan, whatever
// the resourceVersion; sendInitialEvents also needs bookmarks.
func (o *listOptions) watchErrors() field.ErrorList {
	var errs field.ErrorList
	if o.sendInitial != nil {
		if o.rvMatch != metav1.ResourceVersionMatchNotOlderThan {
			errs = append(errs, field.Forbidden(rvMatchPath, "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"))
		}
		if *o.sendInitial && !o.bookmarks {
			errs = append(errs, field.Forbidden(field.NewPath("allowWatchBookmarks"), "sendInitialEvents requires setting allowWatchBookmarks to true"))
		}
	}
	if o.rvMatch != "" {
		if o.sendInitial == nil {
			errs = append(errs, field.Forbidden(rvMatchPath, "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"))
		}
		if o.rvMatch != metav1.ResourceVersionMatchNotOlderThan {
			errs = append(errs, field.NotSupported(rvMatchPath, o.rvMatch, []string{string(metav1.ResourceVersionMatchNotOlderThan)}))
		}
		if o.cont != "" {
			errs = append(errs, field.Forbidden(rvMatchPath, "resourceVersionMatch is forbidden when continue is provided"))
		}
	}
	return errs
}

// matches applies the label and field selectors.
func (res *resource) matches(o *listOptions, obj runtime.Object) bool {
	if !o.filtering {
		return true
	}
	m, err := metaOf(obj)
	if err != nil {
		return false
	}
	if !o.labels.Matches(labels.Set(m.GetLabels())) {
		return false
	}
	return o.fields.Empty() || o.fields.Matches(res.fieldSet(obj, m))
}

func (s *Server) list(w http.ResponseWriter, r *http.Request, ri requestInfo, res *resource) error {
	format, o, err := listRequest(r, res)
	if err != nil {
		return err
	}
	items, lm, err := s.listObjects(r.Context(), res, ri.namespace, o)
	if err != nil {
		return err
	}
	return s.writeList(w, r, res, format, items, lm)
}

// listRequest is a list's answer format and options.
func listRequest(r *http.Request, res *resource) (outputFormat, listOptions, error) {
	format, err := negotiate(r, res, false)
	if err != nil {
		return format, listOptions{}, err
	}
	o, err := parseListOptions(r, res, false)
	o.metadataOnly = format.metadataOnly()
	return format, o, err
}

// writeList answers items as a list of res's kind in format (a Table or
// PartialObjectMetadataList when asked for).
func (s *Server) writeList(w http.ResponseWriter, r *http.Request, res *resource, format outputFormat, items []runtime.Object, lm metav1.ListMeta) error {
	switch {
	case format.table():
		t, err := s.table(r, res, items, lm.ResourceVersion, lm.Continue)
		if err != nil {
			return err
		}
		t.ListMeta.RemainingItemCount = lm.RemainingItemCount
		writeObject(w, http.StatusOK, t, format.encoding())
		return nil
	case format.metadataOnly():
		pl := &metav1.PartialObjectMetadataList{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadataList"}, ListMeta: lm}
		pl.Items = make([]metav1.PartialObjectMetadata, 0, len(items))
		for _, it := range items {
			pl.Items = append(pl.Items, *partialMetadata(it))
		}
		writeObject(w, http.StatusOK, pl, format.encoding())
		return nil
	}
	list := res.newList()
	if err := meta.SetList(list, items); err != nil {
		return apierrors.NewInternalError(err)
	}
	la, _ := meta.ListAccessor(list)
	la.SetResourceVersion(lm.ResourceVersion)
	la.SetContinue(lm.Continue)
	la.SetRemainingItemCount(lm.RemainingItemCount)
	list.GetObjectKind().SetGroupVersionKind(res.gvr.GroupVersion().WithKind(res.listKind))
	writeObject(w, http.StatusOK, list, format)
	return nil
}

// listObjects reads a resource's objects in namespace ("" for all) that
// match o, a page at a time from the store, all at one revision.
func (s *Server) listObjects(ctx context.Context, res *resource, namespace string, o listOptions) ([]runtime.Object, metav1.ListMeta, error) {
	prefix := res.prefix(namespace)
	so := store.ListOptions{Continue: o.cont}
	if o.cont == "" {
		current, err := s.cfg.Store.CurrentRevision(ctx)
		if err != nil {
			return nil, metav1.ListMeta{}, apierrors.NewInternalError(err)
		}
		switch {
		case o.rvMatch == metav1.ResourceVersionMatchExact,
			o.rvMatch == "" && o.resourceVersion > 0 && o.limit > 0:
			so.Revision = o.resourceVersion
		case o.resourceVersion > current:
			return nil, metav1.ListMeta{}, tooLargeResourceVersion(o.resourceVersion, current)
		}
	}
	// Without filtering the store pages for us; with it, read in chunks
	// until the page is full.
	chunk := o.limit
	if o.filtering && chunk > 0 && chunk < 500 {
		chunk = 500
	}
	so.Limit = chunk
	var items []runtime.Object
	var lm metav1.ListMeta
	for {
		page, err := s.cfg.Store.List(ctx, prefix, so)
		if err != nil {
			if errors.Is(err, store.ErrCompacted) && o.cont != "" {
				return nil, lm, expiredContinue(prefix, o.cont)
			}
			return nil, lm, storeError(err, res, "")
		}
		lm.ResourceVersion = strconv.FormatUint(page.Revision, 10)
		var decoded []runtime.Object
		if res.custom != nil && res.custom.Converts() {
			// One conversion call for the page, not one per object.
			if decoded, err = res.custom.Decode(page.Items); err != nil {
				return nil, lm, apierrors.NewInternalError(err)
			}
		}
		for i, kv := range page.Items {
			var obj runtime.Object
			if decoded != nil {
				obj = decoded[i]
			} else if pm, ok := metaOnly(res, &o, kv); ok {
				obj = pm
			} else if obj, err = decodeStored(res, kv); err != nil {
				return nil, lm, apierrors.NewInternalError(err)
			}
			if !res.matches(&o, obj) {
				continue
			}
			items = append(items, obj)
			if o.limit > 0 && int64(len(items)) == o.limit {
				more := i < len(page.Items)-1 || page.Continue != ""
				if more {
					if lm.Continue, err = store.EncodeContinue(prefix, kv.Key+"\x00", page.Revision); err != nil {
						return nil, lm, apierrors.NewInternalError(err)
					}
					if !o.filtering {
						lm.RemainingItemCount = ptrTo(page.RemainingCount + int64(len(page.Items)-1-i))
					}
				}
				return items, lm, nil
			}
		}
		if page.Continue == "" {
			return items, lm, nil
		}
		so = store.ListOptions{Continue: page.Continue, Limit: chunk}
	}
}

// metaOnly is kv's object decoded from its metadata alone, when o lets
// the list give metadata only: no field selector needs the rest.
func metaOnly(res *resource, o *listOptions, kv store.KeyValue) (*metav1.PartialObjectMetadata, bool) {
	if !o.metadataOnly || o.fields != nil && !o.fields.Empty() {
		return nil, false
	}
	return decodeStoredMeta(res, kv)
}

func ptrTo[T any](v T) *T { return &v }

// expiredContinue is kube-apiserver's 410 for a continue token whose
// revision was compacted away: its list metadata carries a token that
// resumes at the same key at the newest revision, so the client can
// finish the list, inconsistently, as the message says.
func expiredContinue(prefix, cont string) error {
	se := apierrors.NewResourceExpired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.")
	if start, _, err := store.DecodeContinue(prefix, cont); err == nil {
		se.ErrStatus.ListMeta.Continue, _ = store.EncodeContinue(prefix, start, 0)
	}
	return se
}
