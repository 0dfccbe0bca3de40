package endpoint

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/upload"
)

// uploadID names a direct upload's pending object: a tag binding it to the
// key and size it was authorized for, and a random part so two uploads of
// one key never share an object.
func uploadID(key string, size int64) string {
	var r [16]byte
	_, _ = rand.Read(r[:])
	return uploadTag(key, size) + "." + hex.EncodeToString(r[:])
}

func uploadTag(key string, size int64) string {
	s := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d", key, size))
	return hex.EncodeToString(s[:16])
}

// checkUploadID checks that id was issued for key and size.
func checkUploadID(id, key string, size int64) *apiError {
	tag, r, ok := strings.Cut(id, ".")
	if !ok || len(r) != 32 || !objects.IsLowerHex(r) || tag != uploadTag(key, size) {
		return &apiError{http.StatusBadRequest, "InvalidUpload",
			"the upload id was not issued for this key and size: authorize the object again"}
	}
	return nil
}

// committedMarker records that upload id was committed: its URL stays valid
// for its TTL, and a second PUT through it must not be committed again with
// other bytes. The URL cannot write it (it signs the upload's key only).
func committedMarker(ukey string) string { return ukey + ".committed" }

// serveDirect serves POST upload.PathAuthorize and upload.PathCommit.
func (h *Handler) serveDirect(rq *request) {
	r := rq.r
	if r.Method != http.MethodPost {
		rq.fail(&apiError{http.StatusMethodNotAllowed, "MethodNotAllowed", r.URL.Path + " takes POST with a JSON body"})
		return
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, upload.MaxDirectRequest+1))
	switch {
	case err != nil:
		rq.fail(&apiError{http.StatusBadRequest, "IncompleteBody", "reading the request body: " + err.Error()})
		return
	case len(raw) > upload.MaxDirectRequest:
		rq.fail(&apiError{http.StatusBadRequest, "MalformedJSON", fmt.Sprintf("the request body is over %d bytes", upload.MaxDirectRequest)})
		return
	}
	rq.bodyRead = true
	if r.URL.Path == upload.PathAuthorize {
		var req upload.AuthorizeRequest
		if err := json.Unmarshal(raw, &req); err != nil {
			rq.fail(&apiError{http.StatusBadRequest, "MalformedJSON", "the body is not an authorize request ({\"key\":…,\"size\":…}): " + err.Error()})
			return
		}
		h.authorizeDirect(rq, req)
		return
	}
	if r.URL.Path == upload.PathParts {
		var req upload.PartsRequest
		if err := json.Unmarshal(raw, &req); err != nil {
			rq.fail(&apiError{http.StatusBadRequest, "MalformedJSON", "the body is not a parts request ({\"key\":…,\"size\":…,\"upload\":…,\"from\":…}): " + err.Error()})
			return
		}
		h.parts(rq, req)
		return
	}
	if r.URL.Path == upload.PathResume {
		var req upload.ResumeRequest
		if err := json.Unmarshal(raw, &req); err != nil {
			rq.fail(&apiError{http.StatusBadRequest, "MalformedJSON", "the body is not a resume request ({\"key\":…,\"size\":…}): " + err.Error()})
			return
		}
		h.resume(rq, req)
		return
	}
	var req upload.CommitRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		rq.fail(&apiError{http.StatusBadRequest, "MalformedJSON", "the body is not a commit request ({\"key\":…,\"size\":…,\"md5\":…,\"upload\":…}): " + err.Error()})
		return
	}
	h.commitDirect(rq, req)
}

// directJob checks the key, the token and that the binding is writable.
// The job is returned whenever the token is good for the key's job, even
// with an error (a finished binding).
func (h *Handler) directJob(rq *request, key string, size int64) (*Job, string, *apiError) {
	rq.key = key
	rq.log = rq.log.WithValues("key", key, "size", size)
	jobID, path, e := checkKey(key)
	if e != nil {
		return nil, "", e
	}
	job, e := h.authorize(rq, jobID)
	if e != nil {
		return nil, "", e
	}
	if !job.Writable {
		return &job, "", notWritable(job)
	}
	node, e := checkNode(rq, job, path)
	if e != nil {
		return &job, "", e
	}
	if e := h.checkListed(rq, job, node, path); e != nil {
		return &job, "", e
	}
	if err := upload.CheckObjectSize(size); err != nil {
		return &job, "", &apiError{http.StatusBadRequest, "EntityTooLarge", err.Error() + ": exclude the file with the " + names.ExcludeAnnotation + " annotation"}
	}
	return &job, path, nil
}

