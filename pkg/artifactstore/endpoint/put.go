package endpoint

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/artifactstore/verify"
	"github.com/tether-dev/tether/pkg/upload"
)

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

// A PUT (put) runs in steps, each answering the request itself on failure:
// admitPut refuses what can be refused before the body (the token, the
// key's node, the size, the digests' syntax); a manifest is then read and
// decoded whole (readManifest, manifestput.go); chooseTarget picks, under
// the key's lock, where the body goes; storeBody streams it there and
// checks what was stored; keep decides the pending object's fate; the
// manifest's entries are checked (checkManifest) and the PUT answered.

// putOp is one PUT in flight.
type putOp struct {
	h    *Handler
	rq   *request
	job  Job
	path string
	size int64
	dig  *digests
	body *bodyReader
	// after is for work that must finish even if the client went away.
	after context.Context

	isManifest bool
	rank       int
	// scanned and buf are a manifest's scan (verify.Scan: its fields, not
	// its entries) and its bytes, from which its entries are read again.
	scanned *verify.Scanned
	buf     []byte
	// known is the body's MD5 if it is known before storing: computed (the
	// manifest, read whole first) or claimed (Content-MD5); knownCRC its
	// CRC-64/NVME likewise (x-amz-checksum-crc64nvme).
	known    []byte
	knownCRC string
	// chunked decodes an aws-chunked body (nil: a plain one); its trailer
	// carries the body's checksum.
	chunked *chunkedReader
	// verif is what proves a stored object (objects.Verification).
	verif objects.Verification

	// existing is what the key holds; target is where the body goes: the
	// key if it is free, else its pending key pkey; "" if the key, or its
	// pending key (pendingHolds), already holds exactly this content (known
	// MD5): then nothing is stored again. prior is what target held before.
	existing     *upload.ObjectInfo
	pkey, target string
	prior        *upload.ObjectInfo
	pendingHolds bool
	// etag is the body's MD5 once stored and checked, crc its CRC-64/NVME;
	// dropPending says an older pending object was dropped because the
	// body equals the key's.
	etag, crc   string
	dropPending bool

	// multipart: the body is stored in parts (multipart.go). sent is the
	// body's size; size the object's, which is more when the PUT resumes
	// an upload after the offset its stored parts cover (resumeCRC: their
	// bytes' CRC-64/NVME as the client found them).
	multipart bool
	sent      int64
	offset    int64
	resumeCRC string
}

func (h *Handler) put(rq *request, jobID, path string) {
	p, e := h.admitPut(rq, jobID, path)
	if e != nil {
		rq.fail(e)
		return
	}
	if p.isManifest {
		// Before its body is read (manifestput.go): a job's manifests are
		// read a few at a time, each under its key's lock, so parallel PUTs
		// of one token cannot hold many 16 MiB bodies at once.
		release, e := h.manifestSlot(rq, p.job)
		if e != nil {
			rq.fail(e)
			return
		}
		defer release()
		unlock := h.Store.Lock(rq.key)
		defer unlock()
	}

	// From here on the body is read.
	after, cancel := context.WithTimeout(context.WithoutCancel(rq.r.Context()), h.callbackTimeout())
	defer cancel()
	p.after = after
	// A non-manifest body's digests are chosen once its target is known.
	var src io.Reader = rq.r.Body
	if p.chunked != nil {
		src = p.chunked
	}
	p.body = &bodyReader{r: src, remaining: p.sent, rc: rq.rc, idle: h.idleTimeout(), last: func() *apiError { return h.recheck(rq, p.job) }}
	if p.isManifest {
		p.body.w = p.dig.writer(true)
	}
	p.body.extend(time.Now())
	if p.isManifest {
		if e := p.readManifest(); e != nil {
			rq.fail(e)
			return
		}
	} else { // a manifest's key is locked before its body is read
		unlock := h.Store.Lock(rq.key)
		defer unlock()
	}

	store := p.storeBody
	if p.multipart {
		store = p.storeParts
	}
	for _, step := range []func() *apiError{p.chooseTarget, store, p.keep} {
		if e := step(); e != nil {
			rq.fail(e)
			return
		}
	}
	if h.OnVerified != nil {
		h.OnVerified(after, p.job, rq.key, upload.ObjectInfo{Size: p.size, ETag: p.etag, CRC64NVME: p.crc})
	}
	if p.scanned != nil {
		if e := p.checkManifest(); e != nil {
			rq.fail(e)
			return
		}
	}
	p.answer()
}

