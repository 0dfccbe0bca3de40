package endpoint

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/upload"
)

// A body of MultipartThreshold bytes or more is stored as an S3 multipart
// upload (docs/artifacts.md, "Files in parts"): the client still sends one
// streaming PUT, and the endpoint cuts it into parts as it streams, each
// part sent to the store straight from the request (no part is held in
// memory) with its MD5 computed on the way and compared with the part ETag
// the store returns, the whole body's CRC-64/NVME computed across the
// parts. A record of the upload (objects.MultipartState) is written after
// each part, so a PUT that ends early leaves parts a later PUT resumes
// after (resume.go); the object appears at its key only when every part is
// stored and the store's full-object checksum equals the body's.

func (h *Handler) multipartThreshold() int64 { return h.Store.Multipart().Threshold }

// admitSize checks the object's size (the body's, plus a resume offset)
// and decides whether it is stored in parts.
func (p *putOp) admitSize() *apiError {
	h, hd := p.h, p.rq.r.Header
	if v := hd.Get(names.HeaderResumeOffset); v != "" {
		off, err := strconv.ParseInt(v, 10, 64)
		if err != nil || off <= 0 || p.isManifest {
			return &apiError{http.StatusBadRequest, "InvalidArgument",
				names.HeaderResumeOffset + " must be a positive byte offset, and a manifest is never resumed: send the whole body without it"}
		}
		p.offset, p.resumeCRC = off, hd.Get(names.HeaderResumeCRC64NVME)
		p.size = off + p.sent
		// What the headers claim is about the bytes sent, not the object.
		p.known, p.knownCRC = nil, ""
	}
	mp := objects.MultipartOf(h.Store.Backend())
	switch {
	case p.size > upload.MaxObjectSize || p.size < 0:
		return &apiError{http.StatusBadRequest, "EntityTooLarge",
			fmt.Sprintf("the object is %d bytes; S3 stores objects of at most %d bytes (5 TiB): exclude the file with the %s annotation", p.size, upload.MaxObjectSize, names.ExcludeAnnotation)}
	case !p.isManifest && mp != nil && p.size >= h.multipartThreshold() && (hd.Get(names.HeaderMultipart) != "" || p.size > upload.MaxSinglePutSize):
		// A client that does not say it verifies objects in parts (an
		// older sidecar) gets single PUTs below 5 GiB: it would take the
		// multipart ETag for a wrong MD5.
		p.multipart = true
	case p.offset > 0:
		return &apiError{http.StatusBadRequest, "InvalidArgument",
			"this upload is not stored in parts, so it cannot resume: send the whole body without " + names.HeaderResumeOffset}
	case p.size > upload.MaxSinglePutSize:
		return tooLargeForStore(p.size)
	}
	return nil
}

// tooLargeForStore refuses an object past a single PUT on a store that
// cannot verify objects stored in parts.
func tooLargeForStore(size int64) *apiError {
	return &apiError{http.StatusBadRequest, "EntityTooLarge",
		fmt.Sprintf("the object is %d bytes, over the %d bytes (5 GiB) of a single PUT, and this artifact store cannot verify objects stored in parts (its start-up probe saw no full-object CRC-64/NVME for them): use a store that keeps one (see docs/artifacts.md) or exclude the file with the %s annotation",
			size, upload.MaxSinglePutSize, names.ExcludeAnnotation)}
}

// storeParts stores the body as parts of the key's multipart upload and
// completes it. Parts stored before a failure are kept for a resumed PUT;
// anything that would mix bytes of two versions drops the upload.
func (p *putOp) storeParts() *apiError {
	if p.target == "" { // the key already holds exactly the claimed content
		return p.storeBody()
	}
	h, rq := p.h, p.rq
	release, e := h.largeSlot(rq)
	if e != nil {
		return e
	}
	defer release()
	mp := objects.MultipartOf(h.Store.Backend())
	st, e := p.beginParts(mp)
	if e != nil {
		return e
	}
	prefix := ""
	if n := len(st.Parts); n > 0 {
		prefix = st.Parts[n-1].CRC64NVME
	}
	whole, err := upload.ContinueCRC64NVME(prefix)
	if err != nil {
		return p.dropParts(st, &apiError{http.StatusInternalServerError, "InternalError", "the upload's record is damaged; nothing was kept: upload the file again"})
	}
	p.body.w = p.dig.writer(p.known != nil)
	if e := p.streamParts(mp, st, whole); e != nil {
		return e
	}
	if e := p.readTrailer(); e != nil {
		return p.dropParts(st, e)
	}
	p.rq.bodyRead = p.body.remaining == 0
	if e := p.checkStreamed(false, upload.ObjectInfo{}); e != nil {
		// The bytes sent are not what was claimed: the parts they went to
		// are not kept, so no later PUT resumes after them.
		return p.dropParts(st, e)
	}
	return p.completeParts(mp, st, upload.EncodeChecksum(whole.Sum(nil)))
}

