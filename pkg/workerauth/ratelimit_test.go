package workerauth

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

func TestTokenLimitsPerTokenAndClass(t *testing.T) {
	l := newTokenLimits()
	now := time.Unix(1000, 0)
	// A sidecar's artifact peak (2,000 files a second, HEAD + PUT + presign
	// each) for one second is within the burst.
	for i := range 6000 {
		if ok, _ := l.allow(classArtifacts, "a", now); !ok {
			t.Fatalf("artifact request %d of a legitimate peak refused", i)
		}
	}
	for range ArtifactBurst - 6000 {
		l.allow(classArtifacts, "a", now)
	}
	ok, after := l.allow(classArtifacts, "a", now)
	if ok || after <= 0 {
		t.Fatalf("request past the artifact burst: ok %v retry after %s, want refused with a delay", ok, after)
	}
	// Another token and another class have their own buckets.
	if ok, _ := l.allow(classArtifacts, "b", now); !ok {
		t.Error("another token was refused")
	}
	if ok, _ := l.allow(classControl, "a", now); !ok {
		t.Error("the same token's control budget was spent by artifacts")
	}
	// The bucket refills.
	if ok, _ := l.allow(classArtifacts, "a", now.Add(after)); !ok {
		t.Errorf("refused again after the Retry-After delay %s", after)
	}
	for range ControlBurst - 1 {
		l.allow(classControl, "a", now)
	}
	if ok, after := l.allow(classControl, "a", now); ok || after < time.Second/ControlRate-time.Millisecond {
		t.Errorf("register past the burst: ok %v after %s, want refused for about %s", ok, after, time.Second/ControlRate)
	}
}

func TestTokenLimitsAreBounded(t *testing.T) {
	l := newTokenLimits()
	now := time.Unix(1000, 0)
	for i := range maxTrackedTokens + 100 {
		l.allow(classControl, fmt.Sprint(i), now)
	}
	if n := len(l.m); n > maxTrackedTokens {
		t.Fatalf("%d limiters held, want at most %d", n, maxTrackedTokens)
	}
	// Idle limiters are swept when room is needed.
	later := now.Add(tokenIdle + time.Second)
	l.allow(classControl, "new", later)
	if n := len(l.m); n != 1 {
		t.Errorf("%d limiters after the idle ones were swept, want 1", n)
	}
}

func TestAddressLimitsAreBoundedAndApart(t *testing.T) {
	tokens, addrs := newTokenLimits(), newAddressLimits()
	now := time.Unix(1000, 0)
	// One address spends its burst of unknown tokens...
	for i := range UnknownBurst {
		if ok, _ := addrs.allow(classControl, "10.0.0.1", now); !ok {
			t.Fatalf("unknown-token request %d within the burst refused", i)
		}
	}
	if ok, after := addrs.allow(classControl, "10.0.0.1", now); ok || after <= 0 {
		t.Fatalf("past the address's burst: ok %v retry after %s, want refused with a delay", ok, after)
	}
	// ...which is neither another address's nor a real token's budget.
	if ok, _ := addrs.allow(classControl, "10.0.0.2", now); !ok {
		t.Error("another address was refused")
	}
	if ok, _ := tokens.allow(classControl, "real", now); !ok {
		t.Error("a real token was refused")
	}
	for i := range maxTrackedAddresses + 100 {
		addrs.allow(classControl, fmt.Sprint(i), now)
	}
	if n := len(addrs.m); n > maxTrackedAddresses {
		t.Fatalf("%d address limiters held, want at most %d", n, maxTrackedAddresses)
	}
	if n := len(tokens.m); n != 1 {
		t.Errorf("%d token limiters after the address flood, want 1", n)
	}
}

func TestSourceAddressDropsThePort(t *testing.T) {
	for remote, want := range map[string]string{"10.1.2.3:4567": "10.1.2.3", "[fd00::1]:443": "fd00::1", "odd": "odd"} {
		if got := sourceAddress(&http.Request{RemoteAddr: remote}); got != want {
			t.Errorf("sourceAddress(%q) = %q, want %q", remote, got, want)
		}
	}
}
