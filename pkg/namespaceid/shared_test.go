package namespaceid

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// gatedReader holds each read's answer until the test lets it through,
// and counts the reads that reached the API server's stand-in.
type gatedReader struct {
	client.Reader
	started chan struct{}
	release chan struct{}
	mu      sync.Mutex
	reads   int
}

func (g *gatedReader) Get(ctx context.Context, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
	g.mu.Lock()
	g.reads++
	g.mu.Unlock()
	err := g.Reader.Get(ctx, key, o, opts...)
	g.started <- struct{}{}
	<-g.release
	return err
}

// A caller never gets the answer of a read that began before it asked:
// callers who ask while a read is under way share the next read, which
// sees the namespace as it is after they asked (here: made again under its
// name meanwhile).
func TestSharedNeverAnswersWithAnOlderRead(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithObjects(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team", UID: "uid-1"}}).Build()
	live := &gatedReader{Reader: c, started: make(chan struct{}, 4), release: make(chan struct{})}
	s := &Shared{Live: live}

	type answer struct {
		uid types.UID
		err error
	}
	first := make(chan answer, 1)
	go func() { id, err := s.Get(ctx, "team"); first <- answer{id.UID, err} }()
	<-live.started // the first read has read, and is held

	// The namespace is deleted and made again; two callers ask meanwhile.
	if err := c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team", UID: "uid-2"}}); err != nil {
		t.Fatal(err)
	}
	later := make(chan answer, 2)
	var asked sync.WaitGroup
	for range 2 {
		asked.Add(1)
		go func() {
			asked.Done()
			id, err := s.Get(ctx, "team")
			later <- answer{id.UID, err}
		}()
	}
	asked.Wait()
	waitJoined(t, s, "team")

	live.release <- struct{}{} // the first read ends
	if a := <-first; a.err != nil || a.uid != "uid-1" {
		t.Errorf("first caller: %q, %v; want uid-1 (its read began after it asked)", a.uid, a.err)
	}
	<-live.started // the second read, for both later callers
	live.release <- struct{}{}
	for range 2 {
		if a := <-later; a.err != nil || a.uid != "uid-2" {
			t.Errorf("later caller: %q, %v; want uid-2, from a read that began after it asked", a.uid, a.err)
		}
	}
	if live.reads != 2 {
		t.Errorf("%d reads for three callers, want 2 (the two later callers share one)", live.reads)
	}
	s.mu.Lock()
	left := len(s.names)
	s.mu.Unlock()
	if left != 0 {
		t.Errorf("%d names still held after every read ended, want 0", left)
	}
}

// waitJoined waits until a caller waits for the next read of name.
func waitJoined(t *testing.T, s *Shared, name string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		n := s.names[name]
		joined := n != nil && n.next != nil
		s.mu.Unlock()
		if joined {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no caller waits for the next read")
		}
		time.Sleep(time.Millisecond)
	}
}

// A caller whose context ends stops waiting; the read goes on for the
// others, and errors (a namespace being deleted) reach every caller.
func TestSharedCallerCancelsAndErrorsReachEveryone(t *testing.T) {
	c := fake.NewClientBuilder().WithObjects(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: "leaving", UID: "uid-3", Finalizers: []string{"kubernetes"}}}).Build()
	if err := c.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "leaving"}}); err != nil {
		t.Fatal(err)
	}
	live := &gatedReader{Reader: c, started: make(chan struct{}, 4), release: make(chan struct{})}
	s := &Shared{Live: live}
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() { _, err := s.Get(ctx, "leaving"); gaveUp <- err }()
	<-live.started
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled caller: %v, want context.Canceled", err)
	}
	stays := make(chan error, 1)
	go func() { _, err := s.Get(context.Background(), "leaving"); stays <- err }()
	waitJoined(t, s, "leaving")
	live.release <- struct{}{}
	<-live.started
	live.release <- struct{}{}
	var terminating *TerminatingError
	if err := <-stays; !errors.As(err, &terminating) {
		t.Errorf("caller of a namespace being deleted: %v, want a TerminatingError", err)
	}
}
