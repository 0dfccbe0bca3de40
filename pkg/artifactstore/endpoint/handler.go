package store

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

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
}

// Authorizer returns the job whose binding holds token. It refuses with an
// *AuthError (Unauthorized, Forbidden); any other error means it cannot
// decide now (answered with 503, the client retries).
type Authorizer func(ctx context.Context, token binding.Token) (Job, error)

// Stater is implemented by backends that know when an object was stored.
// HEAD responses carry its Last-Modified; without a Stater they carry the
// Unix epoch (minio-go's StatObject refuses a response without one).
type Stater interface {
	Stat(ctx context.Context, key string) (upload.ObjectInfo, time.Time, error)
}

// Response headers beyond S3's.
const (
	// HeaderPending is "true" on a HEAD answered with the key's pending
	// object (the latest upload, not yet promoted).
	HeaderPending = "X-Tether-Pending"
	// HeaderManifestVerified is "true" or "false" on a manifest PUT's
	// response.
	HeaderManifestVerified = "X-Tether-Manifest-Verified"
	// HeaderManifestMissing is the first missing entry's path (URL path
	// escaped) on a manifest PUT's response.
	HeaderManifestMissing = "X-Tether-Manifest-Missing"
)

// Handler serves PUT and HEAD of /<upload.Bucket>/<key> (docs/artifacts.md).
// Mount it with Route in front of an http.ServeMux: a ServeMux redirects
// paths with "." or ".." segments or doubled slashes to their cleaned form,
// which would turn a refused key into another key.
//
// Backend and Authorize are required. The callbacks run before the response
// is written, with a context that outlives the client's request by at most
// CallbackTimeout; keep them short (record, don't wait).
type Handler struct {
	Backend   upload.Backend
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
	OnManifest func(ctx context.Context, job Job, res ManifestResult) error
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
	// ManifestWorkers bounds the backend HEADs in flight while a manifest is
	// verified (default 8).
	ManifestWorkers int
	// OnRefused is called for every request answered with an error (a HEAD
	// of a missing key is an answer, not a refusal) with a metric reason:
	// the AuthError's Reason, or the S3 error code in snake case.
	OnRefused func(reason string)
	// OnDirect, if set, is called for every committed direct upload (after
	// OnVerified, which is called for it as for a PUT).
	OnDirect func(info upload.ObjectInfo)
	// Direct configures direct uploads (direct.go): bodies PUT straight to
	// a store that can presign, then committed here.
	Direct DirectOptions

	locks     keyLocks
	manifests manifestSlots
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

func (h *Handler) manifestWorkers() int {
	if h.ManifestWorkers > 0 {
		return h.ManifestWorkers
	}
	return 8
}

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
}

func (rq *request) fail(e *apiError) {
	if rq.r.ContentLength != 0 && !rq.bodyRead {
		// Refused before (or while) reading the body: close the connection
		// rather than read the rest of a body nobody wants. A client that
		// sent "Expect: 100-continue" then never sends it.
		rq.w.Header().Set("Connection", "close")
	}
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

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rq := &request{w: w, r: r, id: newRequestID(), start: time.Now(), rc: http.NewResponseController(w), onRefused: h.OnRefused}
	w.Header().Set("X-Amz-Request-Id", rq.id)
	rq.log = h.Log.WithValues("requestID", rq.id, "method", r.Method, "remote", r.RemoteAddr)

	if h.Backend == nil || h.Authorize == nil {
		rq.fail(&apiError{http.StatusInternalServerError, "InternalError", "the artifact endpoint is not configured (no backend or authorizer)"})
		return
	}
	if isDirectPath(r.URL.Path) {
		h.serveDirect(rq)
		return
	}
	if r.Method != http.MethodPut && r.Method != http.MethodHead {
		rq.fail(&apiError{http.StatusMethodNotAllowed, "MethodNotAllowed",
			r.Method + " is not supported: this endpoint takes single-request PUTs and HEADs of objects"})
		return
	}
	prefix := "/" + upload.Bucket
	p := r.URL.Path
	if p != prefix && !strings.HasPrefix(p, prefix+"/") {
		rq.fail(&apiError{http.StatusNotFound, "NoSuchBucket",
			"the only bucket is " + upload.Bucket + ": use path-style requests to /" + upload.Bucket + "/<job-id>/<path>"})
		return
	}
	rq.key = strings.TrimPrefix(strings.TrimPrefix(p, prefix), "/")
	rq.log = rq.log.WithValues("key", rq.key)
	if r.URL.RawQuery != "" {
		rq.fail(&apiError{http.StatusNotImplemented, "NotImplemented",
			"query parameters are not supported: this endpoint takes plain single-request PUTs and HEADs (no multipart, versions, ACLs or tagging)"})
		return
	}
	jobID, path, e := checkKey(rq.key)
	if e != nil {
		rq.fail(e)
		return
	}
	if r.Method == http.MethodHead {
		h.head(rq, jobID)
		return
	}
	h.put(rq, jobID, path)
}

