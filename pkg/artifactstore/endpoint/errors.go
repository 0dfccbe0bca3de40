package endpoint

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"net/http"
	"strings"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
)

// AuthError is what an Authorizer returns to refuse a token: Status is
// http.StatusUnauthorized (no binding holds the token, or it is being
// deleted) or http.StatusForbidden (the token is known but may not do this).
// Any other error from an Authorizer is answered with 503, so the client
// retries.
type AuthError struct {
	Status  int
	Message string
	// Reason labels the refusal in metrics (e.g. "trainjob_deleted");
	// empty means "access_denied".
	Reason string
}

func (e *AuthError) Error() string { return fmt.Sprintf("%d: %s", e.Status, e.Message) }

// Unauthorized refuses a token no binding holds (answered with 401).
func Unauthorized(format string, args ...any) error {
	return &AuthError{Status: http.StatusUnauthorized, Message: fmt.Sprintf(format, args...)}
}

// Forbidden refuses a known token for this request (answered with 403).
func Forbidden(format string, args ...any) error {
	return &AuthError{Status: http.StatusForbidden, Message: fmt.Sprintf(format, args...)}
}

// apiError is an S3-style error response.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

// errorBody is the S3 XML error document.
type errorBody struct {
	XMLName   xml.Name `xml:"Error"`
	Code      string   `xml:"Code"`
	Message   string   `xml:"Message"`
	Key       string   `xml:"Key,omitempty"`
	RequestID string   `xml:"RequestId"`
}

// writeError answers with e: an S3 XML error document, or for HEAD the
// status alone (a HEAD response has no body).
func writeError(w http.ResponseWriter, r *http.Request, requestID, key string, e *apiError) {
	h := w.Header()
	h.Del("ETag")
	if r.Method == http.MethodHead {
		w.WriteHeader(e.status)
		return
	}
	b, _ := xml.Marshal(errorBody{Code: e.code, Message: e.message, Key: key, RequestID: requestID})
	h.Set("Content-Type", "application/xml")
	h.Set("Content-Length", fmt.Sprint(len(xml.Header)+len(b)))
	if e.status == http.StatusMethodNotAllowed {
		h.Set("Allow", "PUT, HEAD")
	}
	w.WriteHeader(e.status)
	_, _ = w.Write([]byte(xml.Header))
	_, _ = w.Write(b)
}

func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return strings.ToUpper(hex.EncodeToString(b[:]))
}

// checkKey is objects.CheckKey with its refusal as the endpoint's answer.
func checkKey(key string) (jobID, path string, e *apiError) {
	jobID, path, ke := objects.CheckKey(key)
	if ke != nil {
		return "", "", &apiError{ke.Status, ke.Code, ke.Message}
	}
	return jobID, path, nil
}