func (h *Handler) authorizeDirect(rq *request, req upload.AuthorizeRequest) {
	job, path, e := h.directJob(rq, req.Key, req.Size)
	if e != nil {
		rq.fail(e)
		return
	}
	p := h.Store.Presigner()
	_, isManifest := upload.ManifestRank(path, job.Nodes)
	if mp, pp := h.partsDirect(req.Size); p != nil && mp != nil && !isManifest && req.Parts {
		h.authorizeParts(rq, job, req, mp, pp)
		return
	}
	// Manifests go through the server: their verdict is recorded as they
	// are stored.
	if req.Size > upload.MaxSinglePutSize {
		// A presigned URL is one PUT: a larger body goes through the
		// endpoint, which stores it in parts (multipart.go).
		if objects.MultipartOf(h.Store.Backend()) == nil {
			rq.fail(tooLargeForStore(req.Size))
			return
		}
		writeJSON(rq, upload.AuthorizeResponse{Mode: upload.ModeProxy})
		return
	}
	if p == nil || isManifest {
		writeJSON(rq, upload.AuthorizeResponse{Mode: upload.ModeProxy})
		return
	}
	ttl := h.Store.DirectTTL()
	id := uploadID(req.Key, req.Size)
	u, hd, err := p.PresignPut(rq.r.Context(), objects.UploadKey(job.JobID, id), req.Size, ttl)
	if err != nil {
		rq.log.Error(err, "presigning a direct upload")
		rq.fail(&apiError{http.StatusServiceUnavailable, "ServiceUnavailable", "the server cannot presign an upload now; retry with backoff"})
		return
	}
	res := upload.AuthorizeResponse{Mode: upload.ModeDirect, URL: u.String(), Upload: id, Expires: time.Now().Add(ttl).UTC()}
	if objects.VerificationOf(h.Store.Backend()).ByChecksum {
		res.Verify = upload.VerifyCRC64NVME
	}
	res.Headers = headerMap(hd)
	writeJSON(rq, res)
	// The URL carries a signature: it is not logged.
	rq.log.V(1).Info("direct upload authorized", "upload", id, "ttl", ttl.String())
}

// commitDirect verifies a direct upload's pending object against what was
// authorized (key and size, by the upload id) and claimed (the MD5 of what
// the sidecar sent), then stores it under its key exactly as a proxied PUT
// would: over a free key, as the key's pending object over a different one,
// or not at all over the same content. Whatever the verdict, the upload's
// own object is deleted, so a rejected body never becomes an object.
func (h *Handler) commitDirect(rq *request, req upload.CommitRequest) {
	// The server-side copy of a large object takes time (and outlasts the
	// server's WriteTimeout): the deadlines grow with the size.
	after, cancel := context.WithTimeout(context.WithoutCancel(rq.r.Context()), upload.CommitTimeout(h.callbackTimeout(), max(req.Size, 0)))
	defer cancel()
	_ = rq.rc.SetWriteDeadline(time.Now().Add(upload.CommitTimeout(h.callbackTimeout(), max(req.Size, 0)) + h.idleTimeout()))
	if len(req.Parts) > 0 {
		h.commitParts(after, rq, req)
		return
	}
	job, e := h.admitCommit(after, rq, req)
	if e != nil {
		rq.fail(e)
		return
	}
	ukey := objects.UploadKey(job.JobID, req.Upload)
	rq.log = rq.log.WithValues("upload", req.Upload)
	unlockUpload := h.Store.Lock(ukey)
	defer unlockUpload()
	if e := h.checkNotCommitted(after, rq, ukey, req.Upload); e != nil {
		rq.fail(e)
		return
	}
	defer h.dropUpload(after, rq, ukey)
	got, e := h.checkUpload(rq, ukey, req)
	if e != nil {
		rq.fail(e)
		return
	}
	unlock := h.Store.Lock(req.Key)
	defer unlock()
	target, e := h.placeCommitted(after, rq, job, ukey, req.Key, got)
	if e != nil {
		rq.fail(e)
		return
	}
	if _, err := h.Store.Backend().Put(after, committedMarker(ukey), strings.NewReader(""), 0); err != nil {
		rq.log.Error(err, "recording the commit of a direct upload", "object", committedMarker(ukey))
	}
	if h.OnVerified != nil {
		h.OnVerified(after, job, req.Key, got)
	}
	if h.OnDirect != nil {
		h.OnDirect(got)
	}
	// The ETag answered is the verified MD5 (the store's own, where its
	// ETags are MD5s; the claim the store's checksum bound, where not).
	writeJSON(rq, upload.CommitResponse{ETag: req.MD5, Size: got.Size, CRC64NVME: got.CRC64NVME, Pending: target == objects.PendingKey(req.Key)})
	rq.log.V(1).Info("direct upload committed", "status", http.StatusOK, "etag", got.ETag, "target", target,
		"duration", time.Since(rq.start).String())
}