func isDirectPath(p string) bool { return p == upload.PathAuthorize || p == upload.PathCommit }

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

func (h *Handler) stat(ctx context.Context, key string) (upload.ObjectInfo, time.Time, error) {
	if s, ok := h.Backend.(Stater); ok {
		return s.Stat(ctx, key)
	}
	info, err := h.Backend.Head(ctx, key)
	return info, time.Unix(0, 0), err
}

func (h *Handler) head(rq *request, jobID string) {
	if _, e := h.authorize(rq, jobID); e != nil {
		rq.fail(e)
		return
	}
	ctx := rq.r.Context()
	info, mod, err := h.stat(ctx, rq.key)
	pending := false
	if err == nil {
		// A pending object only exists next to a final one; it is the
		// latest upload, what the key holds once the binding succeeds.
		pinfo, pmod, perr := h.stat(ctx, PendingKey(rq.key))
		switch {
		case perr == nil:
			info, mod, pending = pinfo, pmod, true
		case !errors.Is(perr, upload.ErrNotFound):
			err = perr
		}
	}
	switch {
	case errors.Is(err, upload.ErrNotFound):
		rq.fail(&apiError{http.StatusNotFound, "NoSuchKey", "no object is stored under this key"})
		return
	case err != nil:
		rq.log.Error(err, "backend HEAD")
		rq.fail(backendReadError(err))
		return
	}
	hd := rq.w.Header()
	hd.Set("ETag", `"`+info.ETag+`"`)
	hd.Set("Content-Length", strconv.FormatInt(info.Size, 10))
	hd.Set("Content-Type", "application/octet-stream")
	hd.Set("Last-Modified", mod.UTC().Format(http.TimeFormat))
	if pending {
		hd.Set(HeaderPending, "true")
	}
	rq.w.WriteHeader(http.StatusOK)
	rq.log.V(1).Info("artifact HEAD", "status", http.StatusOK, "size", info.Size, "etag", info.ETag, "pending", pending)
}

// checkPutShape refuses PUTs this endpoint would misread: copies and
// aws-chunked bodies.
func checkPutShape(hd http.Header) *apiError {
	if hd.Get("X-Amz-Copy-Source") != "" {
		return &apiError{http.StatusNotImplemented, "NotImplemented",
			"server-side copy is not supported: upload the object's content"}
	}
	if strings.Contains(strings.ToLower(hd.Get("Content-Encoding")), "aws-chunked") ||
		strings.HasPrefix(hd.Get("X-Amz-Content-Sha256"), "STREAMING-") ||
		hd.Get("X-Amz-Decoded-Content-Length") != "" || hd.Get("X-Amz-Trailer") != "" {
		return &apiError{http.StatusNotImplemented, "NotImplemented",
			"aws-chunked bodies and trailers are not supported: send the plain body with Content-Length (minio-go: anonymous credentials, without TrailingHeaders)"}
	}
	return nil
}

