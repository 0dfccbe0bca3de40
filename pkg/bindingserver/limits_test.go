package bindingserver

import (
	"fmt"
	"testing"
	"time"
)

func TestSentCommandsOnlyAcceptsSentOnce(t *testing.T) {
	var c sentCommands
	if c.take("1") {
		t.Error("an ack for a command never sent was taken")
	}
	c.sent("1")
	c.sent("1")
	if !c.take("1") {
		t.Error("the ack of a sent command was dropped")
	}
	if c.take("1") {
		t.Error("a second ack of the same command was taken")
	}
	for i := range 2 * maxOutstandingCommands {
		c.sent(fmt.Sprint(i))
	}
	if len(c.ids) != maxOutstandingCommands {
		t.Errorf("%d ids remembered, want at most %d", len(c.ids), maxOutstandingCommands)
	}
}

func TestFrameLimiterFromInterval(t *testing.T) {
	l := newFrameLimiter(10 * time.Second)
	if got := float64(l.Limit()); got != FramesPerInterval/10.0 {
		t.Errorf("rate %v frames/s, want %v", got, FramesPerInterval/10.0)
	}
	if l.Burst() != FrameBurst {
		t.Errorf("burst %d, want %d", l.Burst(), FrameBurst)
	}
}
