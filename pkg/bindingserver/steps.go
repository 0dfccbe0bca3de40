package bindingserver

import (
	"slices"
	"time"

	"github.com/tether-dev/tether/pkg/binding"
)

// stepSamples is how many recent step intervals the median is taken over:
// enough to ride out an evaluation or checkpoint pause, few enough to follow
// a job whose steps slow down.
const stepSamples = 15

// stepClock times a node's steps as its heartbeats report them: the median
// time per step over the recent advances, from which the default stall
// window follows. It is kept in memory by the replica holding the session
// (a new replica starts over, and the window's floor covers that).
type stepClock struct {
	step      int64
	at        time.Time
	intervals [stepSamples]time.Duration
	n, next   int
}

// observe notes the step a heartbeat at now reports (p may be nil).
func (c *stepClock) observe(p *binding.Progress, now time.Time) {
	if p == nil || p.Step == nil {
		return
	}
	step := *p.Step
	switch {
	case c.at.IsZero() || step < c.step:
		// The first step heard, or a trainer that resumed from an
		// earlier checkpoint: nothing to time yet.
	case step == c.step:
		return
	default:
		c.intervals[c.next] = now.Sub(c.at) / time.Duration(step-c.step)
		c.next = (c.next + 1) % stepSamples
		c.n = min(c.n+1, stepSamples)
	}
	c.step, c.at = step, now
}

// median is the median step interval (0: none timed yet).
func (c *stepClock) median() time.Duration {
	if c.n == 0 {
		return 0
	}
	s := slices.Clone(c.intervals[:c.n])
	slices.Sort(s)
	return s[c.n/2]
}
