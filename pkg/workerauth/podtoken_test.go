package workerauth

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/binding"
)

// fakeReviewer answers as the API server would for the tokens it issued
// (by token), counting the reviews; down makes every review fail.
type fakeReviewer struct {
	pods    map[string]authnv1.UserInfo
	reviews atomic.Int32
	down    atomic.Bool
}

func (f *fakeReviewer) ReviewPodToken(_ context.Context, token string) (authnv1.TokenReviewStatus, error) {
	f.reviews.Add(1)
	if f.down.Load() {
		return authnv1.TokenReviewStatus{}, errors.New("connection refused")
	}
	u, ok := f.pods[token]
	if !ok {
		return authnv1.TokenReviewStatus{Error: "invalid bearer token"}, nil
	}
	return authnv1.TokenReviewStatus{Authenticated: true, User: u, Audiences: []string{names.PodTokenAudience}}, nil
}

// jwt is a token whose claims hold exp (the signature is the fake's concern).
func jwt(exp time.Time, n int) string {
	claims := base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf(`{"exp":%d,"n":%d}`, exp.Unix(), n)))
	return "eyJhbGciOiJSUzI1NiJ9." + claims + ".c2ln"
}

func podUser(ns, name, uid string) authnv1.UserInfo {
	return authnv1.UserInfo{Username: "system:serviceaccount:" + ns + ":default",
		Extra: map[string]authnv1.ExtraValue{podNameExtra: {name}, podUIDExtra: {uid}}}
}

func allowAll() (bool, time.Duration) { return true, 0 }

func TestProveClaim(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	tok0, tok1, other, unbound := jwt(now.Add(10*time.Minute), 0), jwt(now.Add(10*time.Minute), 1), jwt(now.Add(10*time.Minute), 2), jwt(now.Add(time.Hour), 3)
	rev := &fakeReviewer{pods: map[string]authnv1.UserInfo{
		tok0:    podUser("team-a", "train-node-0", "uid-0"),
		tok1:    podUser("team-a", "train-node-1", "uid-1"),
		other:   podUser("team-b", "train-node-0", "uid-b"),
		unbound: {Username: "system:serviceaccount:team-a:default"},
	}}
	g := &Gate{now: clock, pods: newPodProofs(rev, clock)}
	ctx := context.Background()

	cases := []struct {
		name   string
		claim  podClaim
		status int
		reason string
	}{
		{"own pod", podClaim{token: tok0, namespace: "team-a", name: "train-node-0", uid: "uid-0"}, 0, ""},
		{"own pod by UID only", podClaim{token: tok1, namespace: "team-a", uid: "uid-1"}, 0, ""},
		{"another rank's UID", podClaim{token: tok0, namespace: "team-a", uid: "uid-1"}, http.StatusForbidden, "pod_token_mismatch"},
		{"another rank's name", podClaim{token: tok0, namespace: "team-a", name: "train-node-1", uid: "uid-0"}, http.StatusForbidden, "pod_token_mismatch"},
		{"no UID", podClaim{token: tok0, namespace: "team-a"}, http.StatusForbidden, "pod_token_mismatch"},
		{"pod of another namespace", podClaim{token: other, namespace: "team-a", uid: "uid-b"}, http.StatusForbidden, "pod_token_mismatch"},
		{"no header", podClaim{namespace: "team-a", uid: "uid-0"}, http.StatusUnauthorized, "no_pod_token"},
		{"too long", podClaim{token: strings.Repeat("a", binding.MaxPodTokenLength+1), namespace: "team-a", uid: "uid-0"}, http.StatusUnauthorized, "malformed_pod_token"},
		{"not the API server's", podClaim{token: "forged", namespace: "team-a", uid: "uid-0"}, http.StatusUnauthorized, "pod_token_rejected"},
		{"not bound to a pod", podClaim{token: unbound, namespace: "team-a", uid: "uid-0"}, http.StatusForbidden, "pod_token_not_bound"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, ref := g.proveClaim(ctx, c.claim, allowAll)
			switch {
			case c.status == 0 && ref != nil:
				t.Fatalf("refused: %v", ref)
			case c.status == 0 && p.uid != c.claim.uid:
				t.Fatalf("proved pod %+v, want UID %s", p, c.claim.uid)
			case c.status != 0 && ref == nil:
				t.Fatalf("accepted (pod %+v), want %d %s", p, c.status, c.reason)
			case c.status != 0 && (ref.Status != c.status || ref.Reason != c.reason):
				t.Fatalf("refused %d %s (%s), want %d %s", ref.Status, ref.Reason, ref.Message, c.status, c.reason)
			}
			if ref != nil && c.claim.token != "" && strings.Contains(ref.Message, c.claim.token) {
				t.Fatalf("the refusal repeats the token: %s", ref.Message)
			}
		})
	}
}

