package endpoint

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/artifactstore/verify"
)

// A manifest PUT is read whole before anything is stored: checked as it
// streams in (verify.Scan, which keeps no entry), its pod checked, then
// stored like any other object, and its entries decoded again from its
// bytes and checked in the backend (verify.ScannedManifest) before the PUT
// is answered with the verdict. What it holds meanwhile is reserved from
// the process's budget (budget.go) before its body is read.

// manifestSlots counts each job's manifest PUTs in flight: one job's token
// may have MaxManifestPutsPerJob read and checked at once; more are
// answered 503 SlowDown before their body is read.
type manifestSlots struct {
	mu sync.Mutex
	n  map[string]int
}

// MaxManifestPutsPerJob is how many manifest PUTs of one job (one token)
// the handler reads at once: two, so two nodes of a multi-node job that
// finish together both go on; the others retry after Retry-After.
const MaxManifestPutsPerJob = 2

// take reserves a slot for job, or returns nil when its slots are taken.
func (s *manifestSlots) take(job string) (release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n[job] >= MaxManifestPutsPerJob {
		return nil
	}
	if s.n == nil {
		s.n = map[string]int{}
	}
	s.n[job]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.n[job]--; s.n[job] == 0 {
			delete(s.n, job)
		}
	}
}

// manifestSlot takes one of job's manifest slots and reserves what the
// manifest will hold (ManifestCost of its Content-Length) from the
// process's budget, or refuses the PUT with 503 SlowDown when either is
// taken; release gives both back.
func (h *Handler) manifestSlot(rq *request, job Job) (release func(), e *apiError) {
	slot := h.manifests.take(job.Namespace + "/" + job.Name)
	if slot == nil {
		rq.reason, rq.retryAfter = "manifest_rate_limited", time.Second
		return nil, &apiError{http.StatusServiceUnavailable, "SlowDown", fmt.Sprintf(
			"%d manifest uploads of this job are being read already (at most %d at once): retry after Retry-After",
			MaxManifestPutsPerJob, MaxManifestPutsPerJob)}
	}
	free, refused := ManifestMemory.reserve(job.Namespace, ManifestCost(rq.r.ContentLength))
	if refused != nil {
		slot()
		rq.reason, rq.retryAfter = "manifest_rate_limited", ManifestMemoryRetryAfter
		scope := "replica"
		if refused.ofNamespace {
			scope = "namespace"
		}
		rq.log = rq.log.WithValues("manifestMemoryFull", scope)
		return nil, &apiError{http.StatusServiceUnavailable, "SlowDown", refused.message()}
	}
	return func() {
		free()
		slot()
	}, nil
}

// readManifest reads the manifest's whole body, checking it as it streams
// in and keeping the bytes to be stored (not its entries), and checks its
// digests, its format and its pod. A malformed manifest's verdict is
// recorded.
func (p *putOp) readManifest() *apiError {
	h, rq, body := p.h, p.rq, p.body
	raw := bytes.NewBuffer(make([]byte, 0, p.size))
	sc, perr := verify.Scan(io.TeeReader(body, raw), p.job.JobID)
	// The rest (after the JSON, or after what made it malformed): the
	// digests cover the whole body.
	if _, err := io.Copy(raw, body); err != nil || body.err != nil {
		return bodyError(body, p.size)
	}
	p.buf = raw.Bytes()
	if e := p.readTrailer(); e != nil {
		return e
	}
	rq.bodyRead = true
	if e := p.dig.verify(); e != nil {
		return e
	}
	p.known, p.knownCRC = p.dig.sum(), p.dig.crcSum()
	if perr != nil {
		_ = h.manifestResult(p.after, p.job, verify.ManifestResult{Key: rq.key, Rank: p.rank, Err: "malformed manifest: " + perr.Error()})
		return &apiError{http.StatusBadRequest, "MalformedManifest",
			"the manifest was not stored: " + perr.Error() + " (docs/artifacts.md describes the format)"}
	}
	// The manifest without its entries: checkManifest reads them again
	// from p.buf.
	if e := checkManifestPod(rq, p.job, p.rank, sc.Manifest()); e != nil {
		return e
	}
	p.scanned = sc
	return nil
}

// checkManifest checks the stored manifest's entries, records the verdict
// and puts it on the response.
func (p *putOp) checkManifest() *apiError {
	h, rq := p.h, p.rq
	res, verr := h.Store.CheckManifest(p.after, rq.key, p.rank, p.scanned, p.buf)
	res.SHA256 = verify.ManifestDigest(p.buf)
	rerr := h.manifestResult(p.after, p.job, res)
	rq.log = rq.log.WithValues("manifestVerified", res.Verified, "files", res.Files, "bytes", res.Bytes)
	if rerr != nil && verr == nil {
		rq.log.Error(rerr, "recording the manifest's verdict")
		return &apiError{http.StatusServiceUnavailable, "ServiceUnavailable",
			"the manifest is stored and checked but its verdict could not be recorded on the binding: upload the manifest again"}
	}
	if verr != nil {
		rq.log.Error(verr, "checking the manifest's entries")
		return &apiError{http.StatusServiceUnavailable, "ServiceUnavailable",
			"the manifest is stored but its entries could not be checked: " + res.Err}
	}
	hd := rq.w.Header()
	hd.Set(names.HeaderManifestVerified, strconv.FormatBool(res.Verified))
	if len(res.Missing) > 0 {
		hd.Set(names.HeaderManifestMissing, url.PathEscape(res.Missing[0]))
		rq.log = rq.log.WithValues("firstMissing", res.Missing[0])
	}
	return nil
}

func (h *Handler) manifestResult(ctx context.Context, job Job, res verify.ManifestResult) error {
	if h.OnManifest != nil {
		return h.OnManifest(ctx, job, res)
	}
	return nil
}