// streamParts sends the rest of the body as parts, recording each.
func (p *putOp) streamParts(mp objects.Multiparter, st *objects.MultipartState, whole hash.Hash64) *apiError {
	h, rq, ctx := p.h, p.rq, p.rq.r.Context()
	stateKey := objects.MultipartStateKey(p.job.JobID, rq.key)
	for covered := st.Covered(len(st.Parts)); covered < p.size; {
		n, size := len(st.Parts)+1, min(st.PartSize, p.size-covered)
		sum := md5.New()
		part, err := mp.PutPart(ctx, st.Target, st.UploadID, n, io.TeeReader(io.LimitReader(p.body, size), io.MultiWriter(sum, whole)), size)
		switch {
		case p.body.err != nil:
			return bodyError(p.body, p.sent)
		case err != nil:
			rq.log.Error(err, "backend PUT of a part", "part", n)
			return backendError(err)
		}
		md5hex := hex.EncodeToString(sum.Sum(nil))
		if part.ETag != md5hex || part.Size != size {
			rq.log.Error(errors.New("stored part differs from the streamed bytes"), "the store's part ETag does not match",
				"part", n, "streamedMD5", md5hex, "storedETag", part.ETag, "storedSize", part.Size)
			return &apiError{http.StatusInternalServerError, "InternalError",
				fmt.Sprintf("the store's ETag of part %d does not match the MD5 of the bytes received; the upload keeps the parts before it: retry", n)}
		}
		st.Parts = append(st.Parts, objects.StatePart{Number: n, Size: size, MD5: md5hex, CRC64NVME: upload.EncodeChecksum(whole.Sum(nil))})
		if err := objects.WriteMultipartState(ctx, h.Store.Backend(), stateKey, st); err != nil {
			rq.log.Error(err, "recording a stored part", "part", n)
			return backendError(err)
		}
		covered += size
	}
	return nil
}

// completeParts completes the upload and checks what the store made of it:
// its full-object CRC-64/NVME must be the body's, its ETag (if it is a
// multipart ETag) the one the part MD5s give.
func (p *putOp) completeParts(mp objects.Multiparter, st *objects.MultipartState, crc string) *apiError {
	h, rq := p.h, p.rq
	parts := make([]objects.Part, len(st.Parts))
	md5s := make([][]byte, len(st.Parts))
	for i, sp := range st.Parts {
		parts[i] = objects.Part{Number: sp.Number, Size: sp.Size, ETag: sp.MD5}
		md5s[i], _ = hex.DecodeString(sp.MD5)
	}
	stored, err := mp.CompleteMultipart(p.after, st.Target, st.UploadID, parts, crc)
	if err != nil {
		rq.log.Error(err, "backend CompleteMultipartUpload", "parts", len(parts))
		if errors.Is(err, objects.ErrNoSuchUpload) {
			h.forgetParts(p, st)
		}
		return backendError(err)
	}
	want := upload.MultipartETag(md5s)
	if stored.Size != p.size || stored.CRC64NVME != crc || upload.IsMultipartETag(stored.ETag) && stored.ETag != want {
		rq.log.Error(errors.New("stored object differs from the streamed body"), "the store's digests do not match the parts",
			"streamedCRC64NVME", crc, "storedCRC64NVME", stored.CRC64NVME, "partsETag", want, "storedETag", stored.ETag, "storedSize", stored.Size)
		h.cleanup(p.after, rq, st.Target, p.prior)
		h.forgetParts(p, st)
		return &apiError{http.StatusInternalServerError, "InternalError",
			"the object the store completed from the parts does not have the body's CRC-64/NVME; nothing was kept: upload the file again"}
	}
	h.deleteRecord(p)
	p.etag, p.crc = stored.ETag, crc
	rq.log.V(1).Info("artifact stored in parts", "parts", len(parts), "resumedAt", p.offset)
	return nil
}

