package binding

import (
	"errors"
	"net/http"
	"strings"
)

var errBadAuthorization = errors.New("the Authorization header must be \"Bearer <token>\" with a 64-character hex token")

// TokenFromHeader extracts the bearer token from h. It accepts exactly
// "Bearer <64 lowercase hex>" (the scheme case-insensitively), so a token can
// never be confused with anything else the client sent.
func TokenFromHeader(h http.Header) (string, error) {
	v := h.Get(HeaderAuthorization)
	if v == "" || len(v) > MaxTokenLength+len("Bearer ") {
		return "", errBadAuthorization
	}
	scheme, token, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || len(token) != 64 {
		return "", errBadAuthorization
	}
	for i := 0; i < len(token); i++ {
		c := token[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return "", errBadAuthorization
		}
	}
	return token, nil
}
