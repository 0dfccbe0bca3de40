package endpoint

import (
	"fmt"
	"math"
	"runtime/debug"
	"sync"
	"time"

	"github.com/tether-dev/tether/pkg/artifactstore/verify"
	"github.com/tether-dev/tether/pkg/upload"
)

// A manifest PUT holds its body, and what checking it costs, until it is
// answered; the per-job limit (manifestSlots) alone let one tenant with
// many jobs take a replica past its memory limit. So what manifest PUTs
// hold is bounded per process, to a share of the Go runtime's memory limit
// (GOMEMLIMIT, which the control plane sets from the container's limit and
// follows), and each namespace to a share of that bound, so one tenant
// cannot take it all. A PUT reserves its cost before its body is read, or is
// answered 503 SlowDown with Retry-After without reading it.
//
// Hand-written rather than a golang.org/x/sync/semaphore.Weighted: the
// bound follows the Go memory limit (an in-place resize of the container
// moves it), a PUT takes from two bounds at once (its namespace's and the
// process's) or from neither, and the metrics read what each holds.

// DefaultManifestMemoryRatio is the share of the Go memory limit manifest
// PUTs may hold at once (--artifact-manifest-memory-ratio): with the
// chart's 1Gi container (GOMEMLIMIT 921.6 MiB) 230.4 MiB, nine manifests of
// the maximum size; the documented 10,000 bindings and sessions take 640
// MiB of RSS beside it.
const DefaultManifestMemoryRatio = 0.25

// ManifestMemoryNamespaceShare is the share of the bound one namespace's
// manifest PUTs may hold, and at least one manifest of the maximum size:
// 28.8 MiB of the chart's 230 MiB, one such manifest (or five of 1 MB, 37
// of 100 KB) at a time. Eight namespaces flooding at once fill the bound,
// one alone cannot; and the CPU one namespace's manifests take while they
// are checked is bounded with it (BenchmarkManifestFlood, on a busy
// machine: with two such manifests of the flooding namespace at a time,
// another tenant's manifest took 5 times as long as alone; with one, 1.5).
const ManifestMemoryNamespaceShare = 0.125

// assumedMemoryLimit stands for the Go memory limit where none is set (no
// container limit, no GOMEMLIMIT): the chart's limits.memory.
const assumedMemoryLimit = 1 << 30

// ManifestMemoryRetryAfter is the Retry-After of a manifest PUT refused
// for memory: about the time a manifest of the maximum size takes to check.
const ManifestMemoryRetryAfter = 2 * time.Second

// What a manifest PUT costs beyond its body (ManifestCost).
const (
	// minManifestEntry is fewer bytes than any entry Scan accepts takes
	// in the body: {"path":"a","md5":"<32 hex>"} and a comma.
	minManifestEntry = 48
	// entryCost is what Scan holds per entry (a path's digest in a set, at
	// most half full while it grows): measured 24 bytes at 100,000.
	entryCost = 64
	// requestCost is what any PUT holds beside its body: the connection's
	// buffers, an aws-chunked body's reader, the copy to the store.
	requestCost = 256 << 10
)

// ManifestCost is what a manifest PUT whose declared Content-Length is n
// reserves before its body is read: the body, which is held until it is
// stored and checked; the JSON decoder's buffer and a value decoded from
// it (at most verify.MaxManifestValue, the buffer growing to twice that);
// the digests of as many entries as the body could list; and the request's
// own buffers. A body is at most upload.MaxManifestSize, whatever the
// header says (an aws-chunked one's framing is not held).
func ManifestCost(n int64) int64 {
	n = min(max(n, 0), upload.MaxManifestSize)
	entries := min(upload.MaxManifestEntries, n/minManifestEntry)
	return n + 3*min(n, verify.MaxManifestValue) + entries*entryCost + requestCost
}

// MemoryBudget bounds the bytes manifest PUTs hold in a process, and each
// namespace's share of them.
type MemoryBudget struct {
	// memoryLimit is the Go memory limit (tests replace it).
	memoryLimit func() int64

	mu    sync.Mutex
	ratio float64
	held  int64
	byNS  map[string]int64
	// refused counts the PUTs refused because the process's bound, or
	// their namespace's share, was full.
	refused, refusedNS uint64
}

