package controller

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/internal/testobj"
	"github.com/tether-dev/tether/pkg/upload"
)

// memStore is the smallest upload.Backend the archiver needs: Put.
type memStore struct {
	upload.Backend
	objects map[string]string
}

func (m *memStore) Put(_ context.Context, key string, body io.Reader, _ int64) (upload.ObjectInfo, error) {
	b, err := io.ReadAll(body)
	m.objects[key] = string(b)
	return upload.ObjectInfo{Size: int64(len(b))}, err
}

func TestLogArchiverRetriesWithBackoffThenGivesUp(t *testing.T) {
	now := h0
	calls := 0
	a := &LogArchiver{Store: &memStore{objects: map[string]string{}}, Now: func() time.Time { return now },
		Source: func(context.Context, string, string, string, bool) (io.ReadCloser, error) {
			calls++
			return nil, errors.New("node gone")
		}}
	pods := []corev1.Pod{*pod(0, "a", 0).Exited(1, at(1)).Obj()}
	st := &tetherv1.WorkerBindingStatus{}
	var waits []time.Duration
	for range 20 {
		_, retry, err := a.archive(context.Background(), st, "job", "node", pods)
		if err == nil {
			break
		}
		waits = append(waits, retry)
		if retry == 0 {
			if !strings.Contains(err.Error(), "giving up") {
				t.Fatalf("no retry left, but the error does not say it gave up: %v", err)
			}
			break
		}
		now = now.Add(retry)
	}
	if calls != maxLogAttempts {
		t.Errorf("%d attempts, want %d", calls, maxLogAttempts)
	}
	want := []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 0}
	if len(waits) != len(want) {
		t.Fatalf("waits %v, want %v", waits, want)
	}
	for i := range want {
		if waits[i] != want[i] {
			t.Errorf("wait %d = %s, want %s", i, waits[i], want[i])
		}
	}
	// Given up: never tried again, no error either.
	if _, retry, err := a.archive(context.Background(), st, "job", "node", pods); err != nil || retry != 0 || calls != maxLogAttempts {
		t.Errorf("after giving up: retry %s, err %v, %d calls", retry, err, calls)
	}
}

func TestLogArchiverKeepsEachRestartsLog(t *testing.T) {
	store := &memStore{objects: map[string]string{}}
	a := &LogArchiver{Store: store, Source: func(_ context.Context, _, _, _ string, previous bool) (io.ReadCloser, error) {
		if previous {
			return io.NopCloser(strings.NewReader("run 1: failing with exit code 3\n")), nil
		}
		return io.NopCloser(strings.NewReader("run 2: final model written\n")), nil
	}}
	st := &tetherv1.WorkerBindingStatus{}
	// Restarted once in place, the second run done; an uninjected pod is no log of the binding's.
	pods := []corev1.Pod{*pod(0, "a", 0).Running(1).LastExit(3, at(5)).Exited(0, at(20)).Obj(),
		*testobj.MakeTrainerPod("tj", "ns").CompletionIndex("1").UID("b").Exited(1, at(3)).Obj()}
	if changed, _, err := a.archive(context.Background(), st, "job", "node", pods); err != nil || !changed {
		t.Fatalf("archive: changed %v, err %v", changed, err)
	}
	if got := store.objects[upload.LogKey("job", "a")]; !strings.Contains(got, "run 1") {
		t.Errorf("%s = %q, want the first run's log", upload.LogKey("job", "a"), got)
	}
	if got := store.objects[upload.RestartLogKey("job", "a", 1)]; !strings.Contains(got, "run 2") {
		t.Errorf("%s = %q, want the restarted run's log", upload.RestartLogKey("job", "a", 1), got)
	}
	if len(store.objects) != 2 || len(st.Artifacts.Logs) != 2 {
		t.Errorf("stored %v, status logs %v; want the two runs of pod a only", store.objects, st.Artifacts.Logs)
	}
}