// admitCommit checks a commit request before the store is asked anything:
// the key, the token, the upload id, that the key is no manifest, and the
// claimed MD5's form. A refused commit of a good upload id drops the upload.
func (h *Handler) admitCommit(after context.Context, rq *request, req upload.CommitRequest) (Job, *apiError) {
	job, path, e := h.directJob(rq, req.Key, req.Size)
	if e == nil {
		e = checkUploadID(req.Upload, req.Key, req.Size)
	}
	if _, isManifest := upload.ManifestRank(path, nodesOf(job)); e == nil && isManifest {
		// As authorize answers: a manifest's verdict is recorded as it is stored.
		e = &apiError{http.StatusBadRequest, "InvalidRequest",
			"a manifest is uploaded through the server (PUT /" + upload.Bucket + "/<key>), never committed from a direct upload"}
	}
	if e == nil && (len(req.MD5) != 32 || !objects.IsLowerHex(req.MD5)) {
		e = &apiError{http.StatusBadRequest, "InvalidDigest", "md5 must be the body's MD5 as 32 lowercase hex digits"}
	}
	if e == nil && req.CRC64NVME != "" && !validCRC(req.CRC64NVME) {
		e = &apiError{http.StatusBadRequest, "InvalidDigest", "crc64nvme must be the body's CRC-64/NVME as S3 writes it (base64 of 8 bytes)"}
	}
	if e != nil {
		// The binding finished meanwhile: what was uploaded is dropped.
		if job != nil && checkUploadID(req.Upload, req.Key, req.Size) == nil {
			h.dropUpload(after, rq, objects.UploadKey(job.JobID, req.Upload))
		}
		return Job{}, e
	}
	return *job, nil
}

// checkNotCommitted refuses a second commit of upload id (stored under
// ukey), dropping what its URL wrote since. The caller holds ukey's lock.
func (h *Handler) checkNotCommitted(after context.Context, rq *request, ukey, id string) *apiError {
	switch m, err := objects.HeadOpt(rq.r.Context(), h.Store.Backend(), committedMarker(ukey)); {
	case err != nil:
		rq.log.Error(err, "backend HEAD", "object", committedMarker(ukey))
		return backendReadError(err)
	case m != nil:
		// What its URL wrote since is not this commit's: dropped.
		h.dropUpload(after, rq, ukey)
		return &apiError{http.StatusConflict, "InvalidUpload",
			"upload " + id + " was already committed: an upload is committed once; authorize the object again for a new one"}
	}
	return nil
}

// checkUpload returns the stored upload's size and ETag if they are what
// was authorized and claimed.
func (h *Handler) checkUpload(rq *request, ukey string, req upload.CommitRequest) (upload.ObjectInfo, *apiError) {
	got, err := h.Store.Backend().Head(rq.r.Context(), ukey)
	switch {
	case errors.Is(err, upload.ErrNotFound):
		return got, &apiError{http.StatusBadRequest, "NoSuchUpload",
			"nothing is stored for this upload (the presigned PUT failed, expired or was never sent): authorize the object again"}
	case err != nil:
		rq.log.Error(err, "backend HEAD", "object", ukey)
		return got, backendReadError(err)
	case got.Size != req.Size:
		return got, &apiError{http.StatusBadRequest, "IncompleteBody",
			fmt.Sprintf("the store holds %d bytes for this upload, not the %d authorized; nothing was kept: upload the file again", got.Size, req.Size)}
	case !objects.VerificationOf(h.Store.Backend()).Holds(got, req.Size, req.MD5, req.CRC64NVME):
		v := objects.VerificationOf(h.Store.Backend())
		if v.ByChecksum && (got.CRC64NVME == "" || req.CRC64NVME == "") {
			return got, &apiError{http.StatusBadRequest, "BadDigest",
				"the store's ETags are not MD5s and the upload cannot be verified by its CRC-64/NVME (the store has none for it, or the commit claims none): nothing was kept: upload the file through the server"}
		}
		return got, &apiError{http.StatusBadRequest, "BadDigest",
			"the stored upload's " + v.What() + " (ETag " + got.ETag + ", CRC-64/NVME " + got.CRC64NVME + ") is not that of the bytes sent (MD5 " + req.MD5 + ", CRC-64/NVME " + req.CRC64NVME + "); nothing was kept: upload the file again"}
	}
	return got, nil
}

