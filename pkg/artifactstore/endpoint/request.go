package endpoint

import (
	"errors"
	"net/http"
	"time"

	"github.com/go-logr/logr"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/binding"
)

// request is one request in flight.
type request struct {
	w     http.ResponseWriter
	r     *http.Request
	id    string
	key   string
	log   logr.Logger
	start time.Time
	rc    *http.ResponseController
	// bodyRead is set once the whole body was read.
	bodyRead bool
	// onRefused is Handler.OnRefused; reason overrides the label derived
	// from the error code, retryAfter the Retry-After of a 503 (slowdown.go).
	onRefused  func(reason string)
	reason     string
	retryAfter time.Duration
	// token is the request's token once authorized (recheck).
	token binding.Token
	// job is the token's binding once recognized, code the refusal's S3
	// error code: for the access record.
	job  *Job
	code string
}

func (rq *request) fail(e *apiError) {
	if rq.r.ContentLength != 0 && !rq.bodyRead {
		// Refused before (or while) reading the body: close the connection
		// rather than read the rest of a body nobody wants. A client that
		// sent "Expect: 100-continue" then never sends it.
		rq.w.Header().Set("Connection", "close")
	}
	rq.code = e.code
	setRetryAfter(rq.w.Header(), e, rq.retryAfter)
	writeError(rq.w, rq.r, rq.id, rq.key, e)
	if rq.onRefused != nil && (rq.r.Method != http.MethodHead || e.status != http.StatusNotFound) {
		reason := rq.reason
		if reason == "" {
			reason = refusalReason(e.code)
		}
		rq.onRefused(reason)
	}
	kv := []any{"status", e.status, "code", e.code, "message", e.message, "duration", time.Since(rq.start).String()}
	switch {
	case e.status >= 500:
		rq.log.Error(errors.New(e.code), "artifact request failed", kv...)
	case rq.r.Method == http.MethodHead && e.status == http.StatusNotFound:
		rq.log.V(1).Info("artifact request", kv...)
	default:
		rq.log.Info("artifact request refused", kv...)
	}
}

// tokenFromHeader returns the request's token: exactly one names.HeaderArtifactToken
// value of 64 lowercase hex characters.
func tokenFromHeader(h http.Header) (binding.Token, *apiError) {
	vs := h.Values(names.HeaderArtifactToken)
	if len(vs) == 0 {
		return "", &apiError{http.StatusUnauthorized, "AccessDenied",
			"the request has no " + names.HeaderArtifactToken + " header: send the job's token (the token Secret's \"token\" key) in it"}
	}
	token, err := binding.ParseToken(vs[0])
	if len(vs) > 1 || err != nil {
		return "", &apiError{http.StatusUnauthorized, "AccessDenied",
			"the " + names.HeaderArtifactToken + " header must hold exactly one 64-character lowercase hex token"}
	}
	return token, nil
}
