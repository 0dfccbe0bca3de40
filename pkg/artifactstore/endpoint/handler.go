package endpoint

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/tether-dev/tether/pkg/artifactstore/pending"
	"github.com/tether-dev/tether/pkg/artifactstore/store"
	"github.com/tether-dev/tether/pkg/artifactstore/verify"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/upload"
)

// Job is what an Authorizer knows about the binding that holds a token.
type Job struct {
	// Namespace and Name identify the WorkerBinding.
	Namespace, Name string
	// JobID prefixes every key the token may write or read.
	JobID string
	// Writable is false once the job's artifacts are final: every manifest
	// verified with the TrainJob complete (being promoted), or the binding
	// Succeeded or Failed. Its artifacts can still be HEADed but no longer
	// PUT; State ("Succeeded", "Finishing/PromotingArtifacts") says why.
	Writable bool
	State    string
	// Nodes is how many nodes of the job are bound: with more than one,
	// nodes/<rank>/manifest.json is node rank's manifest (upload.NodesDir).
	Nodes int
	// Pods are the nodes' current registered pods' UIDs, by rank (nodes.go).
	Pods map[int]string
	// Verified are the nodes whose manifest for the current attempt the
	// binding records verified, by rank, with its SHA-256: such a node
	// writes only what that manifest lists (verifiedonly.go).
	Verified map[int]string
}

// Authorizer returns the job whose binding holds token. It refuses with an
// *AuthError (Unauthorized, Forbidden); any other error means it cannot
// decide now (answered with 503, the client retries).
type Authorizer func(ctx context.Context, token binding.Token) (Job, error)

// Handler serves PUT and HEAD of /<upload.Bucket>/<key> (docs/artifacts.md).
// Mount it with Route in front of an http.ServeMux: a ServeMux redirects
// paths with "." or ".." segments or doubled slashes to their cleaned form,
// which would turn a refused key into another key.
//
// Store and Authorize are required. The Handler is only the store's HTTP
// door: the Store owns the backend, the key locks, readiness, the access
// log and the direct-upload policy, and whoever else works on the store's
// objects takes the Store, not the Handler. The callbacks run before the
// response is written, with a context that outlives the client's request by
// at most CallbackTimeout; keep them short (record, don't wait).
type Handler struct {
	Store     *store.Store
	Authorize Authorizer
	// OnVerified is called for every PUT whose object is stored and
	// verified (also when the PUT was a no-op because the key already held
	// the same content, and for the manifest). key is the client's key, even
	// if the object went to its pending key.
	OnVerified func(ctx context.Context, job Job, key string, info upload.ObjectInfo)
	// OnManifest is called for every manifest PUT that passed
	// authentication and whose body arrived intact: with the checked result,
	// or with Verified false and Err set for a malformed manifest.
	// An error means the verdict could not be recorded: the PUT then fails
	// with 503 so the client uploads the manifest again.
	OnManifest func(ctx context.Context, job Job, res verify.ManifestResult) error
	// Log gets one line per request (V(1) for successes, errors at Error).
	// It never sees the token.
	Log logr.Logger
	// IdleTimeout is how long the body may make no progress before the
	// request fails (default 1 minute). The handler extends the connection's
	// read and write deadlines as the body streams, so a server's
	// ReadTimeout/WriteTimeout does not cut off a large upload.
	IdleTimeout time.Duration
	// CallbackTimeout bounds the work after the body was read: cleanup,
	// manifest verification, callbacks (default 2 minutes).
	CallbackTimeout time.Duration
	// OnRefused is called for every request answered with an error (a HEAD
	// of a missing key is an answer, not a refusal) with a metric reason:
	// the AuthError's Reason, or the S3 error code in snake case.
	OnRefused func(reason string)
	// OnDirect, if set, is called for every committed direct upload (after
	// OnVerified, which is called for it as for a PUT).
	OnDirect func(info upload.ObjectInfo)

	manifests manifestSlots
	large     largeSlots
	// listed keeps what verified manifests list (verifiedonly.go).
	listed pending.Listed
}

