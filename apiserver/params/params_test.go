package params

import (
	"net/url"
	"testing"
)

// The spellings clients send, read as kube-apiserver reads them.
func TestBool(t *testing.T) {
	for _, tc := range []struct {
		query string
		want  bool
		isSet bool
	}{
		{"", false, false},
		{"other=1", false, false},
		{"watch=true", true, true},
		{"watch=True", true, true}, // the official Python client
		{"watch=TRUE", true, true},
		{"watch=1", true, true},
		{"watch=t", true, true},
		{"watch=yes", true, true},
		{"watch=", true, true}, // present and empty: true, as upstream
		{"watch", true, true},
		{"watch=false", false, true},
		{"watch=False", false, true},
		{"watch=FALSE", false, true},
		{"watch=0", false, true},
		{"watch=0&watch=1", false, true}, // the first value counts
		{"watch=1&watch=0", true, true},
	} {
		q, err := url.ParseQuery(tc.query)
		if err != nil {
			t.Fatal(err)
		}
		if got := Bool(q, "watch"); got != tc.want {
			t.Errorf("Bool(%q) = %v, want %v", tc.query, got, tc.want)
		}
		p := BoolPtr(q, "watch")
		if (p != nil) != tc.isSet || (p != nil && *p != tc.want) {
			t.Errorf("BoolPtr(%q) = %v, want set %v and %v", tc.query, p, tc.isSet, tc.want)
		}
	}
}
