package endpoint

import (
	"net/http"
	"sync"
	"time"

	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/upload"
)

// largeRetryAfter is the Retry-After of a large upload refused for the
// bound: one part's time at a slow link, roughly.
const largeRetryAfter = 5 * time.Second

// largeSlots counts the bodies being stored in parts.
type largeSlots struct {
	mu sync.Mutex
	n  int
}

// largeSlot takes one of the replica's large-upload slots, or refuses the
// PUT before its body is read.
func (h *Handler) largeSlot(rq *request) (func(), *apiError) {
	limit := h.Store.Multipart().MaxConcurrent
	s := &h.large
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n >= limit {
		rq.reason, rq.retryAfter = reasonLargeUploads, largeRetryAfter
		return nil, &apiError{http.StatusServiceUnavailable, "SlowDown",
			"this control-plane replica is storing its limit of large uploads at once; nothing was stored: retry after Retry-After"}
	}
	s.n++
	return func() {
		s.mu.Lock()
		s.n--
		s.mu.Unlock()
	}, nil
}

// reasonLargeUploads is the refusal of a large upload past the replica's
// bound.
const reasonLargeUploads = "large_uploads"

// resume answers where an upload of req.Key may resume: the bytes the
// stored parts of its open upload hold, if that upload is of req.Size
// bytes. It only reads: a PUT that starts over drops the old upload.
func (h *Handler) resume(rq *request, req upload.ResumeRequest) {
	job, _, e := h.directJob(rq, req.Key, req.Size)
	if e != nil {
		rq.fail(e)
		return
	}
	mp := objects.MultipartOf(h.Store.Backend())
	if mp == nil || req.Size < h.multipartThreshold() {
		writeJSON(rq, upload.ResumeResponse{})
		return
	}
	res := upload.ResumeResponse{PartSize: upload.PartSize(req.Size, h.Store.Multipart().PartSize)}
	st, err := objects.ReadMultipartState(rq.r.Context(), h.Store.Backend(), objects.MultipartStateKey(job.JobID, req.Key))
	if err != nil {
		rq.log.Error(err, "reading the multipart record")
		rq.fail(backendReadError(err))
		return
	}
	k, e := h.resumable(rq, mp, st, req.Size)
	if e != nil {
		rq.fail(e)
		return
	}
	if k > 0 {
		res.Offset, res.CRC64NVME, res.PartSize = st.Covered(k), st.Parts[k-1].CRC64NVME, st.PartSize
	}
	writeJSON(rq, res)
}
