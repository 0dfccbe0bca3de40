package workerauth

import (
	"context"
	"net/http"
	"testing"
	"time"

	"golang.org/x/time/rate"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// TestCachedVerdictDiesWithItsPod: a verdict is used without a review only
// while its pod exists with the reviewed UID. Deleted, or recreated under
// its name, the pod's token is refused (pod_gone) and not reviewed again; a
// pod the cache lacks is looked up on the API server, at most once per
// podLiveRecheck.
func TestCachedVerdictDiesWithItsPod(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	ctx := context.Background()
	tok, other := jwt(now.Add(10*time.Minute), 0), jwt(now.Add(10*time.Minute), 1)
	rev := &fakeReviewer{pods: map[string]authnv1.UserInfo{
		tok: podUser("team-a", "p", "uid-0"), other: podUser("team-a", "q", "uid-q")}}
	pod := func(name, uid string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, UID: types.UID(uid)}}
	}
	cache := fake.NewClientBuilder().WithObjects(pod("p", "uid-0")).Build()
	live := fake.NewClientBuilder().WithObjects(pod("p", "uid-0"), pod("q", "uid-q")).Build()
	reads := &countingReader{Reader: live}
	g := &Gate{now: clock, pods: newPodProofs(rev, clock), cache: cache, live: reads, liveLookups: rate.NewLimiter(liveLookupRate, liveLookupBurst)}
	claim := podClaim{token: tok, namespace: "team-a", name: "p", uid: "uid-0"}

	for range 10 {
		if _, ref := g.proveClaim(ctx, claim, allowAll); ref != nil {
			t.Fatalf("the pod exists: refused %v", ref)
		}
	}
	if reads.n != 0 {
		t.Fatalf("%d API reads for a pod the cache holds, want none", reads.n)
	}
	// Not in the cache (created a moment ago, or not a trainer pod): the
	// API server says, once per podLiveRecheck.
	for range 5 {
		if _, ref := g.proveClaim(ctx, podClaim{token: other, namespace: "team-a", name: "q", uid: "uid-q"}, allowAll); ref != nil {
			t.Fatalf("a pod the cache lacks: refused %v", ref)
		}
	}
	if n := rev.reviews.Load(); n != 2 {
		t.Fatalf("%d reviews, want one per token", n)
	}
	if reads.n != 1 {
		t.Fatalf("%d API reads for a pod the cache lacks, within %s: want 1", reads.n, podLiveRecheck)
	}

	// Recreated under its name: another UID.
	for _, c := range []client.Client{cache, live} {
		if err := c.Delete(ctx, pod("p", "uid-0")); err != nil {
			t.Fatal(err)
		}
		if err := c.Create(ctx, pod("p", "uid-1")); err != nil {
			t.Fatal(err)
		}
	}
	for k := range 3 {
		_, ref := g.proveClaim(ctx, claim, allowAll)
		if ref == nil || ref.Status != http.StatusUnauthorized || ref.Reason != "pod_gone" {
			t.Fatalf("use %d after the pod was replaced: %+v, want 401 pod_gone", k, ref)
		}
	}
	if n := rev.reviews.Load(); n != 2 {
		t.Fatalf("%d reviews: a dead verdict's token was reviewed again", n)
	}

	// Deleted outright (the cache never held it; the API server has it no
	// more), noticed at the next read.
	if err := live.Delete(ctx, pod("q", "uid-q")); err != nil {
		t.Fatal(err)
	}
	now = now.Add(podLiveRecheck)
	if _, ref := g.proveClaim(ctx, podClaim{token: other, namespace: "team-a", name: "q", uid: "uid-q"}, allowAll); ref == nil || ref.Reason != "pod_gone" {
		t.Fatalf("deleted pod: %+v, want pod_gone", ref)
	}
	// The dead verdict ends with the token; the API server refuses an
	// expired token anyway.
	now = now.Add(11 * time.Minute)
	delete(rev.pods, tok)
	if _, ref := g.proveClaim(ctx, claim, allowAll); ref == nil || ref.Reason != "pod_token_rejected" {
		t.Fatalf("after the token's expiry: %+v, want pod_token_rejected", ref)
	}
}

// countingReader counts the reads of its Reader.
type countingReader struct {
	client.Reader
	n int
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.n++
	return c.Reader.Get(ctx, key, obj, opts...)
}