// admitPut checks everything a PUT can be refused for before its body is
// read.
func (h *Handler) admitPut(rq *request, jobID, path string) (*putOp, *apiError) {
	r := rq.r
	chunked, decoded, trailers, e := chunkedShape(r.Header)
	if e != nil {
		return nil, e
	}
	if !chunked {
		if e := checkPutShape(r.Header); e != nil {
			return nil, e
		}
	} else if r.Header.Get("X-Amz-Copy-Source") != "" {
		return nil, checkPutShape(r.Header)
	}
	job, e := h.authorize(rq, jobID)
	if e != nil {
		return nil, e
	}
	if !job.Writable {
		return nil, notWritable(job)
	}
	node, e := checkNode(rq, job, path)
	if e != nil {
		return nil, e
	}
	if e := h.checkListed(rq, job, node, path); e != nil {
		return nil, e
	}
	size, e := contentLength(r)
	if e != nil {
		return nil, e
	}
	if chunked {
		// What the object holds: the body's data without its framing.
		if decoded > size {
			return nil, &apiError{http.StatusBadRequest, "InvalidArgument",
				fmt.Sprintf("x-amz-decoded-content-length %d is more than the body's Content-Length %d", decoded, size)}
		}
		size = decoded
	}
	rank, isManifest := upload.ManifestRank(path, job.Nodes)
	if isManifest && size > upload.MaxManifestSize {
		return nil, &apiError{http.StatusBadRequest, "EntityTooLarge",
			fmt.Sprintf("the manifest is %d bytes; manifests are at most %d bytes", size, upload.MaxManifestSize)}
	}
	dig, e := parseDigests(r.Header, trailers)
	if e != nil {
		return nil, e
	}
	p := &putOp{h: h, rq: rq, job: job, path: path, size: size, sent: size, dig: dig, isManifest: isManifest, rank: rank,
		known: dig.contentMD5, knownCRC: dig.claimedCRC(), verif: objects.VerificationOf(h.Store.Backend())}
	if e := p.admitSize(); e != nil {
		return nil, e
	}
	rq.log = rq.log.WithValues("size", p.size)
	if chunked {
		p.chunked = newChunkedReader(r.Body)
	}
	return p, nil
}

// readTrailer reads an aws-chunked body's trailer once its data was read,
// and takes the checksums it carries (checked with the others, verify).
func (p *putOp) readTrailer() *apiError {
	if p.chunked == nil {
		return nil
	}
	t, err := p.chunked.Trailer()
	if err != nil {
		return &apiError{http.StatusBadRequest, "IncompleteBody",
			"the aws-chunked body's end (its zero chunk and trailer) is malformed or missing: " + err.Error() + "; nothing was kept: upload the file again"}
	}
	return p.dig.fromTrailer(t)
}

// chooseTarget picks where the body goes (see putOp.target). The caller
// holds the key's lock.
func (p *putOp) chooseTarget() *apiError {
	h, rq, ctx := p.h, p.rq, p.rq.r.Context()
	existing, err := objects.HeadOpt(ctx, h.Store.Backend(), rq.key)
	if err != nil {
		rq.log.Error(err, "backend HEAD", "object", rq.key)
		return backendReadError(err)
	}
	p.existing, p.pkey, p.target = existing, objects.PendingKey(rq.key), rq.key
	holds := func(o *upload.ObjectInfo) bool {
		return (p.known != nil || p.knownCRC != "") && o != nil && p.verif.Holds(*o, p.size, hexOrEmpty(p.known), p.knownCRC)
	}
	switch {
	case existing == nil:
	case holds(existing):
		p.target = ""
	default:
		p.target = p.pkey
		if p.prior, err = objects.HeadOpt(ctx, h.Store.Backend(), p.pkey); err != nil {
			rq.log.Error(err, "backend HEAD", "object", p.pkey)
			return backendReadError(err)
		}
		if holds(p.prior) {
			p.target, p.pendingHolds = "", true
		}
	}
	rq.log = rq.log.WithValues("target", p.target)
	return nil
}

