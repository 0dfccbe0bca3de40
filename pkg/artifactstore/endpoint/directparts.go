package endpoint

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/upload"
)

// A direct upload in parts (docs/artifacts.md, "Files in parts"): for a
// file of at least the multipart threshold, authorize creates a multipart
// upload at the key (or its pending key, as a proxied PUT would choose)
// and answers presigned URLs of single parts, each signed for its size; the
// sidecar PUTs the parts straight to the store and commits with their
// MD5s; the server checks each stored part's ETag against its claimed MD5
// and completes the upload with the claimed CRC-64/NVME, which the store
// checks. The sidecar never completes anything, and no byte is copied: the
// completed upload is the object.

// partsDirect says whether a direct upload of size bytes goes in parts:
// then the backend signs parts and verifies objects stored in parts.
func (h *Handler) partsDirect(size int64) (objects.Multiparter, objects.PartPresigner) {
	mp := objects.MultipartOf(h.Store.Backend())
	pp, ok := h.Store.Backend().(objects.PartPresigner)
	if mp == nil || !ok || size < h.multipartThreshold() {
		return nil, nil
	}
	return mp, pp
}

// authorizeParts answers an authorize of a body stored in parts: a new
// upload, or the key's open upload of the same size (it resumes: the
// answer lists the parts the store holds), unless the request asks to
// restart (the sidecar found those parts are not its file's).
func (h *Handler) authorizeParts(rq *request, job *Job, req upload.AuthorizeRequest, mp objects.Multiparter, pp objects.PartPresigner) {
	key, size := req.Key, req.Size
	ctx := rq.r.Context()
	unlock := h.Store.Lock(key)
	defer unlock()
	stateKey := objects.MultipartStateKey(job.JobID, key)
	st, err := objects.ReadMultipartState(ctx, h.Store.Backend(), stateKey)
	if err != nil {
		rq.log.Error(err, "reading the multipart record")
		rq.fail(backendReadError(err))
		return
	}
	var stored []upload.StoredPart
	if st != nil && !req.Restart && st.Token != "" && st.Size == size && st.Key == key {
		parts, err := mp.ListParts(ctx, st.Target, st.UploadID)
		switch {
		case errors.Is(err, objects.ErrNoSuchUpload):
			st = nil
		case err != nil:
			rq.log.Error(err, "backend ListParts")
			rq.fail(backendReadError(err))
			return
		}
		for _, p := range parts {
			stored = append(stored, upload.StoredPart{Number: p.Number, Size: p.Size, ETag: p.ETag})
		}
	} else if st != nil {
		h.abortRecorded(rq, mp, st, stateKey)
		st = nil
	}
	if st == nil {
		if st = h.createDirectParts(rq, mp, job, key, size); st == nil {
			return
		}
	}
	urls, expires, e := h.presignParts(rq, pp, st, 1)
	if e != nil {
		rq.fail(e)
		return
	}
	writeJSON(rq, upload.AuthorizeResponse{Mode: upload.ModeDirectParts, Upload: st.Token, PartSize: st.PartSize,
		Parts: urls, Stored: stored, Expires: expires})
	rq.log.V(1).Info("direct upload in parts authorized", "upload", st.Token, "partSize", st.PartSize, "storedParts", len(stored))
}

// createDirectParts creates the upload and its record; nil after a
// refusal was answered.
func (h *Handler) createDirectParts(rq *request, mp objects.Multiparter, job *Job, key string, size int64) *objects.MultipartState {
	ctx := rq.r.Context()
	target := key
	switch existing, err := objects.HeadOpt(ctx, h.Store.Backend(), key); {
	case err != nil:
		rq.log.Error(err, "backend HEAD", "object", key)
		rq.fail(backendReadError(err))
		return nil
	case existing != nil:
		// As for a proxied PUT: a different version waits as the key's
		// pending object (the same content, verified at the commit, drops
		// it again).
		target = objects.PendingKey(key)
	}
	id, err := mp.CreateMultipart(ctx, target)
	if err != nil {
		rq.log.Error(err, "backend CreateMultipartUpload")
		rq.fail(backendError(err))
		return nil
	}
	st := &objects.MultipartState{Key: key, Target: target, UploadID: id, Size: size, Token: uploadID(key, size),
		PartSize: upload.PartSize(size, h.Store.Multipart().PartSize), Created: time.Now().UTC()}
	if err := objects.WriteMultipartState(ctx, h.Store.Backend(), objects.MultipartStateKey(job.JobID, key), st); err != nil {
		rq.log.Error(err, "recording a new multipart upload")
		if err := mp.AbortMultipart(context.WithoutCancel(ctx), target, id); err != nil {
			rq.log.Error(err, "aborting an unrecorded multipart upload", "object", target)
		}
		rq.fail(backendError(err))
		return nil
	}
	return st
}

