package endpoint

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/upload"
)

// commitParts completes a direct upload in parts (directparts.go) once
// every part the store holds is the one claimed: its number, its size
// (the upload's part size, the last one's the rest) and its ETag the MD5
// of the bytes sent for it. The completion claims the body's CRC-64/NVME,
// which the store checks, and the completed object must report it. A
// refused commit keeps the upload when a part is missing or differs (the
// sidecar sends it again and commits again) and drops it when the whole
// body's checksum is wrong.
func (h *Handler) commitParts(after context.Context, rq *request, req upload.CommitRequest) {
	job, e := h.admitCommit(after, rq, req)
	if e == nil && !validCRC(req.CRC64NVME) {
		e = &apiError{http.StatusBadRequest, "InvalidDigest", "an upload in parts is committed with the body's CRC-64/NVME (crc64nvme, base64 of 8 bytes)"}
	}
	if e != nil {
		rq.fail(e)
		return
	}
	mp, _ := h.partsDirect(req.Size)
	if mp == nil {
		rq.fail(&apiError{http.StatusBadRequest, "InvalidUpload", "this object is not uploaded in parts here: authorize it again"})
		return
	}
	unlock := h.Store.Lock(req.Key)
	defer unlock()
	st, e := h.directRecord(rq, &job, req.Key, req.Size, req.Upload)
	if e != nil {
		rq.fail(e)
		return
	}
	parts, e := h.checkParts(rq, mp, st, req.Parts)
	if e != nil {
		rq.fail(e)
		return
	}
	stateKey := objects.MultipartStateKey(job.JobID, req.Key)
	if st.Target == req.Key {
		// The key was free at authorize; a PUT through the server may have
		// stored it since: this upload is then not placed over it.
		if cur, err := objects.HeadOpt(rq.r.Context(), h.Store.Backend(), req.Key); err != nil || cur != nil {
			h.abortRecorded(rq, mp, st, stateKey)
			rq.fail(&apiError{http.StatusConflict, "InvalidUpload", "the key was stored by another upload since this one was authorized; nothing was kept: authorize the object again"})
			return
		}
	}
	got, err := mp.CompleteMultipart(after, st.Target, st.UploadID, parts, req.CRC64NVME)
	if err != nil || got.Size != req.Size || got.CRC64NVME != req.CRC64NVME {
		rq.log.Error(err, "completing a direct upload in parts", "storedCRC64NVME", got.CRC64NVME, "storedSize", got.Size)
		if err == nil {
			h.cleanup(after, rq, st.Target, nil)
		}
		if errors.Is(err, objects.ErrSlowDown) {
			rq.fail(backendError(err))
			return
		}
		h.abortRecorded(rq, mp, st, stateKey)
		rq.fail(&apiError{http.StatusBadRequest, "BadDigest",
			"the store did not complete the parts as a body of " + fmt.Sprint(req.Size) + " bytes with CRC-64/NVME " + req.CRC64NVME + " (the bytes sent are not those claimed); nothing was kept: upload the file again"})
		return
	}
	if e := h.recheck(rq, job); e != nil {
		h.cleanup(after, rq, st.Target, nil)
		h.abortRecorded(rq, mp, st, stateKey)
		rq.fail(e)
		return
	}
	h.dropRecorded(after, rq, nil, nil, stateKey)
	if h.OnVerified != nil {
		h.OnVerified(after, job, req.Key, got)
	}
	if h.OnDirect != nil {
		h.OnDirect(got)
	}
	writeJSON(rq, upload.CommitResponse{ETag: got.ETag, Size: got.Size, CRC64NVME: got.CRC64NVME, Pending: st.Target != req.Key})
	rq.log.V(1).Info("direct upload in parts committed", "status", http.StatusOK, "etag", got.ETag, "target", st.Target,
		"parts", len(parts), "duration", time.Since(rq.start).String())
}

// checkParts returns the parts to complete st's upload with: exactly the
// claimed ones, each stored with its claimed MD5 and its size.
func (h *Handler) checkParts(rq *request, mp objects.Multiparter, st *objects.MultipartState, claimed []upload.CommitPart) ([]objects.Part, *apiError) {
	n := upload.Parts(st.Size, st.PartSize)
	if len(claimed) != n {
		return nil, &apiError{http.StatusBadRequest, "InvalidPart",
			fmt.Sprintf("the commit names %d parts; a body of %d bytes in parts of %d has %d", len(claimed), st.Size, st.PartSize, n)}
	}
	listed, err := mp.ListParts(rq.r.Context(), st.Target, st.UploadID)
	if err != nil {
		rq.log.Error(err, "backend ListParts")
		return nil, backendReadError(err)
	}
	stored := partSet(listed)
	parts := make([]objects.Part, n)
	for i, c := range claimed {
		size := min(st.PartSize, st.Size-int64(i)*st.PartSize)
		want := objects.Part{Number: i + 1, Size: size, ETag: c.MD5}
		if b, err := hex.DecodeString(c.MD5); c.Number != i+1 || err != nil || len(b) != 16 {
			return nil, &apiError{http.StatusBadRequest, "InvalidPart",
				fmt.Sprintf("parts[%d]: want part %d with its MD5 as 32 lowercase hex digits", i, i+1)}
		}
		if !stored[want] {
			return nil, &apiError{http.StatusBadRequest, "InvalidPart",
				fmt.Sprintf("part %d: the store holds no part of %d bytes with ETag %s (it was not uploaded, or other bytes were): upload the part again and commit", i+1, size, c.MD5)}
		}
		parts[i] = want
	}
	return parts, nil
}