// storeBody streams the body to the target (or reads it to its end when
// there is none) and checks what was stored against what was received and
// claimed; on failure nothing of it is kept.
func (p *putOp) storeBody() *apiError {
	h, rq, body, dig := p.h, p.rq, p.body, p.dig
	// A backend that hashes what it stores in this process (FSBackend)
	// computes the body's MD5 itself: hashing it here too would be the
	// same work twice.
	_, selfHashing := h.Store.Backend().(objects.BodyHasher)
	backendMD5 := selfHashing && !p.isManifest && p.target != ""
	if !p.isManifest {
		body.w = dig.writer(!backendMD5)
	}
	var stored upload.ObjectInfo
	var err error
	var src io.Reader = body
	if p.isManifest {
		src = bytes.NewReader(p.buf)
	}
	cw, conditional := h.Store.Backend().(objects.ConditionalWriter)
	switch {
	case p.target == "":
		_, err = io.Copy(io.Discard, src)
	case conditional && p.target == rq.key:
		// The key was free when looked at: stored only if it still is, so
		// a PUT through another replica is never overwritten.
		stored, err = cw.PutIfAbsent(rq.r.Context(), p.target, src, p.size)
	default:
		stored, err = h.Store.Backend().Put(rq.r.Context(), p.target, src, p.size)
	}
	if errors.Is(err, objects.ErrPrecondition) {
		// Nothing of this body was stored; what is there is the other
		// writer's and stays.
		rq.reason, rq.retryAfter = "key_changed", time.Second
		rq.log.Info("the key was stored through another replica during this PUT; the client retries", "error", err.Error())
		return &apiError{http.StatusServiceUnavailable, "SlowDown",
			"the key was stored by another upload while this one streamed (another control-plane replica); nothing of this body was kept: retry after Retry-After"}
	}
	if !p.isManifest && body.err != nil {
		h.cleanup(p.after, rq, p.target, p.prior)
		return bodyError(body, p.sent)
	}
	if err != nil {
		h.cleanup(p.after, rq, p.target, p.prior)
		rq.log.Error(err, "backend PUT")
		return backendError(err)
	}
	if !p.isManifest {
		if e := p.readTrailer(); e != nil {
			h.cleanup(p.after, rq, p.target, p.prior)
			return e
		}
		rq.bodyRead = body.remaining == 0
		if e := p.checkStreamed(backendMD5, stored); e != nil {
			h.cleanup(p.after, rq, p.target, p.prior)
			return e
		}
	}
	p.etag, p.crc = hex.EncodeToString(dig.sum()), dig.crcSum()
	if p.target == "" {
		return nil
	}
	if p.verif.ByChecksum && stored.CRC64NVME == "" {
		// The PUT's answer did not carry the store's checksum: ask for it.
		if stored, err = h.Store.Backend().Head(p.after, p.target); err != nil {
			h.cleanup(p.after, rq, p.target, p.prior)
			rq.log.Error(err, "backend HEAD", "object", p.target)
			return backendReadError(err)
		}
	}
	if !p.verif.Holds(stored, p.size, p.etag, p.crc) {
		rq.log.Error(errors.New("stored object differs from the streamed body"), "the store's digests do not match the body",
			"streamedMD5", p.etag, "streamedCRC64NVME", p.crc, "storedETag", stored.ETag, "storedCRC64NVME", stored.CRC64NVME,
			"storedSize", stored.Size, "byChecksum", p.verif.ByChecksum)
		h.cleanup(p.after, rq, p.target, p.prior)
		return &apiError{http.StatusInternalServerError, "InternalError",
			"the stored object's " + p.verif.What() + " does not match the body received; nothing was kept: retry"}
	}
	return nil
}

func hexOrEmpty(b []byte) string {
	if b == nil {
		return ""
	}
	return hex.EncodeToString(b)
}

