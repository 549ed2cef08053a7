package authn_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"bonsai.dev/bonsai/apiserver/authn"
)

// FuzzParseTokenFile: any input either fails with one line naming the file,
// or yields a table in which every listed token authenticates.
func FuzzParseTokenFile(f *testing.F) {
	f.Add(goodTokens)
	f.Add("a,b,c\n\"unterminated,x,y\n")
	f.Add("tok,user,uid,\"g1,,g2\"\r\n# c\n\n")
	f.Fuzz(func(t *testing.T, in string) {
		tf, err := authn.ParseTokenFile(strings.NewReader(in), "fuzz.csv")
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz.csv") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if strings.Contains(in, "\"") {
			// Quoted fields may span lines; the line split below cannot
			// follow them.
			return
		}
		for _, line := range strings.Split(in, "\n") {
			tok, _, ok := strings.Cut(line, ",")
			tok = strings.TrimSpace(tok)
			if !ok || tok == "" || strings.ContainsAny(tok, "#\r") || strings.HasPrefix(line, "#") {
				continue
			}
			r := httptest.NewRequest("GET", "/api", nil)
			r.Header.Set("Authorization", "Bearer "+tok)
			if _, ok, err := tf.AuthenticateRequest(r); !ok || err != nil {
				t.Fatalf("token %q from the file does not authenticate: %v", tok, err)
			}
		}
	})
}