// TestPodVerdictsOutliveAnOutage: a pod that proved its token keeps being
// served while the API server is down, until the token expires; a new
// token then waits (503 with Retry-After), and a review is made once per
// token, not per request.
func TestPodVerdictsOutliveAnOutage(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	tok, rotated := jwt(now.Add(10*time.Minute), 0), jwt(now.Add(18*time.Minute), 1)
	rev := &fakeReviewer{pods: map[string]authnv1.UserInfo{tok: podUser("team-a", "p", "uid-0"), rotated: podUser("team-a", "p", "uid-0")}}
	g := &Gate{now: clock, pods: newPodProofs(rev, clock)}
	claim := podClaim{token: tok, namespace: "team-a", name: "p", uid: "uid-0"}
	for range 100 {
		if _, ref := g.proveClaim(context.Background(), claim, allowAll); ref != nil {
			t.Fatal(ref)
		}
	}
	if n := rev.reviews.Load(); n != 1 {
		t.Fatalf("%d reviews for 100 requests with one token, want 1", n)
	}
	rev.down.Store(true)
	now = now.Add(9 * time.Minute)
	if _, ref := g.proveClaim(context.Background(), claim, allowAll); ref != nil {
		t.Fatalf("API server down, cached verdict: refused %v", ref)
	}
	_, ref := g.proveClaim(context.Background(), podClaim{token: rotated, namespace: "team-a", name: "p", uid: "uid-0"}, allowAll)
	if ref == nil || ref.Status != http.StatusServiceUnavailable || ref.RetryAfter <= 0 {
		t.Fatalf("API server down, new token: %+v, want 503 with Retry-After", ref)
	}
	now = now.Add(2 * time.Minute) // past the first token's exp
	if _, ref := g.proveClaim(context.Background(), claim, allowAll); ref == nil || ref.Status != http.StatusServiceUnavailable {
		t.Fatalf("expired token, API server down: %+v, want 503 (its verdict ended with the token)", ref)
	}
	rev.down.Store(false)
	delete(rev.pods, tok) // the API server refuses an expired token
	if _, ref := g.proveClaim(context.Background(), claim, allowAll); ref == nil || ref.Reason != "pod_token_rejected" {
		t.Fatalf("expired token reviewed again: %+v, want pod_token_rejected", ref)
	}
}

// TestPodReviewBudget: the reviews a job token causes are bounded by its
// own budget, and the verdicts held by MaxPodVerdicts.
func TestPodReviewBudget(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	rev := &fakeReviewer{pods: map[string]authnv1.UserInfo{}}
	g := &Gate{now: clock, pods: newPodProofs(rev, clock), limits: newTokenLimits()}
	budget := func() (bool, time.Duration) { return g.limits.allow(classPodReviews, "job-a", now) }
	var limited int
	for k := range PodReviewBurst + 50 {
		_, ref := g.proveClaim(context.Background(), podClaim{token: jwt(now.Add(time.Minute), k), namespace: "team-a", uid: "u"}, budget)
		if ref != nil && ref.Reason == "pod_review_limited" {
			limited++
			if ref.Status != http.StatusServiceUnavailable || ref.RetryAfter <= 0 {
				t.Fatalf("limited: %+v, want 503 with Retry-After", ref)
			}
		}
	}
	if limited != 50 || int(rev.reviews.Load()) != PodReviewBurst {
		t.Fatalf("%d limited and %d reviews for %d made-up tokens, want 50 and %d", limited, rev.reviews.Load(), PodReviewBurst+50, PodReviewBurst)
	}

	pp := newPodProofs(rev, clock)
	for k := range MaxPodVerdicts + 100 {
		pp.remember([32]byte{byte(k), byte(k >> 8), byte(k >> 16)}, provenPod{until: now.Add(time.Minute)}, now)
	}
	if n := pp.cached(); n != MaxPodVerdicts {
		t.Fatalf("%d verdicts held, want at most %d", n, MaxPodVerdicts)
	}
}
