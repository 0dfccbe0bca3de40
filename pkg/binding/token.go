package binding

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Token is a job's credential towards the binding server and its artifact
// endpoint: 256 random bits as 64 lowercase hex characters. The controller
// issues it into the token Secret; the WorkerBinding keeps only its Hash;
// the sidecar sends it in a header, never in a URL.
//
// Every check of a token's shape is ParseToken, and every hash is Hash, on
// both halves of the protocol.
type Token string

// TokenLength is the length of a token in characters.
const TokenLength = 64

// ErrMalformedToken is a value that is not 64 lowercase hex characters.
var ErrMalformedToken = errors.New("not a 64-character lowercase hex token")

var errBadAuthorization = errors.New("the Authorization header must be \"Bearer <token>\" with a 64-character hex token")

// NewToken returns a fresh random token.
func NewToken() (Token, error) {
	b := make([]byte, TokenLength/2)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("reading random bytes for a token: %w", err)
	}
	return Token(hex.EncodeToString(b)), nil
}

// ParseToken accepts exactly the shape NewToken makes.
func ParseToken(s string) (Token, error) {
	if len(s) != TokenLength {
		return "", ErrMalformedToken
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return "", ErrMalformedToken
		}
	}
	return Token(s), nil
}

// Hash is the token's SHA-256, lowercase hex: what a WorkerBinding keeps
// (spec.tokenSHA256) and what the binding server looks a binding up by.
func (t Token) Hash() string {
	sum := sha256.Sum256([]byte(t))
	return hex.EncodeToString(sum[:])
}

// TokenFromHeader extracts the bearer token from h. It accepts exactly
// "Bearer <64 lowercase hex>" (the scheme case-insensitively), so a token can
// never be confused with anything else the client sent.
func TokenFromHeader(h http.Header) (Token, error) {
	v := h.Get(HeaderAuthorization)
	if v == "" || len(v) > MaxTokenLength+len("Bearer ") {
		return "", errBadAuthorization
	}
	scheme, token, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", errBadAuthorization
	}
	t, err := ParseToken(token)
	if err != nil {
		return "", errBadAuthorization
	}
	return t, nil
}

// BearerHeader is the Authorization value that carries t.
func (t Token) BearerHeader() string { return "Bearer " + string(t) }
