package e2e

import (
	"sync"
	"testing"
	"time"
)

// The scenarios run in two phases. First the serial ones, one at a time
// (a test that does not call shared): each breaks something every job
// feels (a control-plane replica, kube-apiserver, etcd, the store, the
// binding network), needs a queue's quota to itself (preemption; scenario
// 17's ClusterQueues), or asserts that a server-wide counter does not move
// (scenario 6's admissions). Then every shared scenario at once: Go starts
// the tests that called t.Parallel when the last serial top-level test has
// ended. A shared scenario touches only its own namespaces and jobs, and
// reads only its own objects, per-job series, or counters no other
// scenario moves; the queues it uses hold every shared job at once
// (cluster-queue 12 CPUs, the real nodes' queue 2 CPUs), so none waits
// for quota.

// shared marks t as a scenario that runs beside the other shared ones. It
// must be the scenario's first call: t.Parallel pauses the test until the
// serial phase is over, and timed must start after that.
func shared(t *testing.T) {
	t.Parallel()
	phases.sharedStarted()
	t.Cleanup(phases.sharedEnded)
}

// phaseTimes records the wall time of each phase for the timing table.
type phaseTimes struct {
	sync.Mutex
	first, last time.Time // the shared phase's first start and last end
}

var phases phaseTimes

func (p *phaseTimes) sharedStarted() {
	p.Lock()
	defer p.Unlock()
	if p.first.IsZero() {
		p.first = time.Now()
	}
}

func (p *phaseTimes) sharedEnded() {
	p.Lock()
	defer p.Unlock()
	p.last = time.Now()
}

// record adds both phases to the timing table; the scenarios ran from
// start to end.
func (p *phaseTimes) record(start, end time.Time) {
	p.Lock()
	defer p.Unlock()
	if p.first.IsZero() {
		recordTiming("phase: serial scenarios", end.Sub(start))
		return
	}
	recordTiming("phase: serial scenarios", p.first.Sub(start))
	recordTiming("phase: shared scenarios, together", p.last.Sub(p.first))
}
