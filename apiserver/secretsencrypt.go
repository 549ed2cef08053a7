package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"bonsai.dev/bonsai/apiserver/authn"
	"bonsai.dev/bonsai/apiserver/encryption"
)

// The paths of `bonsai secrets-encrypt`: the state of encryption at rest,
// and key rotation and re-encryption done by the running server (as k3s
// does them through its server), so that no value is ever written with a
// key the server does not have. Only system:masters may call them: a
// rotation rewrites the key file and every encrypted object.
const (
	encryptionStatusPath    = "/bonsai/secrets-encrypt/status"
	encryptionRotatePath    = "/bonsai/secrets-encrypt/rotate"
	encryptionReencryptPath = "/bonsai/secrets-encrypt/reencrypt"
)

// errEncryptionDisabled answers a rotation without a configuration.
var errEncryptionDisabled = apierrors.NewBadRequest("encryption at rest is not enabled: start bonsai server with --encryption-provider-config or --secrets-encryption")

// encryptionCaller refuses anyone outside system:masters.
func encryptionCaller(w http.ResponseWriter, r *http.Request, what string) (*authn.User, bool) {
	u := requestUser(r.Context())
	if u == nil || !slices.Contains(u.Groups, authn.GroupMasters) {
		writeError(w, apierrors.NewForbidden(schema.GroupResource{}, "", fmt.Errorf("only members of %s may %s", authn.GroupMasters, what)))
		return nil, false
	}
	return u, true
}

func (s *Server) serveEncryptionStatus(w http.ResponseWriter, r *http.Request) {
	if _, ok := encryptionCaller(w, r, "read the encryption status"); !ok {
		return
	}
	if s.encryption == nil {
		writeEncryptionStatus(w, &encryption.Status{})
		return
	}
	st, err := s.encryption.Status(r.Context())
	if err != nil {
		writeError(w, apierrors.NewInternalError(err))
		return
	}
	writeEncryptionStatus(w, st)
}

// serveEncryptionRotate puts new keys first in the configuration file and
// re-encrypts every stored value with them. The work is the server's,
// not the request's: it goes on to the end if the client leaves (a
// rotation half done is finished by reencrypt anyway).
func (s *Server) serveEncryptionRotate(w http.ResponseWriter, r *http.Request) {
	u, ok := encryptionCaller(w, r, "rotate the encryption keys")
	if !ok {
		return
	}
	if s.encryption == nil {
		writeError(w, errEncryptionDisabled)
		return
	}
	added, n, err := s.encryption.Rotate(s.ctx, s.cfg.Store)
	if added != nil {
		s.log.Info("encryption keys rotated", "user", u.Name, "added", added, "config", s.encryption.Config().Path, "rewritten", n, "err", err)
	}
	s.answerEncryption(w, r, added, n, err)
}

// serveEncryptionReencrypt rewrites the stored values not written with
// their write key: what finishes an interrupted rotation, or a key put
// first by hand and the server restarted.
func (s *Server) serveEncryptionReencrypt(w http.ResponseWriter, r *http.Request) {
	u, ok := encryptionCaller(w, r, "re-encrypt stored objects")
	if !ok {
		return
	}
	if s.encryption == nil {
		writeError(w, errEncryptionDisabled)
		return
	}
	n, err := s.encryption.Reencrypt(s.ctx, s.cfg.Store)
	s.log.Info("stored objects re-encrypted", "user", u.Name, "rewritten", n, "err", err)
	s.answerEncryption(w, r, nil, n, err)
}

func (s *Server) answerEncryption(w http.ResponseWriter, r *http.Request, added []string, n int, err error) {
	if err != nil {
		if errors.Is(err, encryption.ErrNothingToRotate) {
			writeError(w, apierrors.NewBadRequest(err.Error()))
			return
		}
		if errors.Is(err, context.Canceled) {
			writeError(w, apierrors.NewServiceUnavailable("the server is shutting down"))
			return
		}
		writeError(w, apierrors.NewInternalError(fmt.Errorf("%w (%d values re-encrypted before)", err, n)))
		return
	}
	st, err := s.encryption.Status(r.Context())
	if err != nil {
		writeError(w, apierrors.NewInternalError(err))
		return
	}
	st.Added, st.Rewritten = added, n
	writeEncryptionStatus(w, st)
}

func writeEncryptionStatus(w http.ResponseWriter, st *encryption.Status) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	json.NewEncoder(w).Encode(st)
}

// storedStale says whether the value an update would leave as it is must
// be written anyway: it is not written with its resource's write key
// (kube-apiserver writes a stale value even when the object did not
// change).
func (s *Server) storedStale(ctx context.Context, res *resource, ri requestInfo, rev uint64) bool {
	return s.encryption != nil && s.encryption.Stale(ctx, res.key(ri.namespace, ri.name), rev)
}