// ManifestMemory is the process's budget, which every Handler's manifest
// PUTs reserve from: the memory limit is the process's, whatever serves.
var ManifestMemory = NewMemoryBudget(DefaultManifestMemoryRatio)

// NewMemoryBudget bounds manifest PUTs to ratio of the Go memory limit.
func NewMemoryBudget(ratio float64) *MemoryBudget {
	return &MemoryBudget{ratio: ratio, byNS: map[string]int64{}, memoryLimit: func() int64 { return debug.SetMemoryLimit(-1) }}
}

// SetRatio sets the share of the Go memory limit manifest PUTs may hold.
func (b *MemoryBudget) SetRatio(ratio float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ratio = ratio
}

// Limits are the bound now, following the Go memory limit, and one
// namespace's share of it. Each holds at least one manifest of the maximum
// size, so such a manifest is read whenever nothing else is.
func (b *MemoryBudget) Limits() (total, namespace int64) {
	b.mu.Lock()
	ratio := b.ratio
	b.mu.Unlock()
	return b.limits(ratio)
}

func (b *MemoryBudget) limits(ratio float64) (total, namespace int64) {
	limit := b.memoryLimit()
	if limit <= 0 || limit == math.MaxInt64 {
		limit = assumedMemoryLimit
	}
	floor := ManifestCost(upload.MaxManifestSize)
	total = max(int64(float64(limit)*ratio), floor)
	return total, max(int64(float64(total)*ManifestMemoryNamespaceShare), floor)
}

// budgetRefusal says which bound refused a reservation.
type budgetRefusal struct {
	namespace        string
	need, held, have int64
	// ofNamespace: the namespace's share was full, not the process's bound.
	ofNamespace bool
}

func (r *budgetRefusal) message() string {
	if r.ofNamespace {
		return fmt.Sprintf("the manifest was not read: manifest uploads of namespace %s being checked on this control-plane replica hold %s "+
			"of the %s one namespace may hold at once, and this one needs %s (estimated from its Content-Length); "+
			"nothing was stored: retry after Retry-After", r.namespace, mib(r.held), mib(r.have), mib(r.need))
	}
	// The process's figure is every tenant's together: it is not told.
	return fmt.Sprintf("the manifest was not read: this control-plane replica is checking as many manifest uploads as its memory "+
		"for them allows (%s), and this one needs %s (estimated from its Content-Length); nothing was stored: retry after Retry-After",
		mib(r.have), mib(r.need))
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// reserve takes n bytes for namespace ns, or refuses them when its share
// or the process's bound would be exceeded. release gives them back (once).
func (b *MemoryBudget) reserve(ns string, n int64) (release func(), refused *budgetRefusal) {
	b.mu.Lock()
	defer b.mu.Unlock()
	total, share := b.limits(b.ratio)
	switch {
	case b.byNS[ns]+n > share:
		b.refusedNS++
		return nil, &budgetRefusal{namespace: ns, need: n, held: b.byNS[ns], have: share, ofNamespace: true}
	case b.held+n > total:
		b.refused++
		return nil, &budgetRefusal{namespace: ns, need: n, held: b.held, have: total}
	}
	b.held += n
	b.byNS[ns] += n
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.held -= n
			if b.byNS[ns] -= n; b.byNS[ns] <= 0 {
				delete(b.byNS, ns)
			}
		})
	}, nil
}

// MemoryStats is what a MemoryBudget holds and has refused (the metrics).
type MemoryStats struct {
	// Held is reserved now, ByNamespace by namespace (those holding any).
	Held        int64
	ByNamespace map[string]int64
	// Limit and NamespaceLimit are the bound and one namespace's share now.
	Limit, NamespaceLimit int64
	// Refused counts the PUTs refused because the bound was full,
	// RefusedNamespace those refused because their namespace's share was.
	Refused, RefusedNamespace uint64
}

// Stats returns what b holds now and what it has refused.
func (b *MemoryBudget) Stats() MemoryStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := MemoryStats{Held: b.held, ByNamespace: make(map[string]int64, len(b.byNS)), Refused: b.refused, RefusedNamespace: b.refusedNS}
	for ns, n := range b.byNS {
		s.ByNamespace[ns] = n
	}
	s.Limit, s.NamespaceLimit = b.limits(b.ratio)
	return s
}
