package authn

import (
	"crypto/sha256"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
)

// TokenFile authenticates bearer tokens listed in a Kubernetes static token
// file (kube-apiserver's --token-auth-file format).
type TokenFile struct {
	// Keyed by the token's hash so that the lookup's timing says nothing
	// about how much of a guessed token matched.
	users map[[sha256.Size]byte]*User
}

// LoadTokenFile reads and parses a static token file.
func LoadTokenFile(path string) (*TokenFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseTokenFile(f, path)
}

// ParseTokenFile parses CSV lines `token,user,uid[,"group1,group2"]`. Empty
// lines and lines starting with # are skipped. Errors name the file (name)
// and the line.
func ParseTokenFile(r io.Reader, name string) (*TokenFile, error) {
	cr := csv.NewReader(r)
	cr.Comment = '#'
	cr.FieldsPerRecord = -1
	cr.TrimLeadingSpace = true
	tf := &TokenFile{users: map[[sha256.Size]byte]*User{}}
	seen := map[[sha256.Size]byte]int{}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				return nil, fmt.Errorf("token file %s line %d: %v", name, pe.Line, pe.Err)
			}
			return nil, fmt.Errorf("token file %s: %w", name, err)
		}
		line, _ := cr.FieldPos(0)
		bad := func(format string, args ...any) error {
			return fmt.Errorf("token file %s line %d: "+format, append([]any{name, line}, args...)...)
		}
		if len(rec) < 3 || len(rec) > 4 {
			return nil, bad("want token,user,uid[,\"group1,group2\"], found %d fields", len(rec))
		}
		token, user, uid := strings.TrimSpace(rec[0]), strings.TrimSpace(rec[1]), strings.TrimSpace(rec[2])
		if token == "" {
			return nil, bad("empty token")
		}
		if strings.ContainsAny(token, " \t") {
			return nil, bad("token contains whitespace")
		}
		if user == "" {
			return nil, bad("empty user name")
		}
		var groups []string
		if len(rec) == 4 {
			for _, g := range strings.Split(rec[3], ",") {
				if g = strings.TrimSpace(g); g != "" {
					groups = append(groups, g)
				}
			}
		}
		h := sha256.Sum256([]byte(token))
		if prev, dup := seen[h]; dup {
			return nil, bad("token already given on line %d", prev)
		}
		seen[h] = line
		tf.users[h] = &User{Name: user, UID: uid, Groups: withAuthenticated(groups)}
	}
	return tf, nil
}

// Len is the number of tokens.
func (t *TokenFile) Len() int { return len(t.users) }

// AuthenticateRequest reads `Authorization: Bearer <token>`.
func (t *TokenFile) AuthenticateRequest(r *http.Request) (*User, bool, error) {
	token, ok := bearerToken(r)
	if !ok {
		return nil, false, nil
	}
	u, found := t.users[sha256.Sum256([]byte(token))]
	if !found {
		return nil, false, errors.New("invalid bearer token")
	}
	// A copy, so that later filters that add to the user cannot change the
	// table.
	c := *u
	c.Groups = append([]string(nil), u.Groups...)
	return &c, true, nil
}

func bearerToken(r *http.Request) (string, bool) {
	h := strings.TrimSpace(r.Header.Get("Authorization"))
	scheme, token, found := strings.Cut(h, " ")
	if !found || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}
