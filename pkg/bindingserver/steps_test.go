package bindingserver

import (
	"testing"
	"time"

	"github.com/tether-dev/tether/pkg/binding"
)

func TestStepClockMedian(t *testing.T) {
	var c stepClock
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	beat := func(s int, step int64) {
		c.observe(&binding.Progress{Step: &step}, t0.Add(time.Duration(s)*time.Second))
	}
	beat(0, 10)
	if c.median() != 0 {
		t.Fatalf("median %s after one step, want none", c.median())
	}
	// 2 s per step, reported 5 steps per heartbeat; one 60 s evaluation
	// pause for a single step: the median ignores it.
	for i, s := 1, 10; i <= 6; i, s = i+1, s+10 {
		beat(s, int64(10+5*i))
	}
	beat(130, 41)
	beat(140, 41) // no new step: no sample
	beat(150, 46)
	if got := c.median(); got != 2*time.Second {
		t.Errorf("median %s, want 2s", got)
	}
	// A trainer that restarts from an earlier step starts over from it.
	beat(160, 5)
	beat(170, 10)
	if got := c.median(); got != 2*time.Second {
		t.Errorf("median after a restart %s, want 2s", got)
	}
	c.observe(nil, t0.Add(200*time.Second))
	c.observe(&binding.Progress{}, t0.Add(210*time.Second))
	if c.step != 10 {
		t.Errorf("progress without a step moved the clock to step %d", c.step)
	}
}