// presignParts signs up to upload.PartsPerBatch part URLs from part from.
func (h *Handler) presignParts(rq *request, pp objects.PartPresigner, st *objects.MultipartState, from int) ([]upload.PartURL, time.Time, *apiError) {
	n := upload.Parts(st.Size, st.PartSize)
	if from < 1 || from > n {
		return nil, time.Time{}, &apiError{http.StatusBadRequest, "InvalidArgument",
			fmt.Sprintf("part %d: this upload has parts 1 to %d", from, n)}
	}
	ttl := h.Store.DirectTTL()
	expires := time.Now().Add(ttl).UTC()
	var urls []upload.PartURL
	for i := from; i <= n && len(urls) < upload.PartsPerBatch; i++ {
		size := min(st.PartSize, st.Size-int64(i-1)*st.PartSize)
		u, hd, err := pp.PresignPart(rq.r.Context(), st.Target, st.UploadID, i, size, ttl)
		if err != nil {
			rq.log.Error(err, "presigning a part")
			return nil, time.Time{}, &apiError{http.StatusServiceUnavailable, "ServiceUnavailable", "the server cannot presign an upload now; retry with backoff"}
		}
		urls = append(urls, upload.PartURL{Number: i, Size: size, URL: u.String(), Headers: headerMap(hd)})
	}
	return urls, expires, nil
}

// parts answers POST upload.PathParts: the next part URLs of an upload.
func (h *Handler) parts(rq *request, req upload.PartsRequest) {
	job, _, e := h.directJob(rq, req.Key, req.Size)
	if e != nil {
		rq.fail(e)
		return
	}
	mp, pp := h.partsDirect(req.Size)
	if mp == nil {
		rq.fail(&apiError{http.StatusBadRequest, "InvalidUpload", "this object is not uploaded in parts here: authorize it again"})
		return
	}
	st, e := h.directRecord(rq, job, req.Key, req.Size, req.Upload)
	if e != nil {
		rq.fail(e)
		return
	}
	urls, expires, e := h.presignParts(rq, pp, st, req.From)
	if e != nil {
		rq.fail(e)
		return
	}
	writeJSON(rq, upload.PartsResponse{Parts: urls, Expires: expires.Format(time.RFC3339)})
}

// directRecord is the record of the direct upload token of key, size.
func (h *Handler) directRecord(rq *request, job *Job, key string, size int64, token string) (*objects.MultipartState, *apiError) {
	st, err := objects.ReadMultipartState(rq.r.Context(), h.Store.Backend(), objects.MultipartStateKey(job.JobID, key))
	switch {
	case err != nil:
		rq.log.Error(err, "reading the multipart record")
		return nil, backendReadError(err)
	case st == nil || st.Token == "" || st.Token != token || st.Size != size || st.Key != key:
		return nil, &apiError{http.StatusBadRequest, "NoSuchUpload",
			"no upload in parts of this key and size was authorized with this id (it was committed, replaced by a newer one, or swept): authorize the object again"}
	}
	return st, nil
}

// abortRecorded aborts st's upload and deletes its record.
func (h *Handler) abortRecorded(rq *request, mp objects.Multiparter, st *objects.MultipartState, stateKey string) {
	h.dropRecorded(context.WithoutCancel(rq.r.Context()), rq, mp, st, stateKey)
}