// contentLength is the PUT's declared body size: a Content-Length is
// required, chunked transfer is refused.
func contentLength(r *http.Request) (int64, *apiError) {
	if len(r.TransferEncoding) > 0 || r.ContentLength < 0 || r.Header.Get("Content-Length") == "" {
		return 0, &apiError{http.StatusLengthRequired, "MissingContentLength",
			"send the object's size in Content-Length: chunked or length-less uploads are not supported (minio-go: pass the exact size with DisableMultipart)"}
	}
	return r.ContentLength, nil
}

func (h *Handler) put(rq *request, jobID, path string) {
	r := rq.r
	if e := checkPutShape(r.Header); e != nil {
		rq.fail(e)
		return
	}
	job, e := h.authorize(rq, jobID)
	if e != nil {
		rq.fail(e)
		return
	}
	if !job.Writable {
		rq.fail(notWritable(job))
		return
	}
	if e := checkNode(rq, job, path); e != nil {
		rq.fail(e)
		return
	}
	size, e := contentLength(r)
	if e != nil {
		rq.fail(e)
		return
	}
	manifestRank, isManifest := upload.ManifestRank(path, job.Nodes)
	switch {
	case isManifest && size > upload.MaxManifestSize:
		rq.fail(&apiError{http.StatusBadRequest, "EntityTooLarge",
			fmt.Sprintf("the manifest is %d bytes; manifests are at most %d bytes", size, upload.MaxManifestSize)})
		return
	case size > upload.MaxObjectSize:
		rq.fail(&apiError{http.StatusBadRequest, "EntityTooLarge",
			fmt.Sprintf("the object is %d bytes; a single PUT is at most %d bytes (5 GiB): split the artifact into smaller files", size, upload.MaxObjectSize)})
		return
	}
	dig, e := parseDigests(r.Header)
	if e != nil {
		rq.fail(e)
		return
	}
	rq.log = rq.log.WithValues("size", size)
	if isManifest {
		// Before its body is read (manifest.go): a job's manifests are read
		// a few at a time, each under its key's lock, so parallel PUTs of
		// one token cannot hold many 16 MiB bodies at once.
		release := h.manifests.take(job.Namespace + "/" + job.Name)
		if release == nil {
			rq.reason, rq.retryAfter = "manifest_rate_limited", time.Second
			rq.fail(&apiError{http.StatusServiceUnavailable, "SlowDown", fmt.Sprintf(
				"%d manifest uploads of this job are being read already (at most %d at once): retry after Retry-After",
				MaxManifestPutsPerJob, MaxManifestPutsPerJob)})
			return
		}
		defer release()
		unlock := h.locks.lock(rq.key)
		defer unlock()
	}

	// From here on the body is read.
	ctx := r.Context()
	// after is for work that must finish even if the client went away.
	after, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.callbackTimeout())
	defer cancel()
	// A non-manifest body's digests are chosen once its target is known.
	body := &bodyReader{r: r.Body, remaining: size, rc: rq.rc, idle: h.idleTimeout(), last: func() *apiError { return h.recheck(rq, job) }}
	if isManifest {
		body.w = dig.writer(true)
	}
	body.extend(time.Now())

	var manifest *upload.Manifest
	var buf []byte
	// known is the body's MD5 if it is known before storing: computed (the
	// manifest, read whole first) or claimed (Content-MD5).
	known := dig.contentMD5
	if isManifest {
		// Parsed as it streams in; the bytes are kept to be stored.
		raw := bytes.NewBuffer(make([]byte, 0, size))
		m, perr := decodeManifest(io.TeeReader(body, raw), jobID)
		// The rest (after the JSON, or after what made it malformed): the
		// digests cover the whole body.
		if _, err := io.Copy(raw, body); err != nil || body.err != nil {
			rq.fail(bodyError(body, size))
			return
		}
		buf = raw.Bytes()
		rq.bodyRead = true
		if e := dig.verify(); e != nil {
			rq.fail(e)
			return
		}
		known = dig.sum()
		if perr != nil {
			_ = h.manifestResult(after, job, ManifestResult{Key: rq.key, Rank: manifestRank, Err: "malformed manifest: " + perr.Error()})
			rq.fail(&apiError{http.StatusBadRequest, "MalformedManifest",
				"the manifest was not stored: " + perr.Error() + " (docs/artifacts.md describes the format)"})
			return
		}
		if e := checkManifestPod(rq, job, manifestRank, m); e != nil {
			rq.fail(e)
			return
		}
		manifest = m
	}

	if !isManifest { // a manifest's key is locked before its body is read
		unlock := h.locks.lock(rq.key)
		defer unlock()
	}
	existing, err := headOpt(ctx, h.Backend, rq.key)
	if err != nil {
		rq.log.Error(err, "backend HEAD", "object", rq.key)
		rq.fail(backendReadError(err))
		return
	}
	pkey := PendingKey(rq.key)
	// target is where the body goes: the key if it is free, else its pending
	// key; "" if the key, or its pending key (pendingHolds), already holds
	// exactly this content (known MD5): then nothing is stored again.
	target := rq.key
	var prior *upload.ObjectInfo // what target held before, if anything
	pendingHolds := false
	holds := func(o *upload.ObjectInfo) bool {
		return known != nil && o != nil && o.Size == size && o.ETag == hex.EncodeToString(known)
	}
	switch {
	case existing == nil:
	case holds(existing):
		target = ""
	default:
		target = pkey
		if prior, err = headOpt(ctx, h.Backend, pkey); err != nil {
			rq.log.Error(err, "backend HEAD", "object", pkey)
			rq.fail(backendReadError(err))
			return
		}
		if holds(prior) {
			target, pendingHolds = "", true
		}
	}
	rq.log = rq.log.WithValues("target", target)

	// A backend that hashes what it stores in this process (FSBackend)
	// computes the body's MD5 itself: hashing it here too would be the
	// same work twice.
	_, selfHashing := h.Backend.(bodyHasher)
	backendMD5 := selfHashing && !isManifest && target != ""
	if !isManifest {
		body.w = dig.writer(!backendMD5)
	}
	var stored upload.ObjectInfo
	var src io.Reader = body
	if isManifest {
		src = bytes.NewReader(buf)
	}
	if target == "" {
		_, err = io.Copy(io.Discard, src)
	} else {
		stored, err = h.Backend.Put(ctx, target, src, size)
	}
	if !isManifest && body.err != nil {
		h.cleanup(after, rq, target, prior)
		rq.fail(bodyError(body, size))
		return
	}
	if err != nil {
		h.cleanup(after, rq, target, prior)
		rq.log.Error(err, "backend PUT")
		rq.fail(backendError(err))
		return
	}
	if !isManifest {
		rq.bodyRead = body.remaining == 0
		if body.n != size {
			h.cleanup(after, rq, target, prior)
			rq.fail(&apiError{http.StatusInternalServerError, "InternalError",
				fmt.Sprintf("the store read %d of %d bytes without an error; nothing was kept: retry", body.n, size)})
			return
		}
		if backendMD5 && !dig.useSum(stored.ETag) {
			h.cleanup(after, rq, target, prior)
			rq.fail(&apiError{http.StatusInternalServerError, "InternalError",
				"the store reported an ETag that is not an MD5; nothing was kept: retry"})
			return
		}
		if e := dig.verify(); e != nil {
			h.cleanup(after, rq, target, prior)
			rq.fail(e)
			return
		}
	}
	etag := hex.EncodeToString(dig.sum())
	if target != "" && (stored.ETag != etag || stored.Size != size) {
		rq.log.Error(errors.New("stored object differs from the streamed body"), "ETag check failed",
			"streamedMD5", etag, "storedETag", stored.ETag, "storedSize", stored.Size)
		h.cleanup(after, rq, target, prior)
		rq.fail(&apiError{http.StatusInternalServerError, "InternalError",
			"the stored object's ETag does not match the MD5 of the body received; nothing was kept: retry"})
		return
	}

	// Authorized when it began, the PUT may have ended after the job's
	// artifacts became final: what it stored is not kept. A body checked
	// before its last bytes (all but the empty one) is not asked again,
	// so a PUT costs two authorizations, not three.
	if target != "" && !body.checked {
		if e := h.recheck(rq, job); e != nil {
			h.cleanup(after, rq, target, prior)
			rq.fail(e)
			return
		}
	}
	// The latest verified upload of a key wins: if it equals the final
	// object, a pending object from an earlier upload must not be promoted
	// over it.
	dropPending := target == "" && !pendingHolds || target == pkey && existing.ETag == etag && existing.Size == size
	if dropPending {
		if err := h.Backend.Delete(after, pkey); err != nil {
			rq.log.Error(err, "dropping the pending object", "object", pkey)
			rq.fail(&apiError{http.StatusServiceUnavailable, "ServiceUnavailable",
				"the object is verified but an older pending version could not be dropped; retry the upload"})
			return
		}
	}
	info := upload.ObjectInfo{Size: size, ETag: etag}
	if h.OnVerified != nil {
		h.OnVerified(after, job, rq.key, info)
	}

	hd := rq.w.Header()
	if manifest != nil {
		res, verr := verifyManifest(after, h.Backend, rq.key, manifestRank, manifest, h.manifestWorkers())
		res.SHA256 = sha256Hex(buf)
		rerr := h.manifestResult(after, job, res)
		rq.log = rq.log.WithValues("manifestVerified", res.Verified, "files", res.Files, "bytes", res.Bytes)
		if rerr != nil && verr == nil {
			rq.log.Error(rerr, "recording the manifest's verdict")
			rq.fail(&apiError{http.StatusServiceUnavailable, "ServiceUnavailable",
				"the manifest is stored and checked but its verdict could not be recorded on the binding: upload the manifest again"})
			return
		}
		if verr != nil {
			rq.log.Error(verr, "checking the manifest's entries")
			rq.fail(&apiError{http.StatusServiceUnavailable, "ServiceUnavailable",
				"the manifest is stored but its entries could not be checked: " + res.Err})
			return
		}
		hd.Set(HeaderManifestVerified, strconv.FormatBool(res.Verified))
		if len(res.Missing) > 0 {
			hd.Set(HeaderManifestMissing, url.PathEscape(res.Missing[0]))
			rq.log = rq.log.WithValues("firstMissing", res.Missing[0])
		}
	}
	_ = rq.rc.SetWriteDeadline(time.Now().Add(h.idleTimeout()))
	hd.Set("ETag", `"`+etag+`"`)
	hd.Set("Content-Length", "0")
	rq.w.WriteHeader(http.StatusOK)
	rq.log.V(1).Info("artifact stored", "status", http.StatusOK, "etag", etag,
		"pending", target == pkey && !dropPending || pendingHolds, "unchanged", target == "" || dropPending,
		"duration", time.Since(rq.start).String())
}