// beginParts returns the upload the body's parts go to: for a resumed PUT
// the key's open upload, cut back to the parts that end at the offset with
// the checksum the client claimed; else a new upload (an older one of the
// key is aborted: a new PUT starts over).
func (p *putOp) beginParts(mp objects.Multiparter) (*objects.MultipartState, *apiError) {
	h, rq, ctx := p.h, p.rq, p.rq.r.Context()
	stateKey := objects.MultipartStateKey(p.job.JobID, rq.key)
	st, err := objects.ReadMultipartState(ctx, h.Store.Backend(), stateKey)
	if err != nil {
		rq.log.Error(err, "reading the multipart record", "object", stateKey)
		return nil, backendReadError(err)
	}
	if p.offset > 0 {
		k, e := h.resumable(rq, mp, st, p.size)
		if e != nil {
			return nil, e
		}
		for j := k; j > 0; j-- {
			if st.Covered(j) == p.offset && st.Parts[j-1].CRC64NVME == p.resumeCRC && st.Target == p.target {
				st.Parts = st.Parts[:j]
				return st, nil
			}
		}
		return nil, &apiError{http.StatusConflict, "InvalidUpload",
			fmt.Sprintf("the stored parts of this key's upload do not hold the first %d bytes with the checksum sent (another upload of the key replaced them, the file changed, or they were aborted); nothing was stored: ask where to resume (POST %s) or send the whole file",
				p.offset, upload.PathResume)}
	}
	if st != nil {
		h.forgetParts(p, st)
	}
	id, err := mp.CreateMultipart(ctx, p.target)
	if err != nil {
		rq.log.Error(err, "backend CreateMultipartUpload")
		return nil, backendError(err)
	}
	st = &objects.MultipartState{Key: rq.key, Target: p.target, UploadID: id, Size: p.size,
		PartSize: upload.PartSize(p.size, h.Store.Multipart().PartSize), Created: time.Now().UTC()}
	if err := objects.WriteMultipartState(ctx, h.Store.Backend(), stateKey, st); err != nil {
		rq.log.Error(err, "recording a new multipart upload")
		if err := mp.AbortMultipart(p.after, p.target, id); err != nil {
			rq.log.Error(err, "aborting an unrecorded multipart upload", "object", p.target)
		}
		return nil, backendError(err)
	}
	return st, nil
}

// resumable is how many of st's first parts the store holds as recorded
// (0 if st is not an upload of size bytes).
func (h *Handler) resumable(rq *request, mp objects.Multiparter, st *objects.MultipartState, size int64) (int, *apiError) {
	if st == nil || st.Size != size || st.Key != rq.key {
		return 0, nil
	}
	listed, err := mp.ListParts(rq.r.Context(), st.Target, st.UploadID)
	switch {
	case errors.Is(err, objects.ErrNoSuchUpload):
		return 0, nil
	case err != nil:
		rq.log.Error(err, "backend ListParts")
		return 0, backendReadError(err)
	}
	// A recorded part counts if any listed upload of its number is it.
	stored := partSet(listed)
	k := 0
	for k < len(st.Parts) {
		sp := st.Parts[k]
		if !stored[objects.Part{Number: sp.Number, Size: sp.Size, ETag: sp.MD5}] {
			break
		}
		k++
	}
	return k, nil
}

// dropParts aborts st's upload and forgets it, then returns e.
func (p *putOp) dropParts(st *objects.MultipartState, e *apiError) *apiError {
	p.h.forgetParts(p, st)
	return e
}

// forgetParts aborts st's upload (if it is still open) and deletes its
// record.
func (h *Handler) forgetParts(p *putOp, st *objects.MultipartState) {
	h.dropRecorded(p.after, p.rq, objects.MultipartOf(h.Store.Backend()), st, objects.MultipartStateKey(p.job.JobID, p.rq.key))
}

// deleteRecord deletes the record of p's key's upload.
func (h *Handler) deleteRecord(p *putOp) {
	h.dropRecorded(p.after, p.rq, nil, nil, objects.MultipartStateKey(p.job.JobID, p.rq.key))
}

// dropRecorded aborts st's upload (unless mp or st is nil: it was
// completed) and deletes its record at stateKey. Failures are logged: the
// sweep of the job's uploads finds both.
func (h *Handler) dropRecorded(ctx context.Context, rq *request, mp objects.Multiparter, st *objects.MultipartState, stateKey string) {
	if mp != nil && st != nil {
		if err := mp.AbortMultipart(ctx, st.Target, st.UploadID); err != nil {
			rq.log.Error(err, "aborting a multipart upload", "object", st.Target)
		}
	}
	if err := h.Store.Backend().Delete(ctx, stateKey); err != nil && !errors.Is(err, upload.ErrNotFound) {
		rq.log.Error(err, "deleting a multipart record", "object", stateKey)
	}
}

// partSet is the parts a store listed, to look one up by number, size and
// ETag (a store may list several uploads of one part number: SeaweedFS
// does).
func partSet(listed []objects.Part) map[objects.Part]bool {
	set := make(map[objects.Part]bool, len(listed))
	for _, p := range listed {
		set[p] = true
	}
	return set
}

// headerMap is hd as a presigned request's headers in a JSON answer.
func headerMap(hd http.Header) map[string]string {
	if len(hd) == 0 {
		return nil
	}
	m := make(map[string]string, len(hd))
	for k := range hd {
		m[k] = hd.Get(k)
	}
	return m
}
