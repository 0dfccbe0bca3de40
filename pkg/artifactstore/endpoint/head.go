package endpoint

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/upload"
)

func (h *Handler) stat(ctx context.Context, key string) (upload.ObjectInfo, time.Time, error) {
	if s, ok := h.Store.Backend().(objects.Stater); ok {
		return s.Stat(ctx, key)
	}
	info, err := h.Store.Backend().Head(ctx, key)
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
		pinfo, pmod, perr := h.stat(ctx, objects.PendingKey(rq.key))
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
	if info.CRC64NVME != "" {
		hd.Set(upload.ChecksumHeader, info.CRC64NVME)
	}
	hd.Set("Content-Length", strconv.FormatInt(info.Size, 10))
	hd.Set("Content-Type", "application/octet-stream")
	hd.Set("Last-Modified", mod.UTC().Format(http.TimeFormat))
	if pending {
		hd.Set(names.HeaderPending, "true")
	}
	rq.w.WriteHeader(http.StatusOK)
	rq.log.V(1).Info("artifact HEAD", "status", http.StatusOK, "size", info.Size, "etag", info.ETag, "pending", pending)
}