func (h *Handler) manifestResult(ctx context.Context, job Job, res ManifestResult) error {
	if h.OnManifest != nil {
		return h.OnManifest(ctx, job, res)
	}
	return nil
}

// cleanup removes what a failed PUT left at target, keeping target's earlier
// object if the failed PUT did not replace it (backends store atomically, so
// a PUT that failed while streaming leaves it in place).
func (h *Handler) cleanup(ctx context.Context, rq *request, target string, prior *upload.ObjectInfo) {
	if target == "" {
		return
	}
	cur, err := h.Backend.Head(ctx, target)
	switch {
	case errors.Is(err, upload.ErrNotFound):
		return
	case err == nil && prior != nil && cur == *prior:
		return
	}
	if err := h.Backend.Delete(ctx, target); err != nil {
		rq.log.Error(err, "removing a failed upload", "object", target)
	}
}

// headOpt is Backend.Head with "not found" as nil.
func headOpt(ctx context.Context, b upload.Backend, key string) (*upload.ObjectInfo, error) {
	info, err := b.Head(ctx, key)
	switch {
	case errors.Is(err, upload.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return &info, nil
}

func bodyError(b *bodyReader, size int64) *apiError {
	if b.refused != nil {
		return b.refused
	}
	return &apiError{http.StatusBadRequest, "IncompleteBody",
		fmt.Sprintf("the body ended after %d of the %d bytes in Content-Length (%v); nothing was kept: upload the file again", b.n, size, b.err)}
}

func backendError(err error) *apiError {
	switch {
	case errors.Is(err, ErrKeyConflict):
		return &apiError{http.StatusConflict, "KeyConflict",
			"the key cannot be stored next to an existing key (a file where a directory is needed, or the reverse): " + err.Error()}
	case errors.Is(err, ErrInvalidKey):
		return &apiError{http.StatusBadRequest, "InvalidArgument", "the store cannot hold this key: " + err.Error()}
	case errors.Is(err, ErrSlowDown):
		return &apiError{http.StatusServiceUnavailable, "SlowDown",
			"the artifact storage asks to slow down (S3 SlowDown or ServiceUnavailable); nothing was kept: retry after Retry-After"}
	}
	return &apiError{http.StatusInternalServerError, "InternalError", "storing the object failed; nothing was kept: retry"}
}

// errShortBody is a body that ended before Content-Length bytes.
var errShortBody = errors.New("unexpected end of body")

// errRefused is a body withheld from the backend: the job's artifacts
// became final while it streamed.
var errRefused = errors.New("the job's artifacts became final during the upload")

// bodyReader reads exactly remaining bytes of a request body into w (the
// digests, if any), and extends the connection's deadlines while the body makes
// progress.
type bodyReader struct {
	r         io.Reader
	remaining int64
	n         int64
	// err is the body's first error other than a clean end.
	err error
	w   io.Writer
	rc  *http.ResponseController
	// last, if set, is asked before the body's last bytes are handed on
	// (so before any backend can complete the object); refused is its
	// refusal, after which the body fails.
	last    func() *apiError
	refused *apiError
	checked bool
	// idle is how long a read may make no progress.
	idle     time.Duration
	extended time.Time
}

func (b *bodyReader) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.remaining <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.remaining {
		p = p[:b.remaining]
	}
	// Fill p (one TLS record is at most 16 KiB): the backend then writes
	// in the chunks it asked for, not a record at a time. Every read that
	// brings bytes counts as progress.
	var n int
	var err error
	for n < len(p) && err == nil {
		var m int
		m, err = b.r.Read(p[n:])
		n += m
		// Extending costs a timer update: do it at most every idle/4.
		if now := time.Now(); m > 0 && now.Sub(b.extended) > min(b.idle/4, time.Second) {
			b.extend(now)
		}
	}
	if n > 0 && int64(n) == b.remaining && b.last != nil {
		b.checked = true
		if e := b.last(); e != nil {
			b.refused, b.err = e, errRefused
			return 0, b.err
		}
	}
	if n > 0 {
		if b.w != nil {
			_, _ = b.w.Write(p[:n])
		}
		b.n += int64(n)
		b.remaining -= int64(n)
	}
	switch {
	case err == io.EOF && b.remaining > 0:
		b.err = errShortBody
		return n, b.err
	case err != nil && err != io.EOF:
		b.err = err
	}
	return n, err
}

// extend moves the connection's deadlines to now+idle. It fails silently for
// ResponseWriters without deadline support.
func (b *bodyReader) extend(now time.Time) {
	b.extended = now
	_ = b.rc.SetReadDeadline(now.Add(b.idle))
	_ = b.rc.SetWriteDeadline(now.Add(b.idle))
}

// bodyHasher is a backend whose Put computes the MD5 of exactly the bytes
// it reads from the body, in this process, and returns it as the ETag
// (FSBackend): the Handler takes that as the body's MD5.
type bodyHasher interface{ hashesBody() }

// keyLocks serializes requests on one key within this process.
type keyLocks struct {
	mu sync.Mutex
	m  map[string]*keyLock
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

func (l *keyLocks) lock(key string) (unlock func()) {
	l.mu.Lock()
	if l.m == nil {
		l.m = make(map[string]*keyLock)
	}
	k := l.m[key]
	if k == nil {
		k = &keyLock{}
		l.m[key] = k
	}
	k.refs++
	l.mu.Unlock()
	k.mu.Lock()
	return func() {
		k.mu.Unlock()
		l.mu.Lock()
		if k.refs--; k.refs == 0 {
			delete(l.m, key)
		}
		l.mu.Unlock()
	}
}