// placeCommitted copies the verified upload ukey (holding got) to where a
// proxied PUT of key would have stored it and returns that target ("" when
// key already holds it). The caller holds key's lock.
func (h *Handler) placeCommitted(after context.Context, rq *request, job Job, ukey, key string, got upload.ObjectInfo) (string, *apiError) {
	ctx := rq.r.Context()
	existing, err := objects.HeadOpt(ctx, h.Store.Backend(), key)
	if err != nil {
		rq.log.Error(err, "backend HEAD", "object", key)
		return "", backendReadError(err)
	}
	pkey := objects.PendingKey(key)
	target := key
	switch {
	case existing == nil:
	case objects.VerificationOf(h.Store.Backend()).Same(*existing, got):
		target = ""
	default:
		target = pkey
	}
	var prior *upload.ObjectInfo // what target held before the copy
	if target == pkey {
		if prior, err = objects.HeadOpt(ctx, h.Store.Backend(), pkey); err != nil {
			rq.log.Error(err, "backend HEAD", "object", pkey)
			return "", backendReadError(err)
		}
	}
	if target != "" {
		c := objects.CopyCond{SrcETag: got.ETag, DstAbsent: target == key || prior == nil}
		if target == pkey && prior != nil {
			c.DstETag = prior.ETag
		}
		if e := h.copyVerified(after, rq, ukey, target, got, c); e != nil {
			return "", e
		}
		// The copy may end after the job's artifacts became final.
		if e := h.recheck(rq, job); e != nil {
			h.cleanup(after, rq, target, prior)
			return "", e
		}
	}
	// The latest verified upload wins (as in put): the same content as the
	// final object drops an older pending object.
	if target == "" {
		if err := h.Store.Backend().Delete(after, pkey); err != nil {
			rq.log.Error(err, "dropping the pending object", "object", pkey)
			return "", &apiError{http.StatusServiceUnavailable, "ServiceUnavailable",
				"the object is verified but an older pending version could not be dropped; retry the upload"}
		}
	}
	return target, nil
}

// copyVerified copies src over dst by a server-side copy and checks the
// copy; a copy that is not src is removed.
func (h *Handler) copyVerified(ctx context.Context, rq *request, src, dst string, want upload.ObjectInfo, c objects.CopyCond) *apiError {
	var err error
	if cw, ok := h.Store.Backend().(objects.ConditionalWriter); ok {
		// Where the store checks it: dst is still what was read (another
		// replica's commit or PUT is never overwritten).
		err = cw.CopyIf(ctx, src, dst, c)
	} else {
		err = h.Store.Backend().Copy(ctx, src, dst)
	}
	if errors.Is(err, objects.ErrPrecondition) {
		rq.reason, rq.retryAfter = "key_changed", time.Second
		return &apiError{http.StatusServiceUnavailable, "SlowDown",
			"the key was stored by another upload during this commit (another control-plane replica); nothing was kept: upload the file again"}
	}
	if err != nil {
		rq.log.Error(err, "promoting a direct upload", "object", dst)
		return backendError(err)
	}
	cur, err := h.Store.Backend().Head(ctx, dst)
	if err == nil && objects.VerificationOf(h.Store.Backend()).Same(cur, want) {
		return nil
	}
	rq.log.Error(err, "the promoted copy differs from the upload", "object", dst, "size", cur.Size, "etag", cur.ETag)
	if err := h.Store.Backend().Delete(ctx, dst); err != nil {
		rq.log.Error(err, "removing a bad copy", "object", dst)
	}
	return &apiError{http.StatusInternalServerError, "InternalError", "the store's copy of the upload differs from it; nothing was kept: retry"}
}

func (h *Handler) dropUpload(ctx context.Context, rq *request, key string) {
	if err := h.Store.Backend().Delete(ctx, key); err != nil {
		rq.log.Error(err, "deleting a direct upload's object", "object", key)
	}
}

func nodesOf(job *Job) int {
	if job == nil {
		return 0
	}
	return job.Nodes
}

func writeJSON(rq *request, v any) {
	b, _ := json.Marshal(v)
	hd := rq.w.Header()
	hd.Set("Content-Type", "application/json")
	hd.Set("Content-Length", fmt.Sprint(len(b)))
	rq.w.WriteHeader(http.StatusOK)
	_, _ = rq.w.Write(b)
}

// validCRC: s is a CRC-64/NVME in S3's form.
func validCRC(s string) bool {
	b, err := base64.StdEncoding.DecodeString(s)
	return err == nil && len(b) == 8
}
