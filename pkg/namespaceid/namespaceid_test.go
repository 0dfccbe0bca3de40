package namespaceid

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// countingReader counts the reads that reach the API server's stand-in.
type countingReader struct {
	client.Reader
	reads int
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
	c.reads++
	return c.Reader.Get(ctx, key, o, opts...)
}

// A namespace's UID is read once per TTL; a namespace made again under its
// name is seen once the TTL has passed; a namespace being deleted has no
// UID to give.
func TestRecentReadsOncePerTTL(t *testing.T) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team", UID: "uid-1"}}
	c := fake.NewClientBuilder().WithObjects(ns).Build()
	live := &countingReader{Reader: c}
	now := time.Unix(1000, 0)
	r := &Recent{Live: live, TTL: 30 * time.Second, Now: func() time.Time { return now }}
	for range 3 {
		if uid, err := r.UID(ctx, "team"); err != nil || uid != "uid-1" {
			t.Fatalf("UID = %q, %v", uid, err)
		}
	}
	if live.reads != 1 {
		t.Errorf("%d reads within the TTL, want 1", live.reads)
	}
	// Made again under its name.
	if err := c.Delete(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team", UID: "uid-2"}}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(31 * time.Second)
	if uid, err := r.UID(ctx, "team"); err != nil || uid != types.UID("uid-2") {
		t.Errorf("after the TTL: %q, %v; want uid-2", uid, err)
	}
	// Live reads of a namespace being deleted refuse it.
	gone := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "leaving", UID: "uid-3", Finalizers: []string{"kubernetes"}}}
	if err := c.Create(ctx, gone); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	if _, err := Get(ctx, c, "leaving"); err == nil {
		t.Error("Get of a namespace being deleted: no error")
	}
}
