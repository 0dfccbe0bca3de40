package bindingserver

import (
	"slices"
	"sync"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/lifecycle"
)

// skippedReport is what a worker's heartbeats last said its scan skipped.
type skippedReport struct {
	entries []binding.SkippedEntry
	count   int
}

// skippedReports holds the last report per worker (keyed like the hub),
// apart from the hub's worker state: heartbeats carry it, the status writers
// put it on the binding (status.artifacts.skipped).
type skippedReports struct {
	mu sync.Mutex
	m  map[workerKey]skippedReport
}

// note records a heartbeat's report and tells whether it changed (a
// write is then due). Bindings that never skipped anything hold no entry.
func (r *skippedReports) note(key workerKey, entries []binding.SkippedEntry, count int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	old, had := r.m[key]
	if !had && count == 0 {
		return false
	}
	if had && old.count == count && slices.Equal(old.entries, entries) {
		return false
	}
	if r.m == nil {
		r.m = map[workerKey]skippedReport{}
	}
	r.m[key] = skippedReport{entries: slices.Clone(entries), count: count}
	return true
}

// apply puts the binding's last report on st.
func (r *skippedReports) apply(key workerKey, st *tetherv1.WorkerBindingStatus) bool {
	r.mu.Lock()
	rep, ok := r.m[key]
	if ok && rep.count == 0 {
		delete(r.m, key) // the report that clears the status is written once
	}
	r.mu.Unlock()
	return ok && lifecycle.SkippedReported(st, rep.entries, rep.count)
}

// forget drops a worker's report (its binding ended or moved away).
func (r *skippedReports) forget(key workerKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, key)
}