// Route sends requests for the artifact bucket (/<upload.Bucket> and below)
// and the direct-upload endpoints (upload.PathAuthorize, upload.PathCommit)
// to artifacts and everything else to next, without cleaning the path.
func Route(artifacts, next http.Handler) http.Handler {
	prefix := "/" + upload.Bucket
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := r.URL.Path; p == prefix || strings.HasPrefix(p, prefix+"/") || isDirectPath(p) {
			artifacts.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (h *Handler) idleTimeout() time.Duration {
	if h.IdleTimeout > 0 {
		return h.IdleTimeout
	}
	return time.Minute
}

func (h *Handler) callbackTimeout() time.Duration {
	if h.CallbackTimeout > 0 {
		return h.CallbackTimeout
	}
	return 2 * time.Minute
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.Store != nil && h.Store.LogsAccess() {
		aw := &accessWriter{ResponseWriter: w}
		var body *countingBody
		if r.Body != nil && r.Body != http.NoBody {
			body = &countingBody{ReadCloser: r.Body}
			r.Body = body
		}
		var rq *request
		defer func() {
			if rq != nil {
				h.Store.LogAccess(rq.record(aw.status, body))
			}
		}()
		rq = h.serve(aw, r)
		return
	}
	h.serve(w, r)
}

// serve answers one request and returns it, for its access record.
func (h *Handler) serve(w http.ResponseWriter, r *http.Request) *request {
	rq := &request{w: w, r: r, id: newRequestID(), start: time.Now(), rc: http.NewResponseController(w), onRefused: h.OnRefused}
	w.Header().Set("X-Amz-Request-Id", rq.id)
	rq.log = h.Log.WithValues("requestID", rq.id, "method", r.Method, "remote", r.RemoteAddr)

	if h.Store == nil || h.Store.Backend() == nil || h.Authorize == nil {
		rq.fail(&apiError{http.StatusInternalServerError, "InternalError", "the artifact endpoint is not configured (no backend or authorizer)"})
		return rq
	}
	// A replica that starts serves its sessions at once; its first
	// uploads wait out the store's probe (store.ReadyWait at most).
	if !h.Store.WaitReady(r.Context()) {
		rq.reason = reasonStoreNotProbed
		rq.fail(&apiError{http.StatusServiceUnavailable, "ServiceUnavailable",
			"this control-plane replica has not finished probing the artifact store yet (it started moments ago, or the store is unreachable): nothing was done; retry after Retry-After"})
		return rq
	}
	if isDirectPath(r.URL.Path) {
		h.serveDirect(rq)
		return rq
	}
	if r.Method != http.MethodPut && r.Method != http.MethodHead {
		rq.fail(&apiError{http.StatusMethodNotAllowed, "MethodNotAllowed",
			r.Method + " is not supported: this endpoint takes single-request PUTs and HEADs of objects"})
		return rq
	}
	prefix := "/" + upload.Bucket
	p := r.URL.Path
	if p != prefix && !strings.HasPrefix(p, prefix+"/") {
		rq.fail(&apiError{http.StatusNotFound, "NoSuchBucket",
			"the only bucket is " + upload.Bucket + ": use path-style requests to /" + upload.Bucket + "/<job-id>/<path>"})
		return rq
	}
	rq.key = strings.TrimPrefix(strings.TrimPrefix(p, prefix), "/")
	rq.log = rq.log.WithValues("key", rq.key)
	if r.URL.RawQuery != "" {
		rq.fail(&apiError{http.StatusNotImplemented, "NotImplemented",
			"query parameters are not supported: this endpoint takes plain single-request PUTs and HEADs (no multipart, versions, ACLs or tagging)"})
		return rq
	}
	jobID, path, e := checkKey(rq.key)
	if e != nil {
		rq.fail(e)
		return rq
	}
	if r.Method == http.MethodHead {
		h.head(rq, jobID)
		return rq
	}
	h.put(rq, jobID, path)
	return rq
}

func isDirectPath(p string) bool {
	return p == upload.PathAuthorize || p == upload.PathCommit || p == upload.PathResume || p == upload.PathParts
}

// authorize checks the token and that the key is under the job's prefix.
func (h *Handler) authorize(rq *request, jobID string) (Job, *apiError) {
	token, e := tokenFromHeader(rq.r.Header)
	if e != nil {
		return Job{}, e
	}
	job, err := h.Authorize(rq.r.Context(), token)
	if err != nil {
		return Job{}, authError(rq, err)
	}
	rq.token = token
	rq.job = &job
	rq.log = rq.log.WithValues("binding", job.Namespace+"/"+job.Name)
	if jobID != job.JobID {
		return Job{}, &apiError{http.StatusForbidden, "AccessDenied",
			fmt.Sprintf("this token belongs to job %q: its keys start with %q", job.JobID, job.JobID+"/")}
	}
	return job, nil
}

// authError is the answer to an Authorizer's error.
func authError(rq *request, err error) *apiError {
	var ae *AuthError
	var sd *SlowDownError
	switch {
	case errors.As(err, &ae):
		status := http.StatusForbidden
		if ae.Status == http.StatusUnauthorized {
			status = http.StatusUnauthorized
		}
		rq.reason = ae.Reason
		return &apiError{status, "AccessDenied", ae.Message}
	case errors.As(err, &sd):
		rq.reason, rq.retryAfter = "rate_limited", sd.RetryAfter
		return &apiError{http.StatusServiceUnavailable, "SlowDown", sd.Message}
	}
	rq.log.Error(err, "authorizing the token")
	return &apiError{http.StatusServiceUnavailable, "ServiceUnavailable",
		"the server cannot check the token now; retry with backoff"}
}
