package params

import (
	"net/url"
	"reflect"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The spellings clients send for a boolean, read as kube-apiserver reads
// them: only "0" and "false" (any case) are false once present.
var boolSpellings = []struct {
	value string
	want  bool
}{
	{"true", true},
	{"True", true}, // the official Python client
	{"TRUE", true},
	{"1", true},
	{"t", true},
	{"yes", true},
	{"", true}, // present and empty
	{"false", false},
	{"False", false},
	{"FALSE", false},
	{"0", false},
}

func query(t *testing.T, raw string) url.Values {
	t.Helper()
	q, err := url.ParseQuery(raw)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func TestBool(t *testing.T) {
	for _, tc := range []struct {
		query string
		want  bool
		isSet bool
	}{
		{"", false, false},
		{"other=1", false, false},
		{"watch", true, true},
		{"watch=0&watch=1", false, true}, // the first value counts
		{"watch=1&watch=0", true, true},
	} {
		q := query(t, tc.query)
		if got := Bool(q, "watch"); got != tc.want {
			t.Errorf("Bool(%q) = %v, want %v", tc.query, got, tc.want)
		}
		p := BoolPtr(q, "watch")
		if (p != nil) != tc.isSet || (p != nil && *p != tc.want) {
			t.Errorf("BoolPtr(%q) = %v, want set %v and %v", tc.query, p, tc.isSet, tc.want)
		}
	}
}

// Every boolean parameter of every option kind, in every spelling.
func TestBooleanParameters(t *testing.T) {
	get := map[string]func(q url.Values) (bool, error){
		"watch": func(q url.Values) (bool, error) { o, err := List(q); return o.Watch, err },
		"allowWatchBookmarks": func(q url.Values) (bool, error) {
			o, err := List(q)
			return o.AllowWatchBookmarks, err
		},
		"sendInitialEvents": func(q url.Values) (bool, error) {
			o, err := List(q)
			return o.SendInitialEvents != nil && *o.SendInitialEvents, err
		},
		"follow":     func(q url.Values) (bool, error) { o, err := PodLog(q); return o.Follow, err },
		"previous":   func(q url.Values) (bool, error) { o, err := PodLog(q); return o.Previous, err },
		"timestamps": func(q url.Values) (bool, error) { o, err := PodLog(q); return o.Timestamps, err },
		"insecureSkipTLSVerifyBackend": func(q url.Values) (bool, error) {
			o, err := PodLog(q)
			return o.InsecureSkipTLSVerifyBackend, err
		},
		"stdin":  func(q url.Values) (bool, error) { return PodExec(q).Stdin, nil },
		"stdout": func(q url.Values) (bool, error) { return PodExec(q).Stdout, nil },
		"stderr": func(q url.Values) (bool, error) { return PodAttach(q).Stderr, nil },
		"tty":    func(q url.Values) (bool, error) { return PodAttach(q).TTY, nil },
		"force": func(q url.Values) (bool, error) {
			o, err := Patch(q, types.ApplyYAMLPatchType)
			return o != nil && o.Force != nil && *o.Force, err
		},
		"orphanDependents": func(q url.Values) (bool, error) {
			o, err := Delete(q)
			return o.OrphanDependents != nil && *o.OrphanDependents, err
		},
	}
	for name, read := range get {
		for _, sp := range boolSpellings {
			q := url.Values{name: {sp.value}}
			if name == "force" {
				q.Set("fieldManager", "m") // apply needs one
			}
			got, err := read(q)
			if err != nil {
				t.Errorf("%s=%s: %v", name, sp.value, err)
			} else if got != sp.want {
				t.Errorf("%s=%s read as %v, want %v", name, sp.value, got, sp.want)
			}
		}
		if got, err := read(url.Values{"fieldManager": {"m"}}); err != nil || got {
			t.Errorf("%s absent read as %v (%v)", name, got, err)
		}
	}
}

func TestIntegerParameters(t *testing.T) {
	for _, tc := range []struct {
		query string
		read  func(q url.Values) (any, error)
		want  any
		msg   string // a 400's message, when the value does not parse
	}{
		{"limit=500", func(q url.Values) (any, error) { o, err := List(q); return o.Limit, err }, int64(500), ""},
		{"limit=-1", func(q url.Values) (any, error) { o, err := List(q); return o.Limit, err }, int64(-1), ""},
		{"limit=abc", func(q url.Values) (any, error) { o, err := List(q); return o.Limit, err }, nil, `strconv.ParseInt: parsing "abc": invalid syntax`},
		{"limit=5&limit=7", func(q url.Values) (any, error) { o, err := List(q); return o.Limit, err }, int64(5), ""},
		{"timeoutSeconds=30", func(q url.Values) (any, error) { o, err := List(q); return *o.TimeoutSeconds, err }, int64(30), ""},
		{"timeoutSeconds=1.5", func(q url.Values) (any, error) { o, err := List(q); return o.TimeoutSeconds, err }, nil, `strconv.ParseInt: parsing "1.5": invalid syntax`},
		{"gracePeriodSeconds=0", func(q url.Values) (any, error) { o, err := Delete(q); return *o.GracePeriodSeconds, err }, int64(0), ""},
		{"gracePeriodSeconds=x", func(q url.Values) (any, error) { o, err := Delete(q); return o, err }, nil, `strconv.ParseInt: parsing "x": invalid syntax`},
		{"tailLines=10", func(q url.Values) (any, error) { o, err := PodLog(q); return *o.TailLines, err }, int64(10), ""},
		{"sinceSeconds=", func(q url.Values) (any, error) { o, err := PodLog(q); return o, err }, nil, `strconv.ParseInt: parsing "": invalid syntax`},
		{"limitBytes=99999999999999999999", func(q url.Values) (any, error) { o, err := PodLog(q); return o, err }, nil, `strconv.ParseInt: parsing "99999999999999999999": value out of range`},
		{"ports=8080", func(q url.Values) (any, error) { o, err := PodPortForward(q); return o.Ports, err }, []int32{8080}, ""},
		{"ports=8080,9090&ports=7070", func(q url.Values) (any, error) { o, err := PodPortForward(q); return o.Ports, err }, []int32{8080, 9090, 7070}, ""},
		{"ports=70000", func(q url.Values) (any, error) { o, err := PodPortForward(q); return o, err }, nil, `cannot convert to []int32: strconv.ParseUint: parsing "70000": value out of range`},
	} {
		got, err := tc.read(query(t, tc.query))
		if tc.msg != "" {
			if !apierrors.IsBadRequest(err) || err.Error() != tc.msg {
				t.Errorf("%s: error %v, want 400 %q", tc.query, err, tc.msg)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s = %v (%v), want %v", tc.query, got, err, tc.want)
		}
	}
}

// Repeated values: dryRun and command keep every value, the rest the
// first; selectors parse as kube-apiserver parses them.
func TestListAndWriteOptions(t *testing.T) {
	o, err := List(query(t, "labelSelector=app%3Dweb&fieldSelector=metadata.name%3Dx&resourceVersion=5&resourceVersion=6&unknown=1"))
	if err != nil {
		t.Fatal(err)
	}
	if o.LabelSelector.String() != "app=web" || o.FieldSelector.String() != "metadata.name=x" || o.ResourceVersion != "5" {
		t.Errorf("list options = %+v", o)
	}
	if _, err := List(query(t, "labelSelector=x%3D(")); !apierrors.IsBadRequest(err) {
		t.Errorf("bad label selector: %v", err)
	}
	if _, err := List(query(t, "fieldSelector=a%3D%3D%3Db")); !apierrors.IsBadRequest(err) {
		t.Errorf("bad field selector: %v", err)
	}

	c, err := Create(query(t, "dryRun=All&fieldManager=me&fieldValidation=Strict"))
	if err != nil || !reflect.DeepEqual(c.DryRun, []string{"All"}) || c.FieldManager != "me" || c.FieldValidation != "Strict" {
		t.Errorf("create options = %+v (%v)", c, err)
	}
	e := PodExec(query(t, "command=sh&command=-c&command=echo+hi&container=a&container=b"))
	if !reflect.DeepEqual(e.Command, []string{"sh", "-c", "echo hi"}) || e.Container != "a" {
		t.Errorf("exec options = %+v", e)
	}
	l, err := PodLog(query(t, "sinceTime=2026-11-29T00:00:00Z&stream=Stdout"))
	if err != nil || l.SinceTime == nil || l.SinceTime.UTC().Day() != 29 || *l.Stream != "Stdout" {
		t.Errorf("log options = %+v (%v)", l, err)
	}
	if _, err := PodLog(query(t, "sinceTime=yesterday")); !apierrors.IsBadRequest(err) {
		t.Errorf("bad sinceTime: %v", err)
	}
}

// Options that decode but break their kind's rules are 422s naming the
// meta.k8s.io kind, with upstream's field errors.
func TestOptionRules(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		msg  string
	}{
		{"dry run", second(Create(query(t, "dryRun=Yes"))),
			`CreateOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: ["Yes"]: supported values: "All"`},
		{"field validation", second(Update(query(t, "fieldValidation=Loud"))),
			`UpdateOptions.meta.k8s.io "" is invalid: fieldValidation: Unsupported value: "Loud": supported values: "", "Ignore", "Strict", "Warn"`},
		{"apply without manager", second(Patch(query(t, ""), types.ApplyYAMLPatchType)),
			`PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch`},
		{"force without apply", second(Patch(query(t, "force=true"), types.MergePatchType)),
			`PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified for non-apply patch`},
		{"both orphan and propagation", ValidateDelete(must(Delete(query(t, "orphanDependents=true&propagationPolicy=Background")))),
			`DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Invalid value: "Background": orphanDependents and deletionPropagation cannot be both set`},
		{"unknown propagation", ValidateDelete(must(Delete(query(t, "propagationPolicy=Later")))),
			`DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: "Later": supported values: "Foreground", "Background", "Orphan", "nil"`},
	} {
		if apierrors.ReasonForError(tc.err) != metav1.StatusReasonInvalid || tc.err.Error() != tc.msg {
			t.Errorf("%s: %v\nwant 422 %s", tc.name, tc.err, tc.msg)
		}
	}
	if _, err := Table(query(t, "includeObject=Everything")); !apierrors.IsBadRequest(err) ||
		err.Error() != `Unable to convert to Table as requested: includeObject: Invalid value: "Everything": must be 'Metadata', 'Object', 'None', or empty` {
		t.Errorf("table options: %v", err)
	}
	if code := apierrors.ReasonForError(second(Create(query(t, "fieldManager=a%00b")))); code != metav1.StatusReasonInvalid {
		t.Errorf("unprintable field manager: %v", code)
	}
}

func second[T any](_ T, err error) error { return err }

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