// checkStreamed checks a streamed body: all of it was read, and it has the
// digests the client claimed (its MD5 from the backend, backendMD5, if the
// backend hashed it).
func (p *putOp) checkStreamed(backendMD5 bool, stored upload.ObjectInfo) *apiError {
	if p.body.n != p.sent {
		return &apiError{http.StatusInternalServerError, "InternalError",
			fmt.Sprintf("the store read %d of %d bytes without an error; nothing was kept: retry", p.body.n, p.sent)}
	}
	if backendMD5 && !p.dig.useSum(stored.ETag) {
		return &apiError{http.StatusInternalServerError, "InternalError",
			"the store reported an ETag that is not an MD5; nothing was kept: retry"}
	}
	return p.dig.verify()
}

// keep decides whether what was stored stays: a PUT that ended after the
// job's artifacts became final is not kept, and an upload that equals the
// key's final object drops an older pending object.
func (p *putOp) keep() *apiError {
	h, rq := p.h, p.rq
	// Authorized when it began, the PUT may have ended after the job's
	// artifacts became final: what it stored is not kept. A body checked
	// before its last bytes (all but the empty one) is not asked again,
	// so a PUT costs two authorizations, not three.
	if p.target != "" && !p.body.checked {
		if e := h.recheck(rq, p.job); e != nil {
			h.cleanup(p.after, rq, p.target, p.prior)
			return e
		}
	}
	// The latest verified upload of a key wins: if it equals the final
	// object, a pending object from an earlier upload must not be promoted
	// over it.
	p.dropPending = p.target == "" && !p.pendingHolds || p.target == p.pkey && p.verif.Holds(*p.existing, p.size, p.etag, p.crc)
	if p.dropPending {
		if err := h.Store.Backend().Delete(p.after, p.pkey); err != nil {
			rq.log.Error(err, "dropping the pending object", "object", p.pkey)
			return &apiError{http.StatusServiceUnavailable, "ServiceUnavailable",
				"the object is verified but an older pending version could not be dropped; retry the upload"}
		}
	}
	return nil
}

// answer writes the PUT's success.
func (p *putOp) answer() {
	h, rq := p.h, p.rq
	hd := rq.w.Header()
	_ = rq.rc.SetWriteDeadline(time.Now().Add(h.idleTimeout()))
	hd.Set("ETag", `"`+p.etag+`"`)
	hd.Set(upload.ChecksumHeader, p.crc)
	hd.Set("Content-Length", "0")
	rq.w.WriteHeader(http.StatusOK)
	rq.log.V(1).Info("artifact stored", "status", http.StatusOK, "etag", p.etag,
		"pending", p.target == p.pkey && !p.dropPending || p.pendingHolds, "unchanged", p.target == "" || p.dropPending,
		"duration", time.Since(rq.start).String())
}

// cleanup removes what a failed PUT left at target, keeping target's earlier
// object if the failed PUT did not replace it (backends store atomically, so
// a PUT that failed while streaming leaves it in place).
func (h *Handler) cleanup(ctx context.Context, rq *request, target string, prior *upload.ObjectInfo) {
	if target == "" {
		return
	}
	cur, err := h.Store.Backend().Head(ctx, target)
	switch {
	case errors.Is(err, upload.ErrNotFound):
		return
	case err == nil && prior != nil && cur == *prior:
		return
	}
	if err := h.Store.Backend().Delete(ctx, target); err != nil {
		rq.log.Error(err, "removing a failed upload", "object", target)
	}
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
	case errors.Is(err, objects.ErrKeyConflict):
		return &apiError{http.StatusConflict, "KeyConflict",
			"the key cannot be stored next to an existing key (a file where a directory is needed, or the reverse): " + err.Error()}
	case errors.Is(err, objects.ErrInvalidKey):
		return &apiError{http.StatusBadRequest, "InvalidArgument", "the store cannot hold this key: " + err.Error()}
	case errors.Is(err, objects.ErrSlowDown):
		return &apiError{http.StatusServiceUnavailable, "SlowDown",
			"the artifact storage asks to slow down (S3 SlowDown or ServiceUnavailable); nothing was kept: retry after Retry-After"}
	}
	return &apiError{http.StatusInternalServerError, "InternalError", "storing the object failed; nothing was kept: retry"}
}
