package retry

import (
	"testing"
	"time"
)

func TestBackoffGrowsToMaxWithFullJitter(t *testing.T) {
	b := NewBackoff(500*time.Millisecond, 30*time.Second)
	b.randN = func(n int64) int64 { return n - 1 } // the top of the range
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second,
		8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	for i, w := range want {
		if got := b.Next(); got != w {
			t.Errorf("attempt %d: %v, want %v", i, got, w)
		}
	}
	for range 100 { // no overflow, however long the outage
		if got := b.Next(); got != 30*time.Second {
			t.Fatalf("after many attempts: %v", got)
		}
	}
	b.Reset()
	if got := b.Next(); got != 500*time.Millisecond {
		t.Errorf("after reset: %v", got)
	}
}

func TestBackoffJitterStaysInRange(t *testing.T) {
	b := NewBackoff(time.Millisecond, 8*time.Millisecond)
	var low, high bool
	for i := range 2000 {
		ceil := b.Ceiling()
		d := b.Next()
		if d < 0 || d > ceil {
			t.Fatalf("draw %d: %v outside [0, %v]", i, d, ceil)
		}
		low = low || d < ceil/2
		high = high || d > ceil/2
		if i%10 == 9 {
			b.Reset()
		}
	}
	if !low || !high {
		t.Error("the jitter does not spread over the range")
	}
}

func TestNewBackoffDefaults(t *testing.T) {
	b := NewBackoff(0, 0)
	if b.initial != DefaultBackoffInitial || b.max != DefaultBackoffInitial {
		t.Errorf("NewBackoff(0, 0) = %+v", b)
	}
}
