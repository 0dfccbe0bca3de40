package logarchive

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/testobj"
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
	pods := []corev1.Pod{*pod("a").RestartPolicy(corev1.RestartPolicyNever).Exited(1, at(1)).Obj()}
	st := &tetherv1.WorkerBindingStatus{}
	var waits []time.Duration
	for range 20 {
		_, retry, err := a.Archive(context.Background(), st, "job", "node", pods)
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
	if _, retry, err := a.Archive(context.Background(), st, "job", "node", pods); err != nil || retry != 0 || calls != maxLogAttempts {
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
	pods := []corev1.Pod{*pod("a").Running(1).LastExit(3, at(5)).Exited(0, at(20)).Obj(),
		*testobj.MakeTrainerPod("tj", "ns").CompletionIndex("1").UID("b").Exited(1, at(3)).Obj()}
	if changed, _, err := a.Archive(context.Background(), st, "job", "node", pods); err != nil || !changed {
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

// TestLogArchiverWaitsOutAnInPlaceRestart is the race of scenario r7 on a
// loaded node: the pod's status says the first run exited 3 while the
// kubelet has already started the second, so pods/log without previous
// streams the second run's. That read must not happen (it would store the
// second run's log under the first's key, for good); the first run's log is
// read as "previous" once the status shows the restart.
func TestLogArchiverWaitsOutAnInPlaceRestart(t *testing.T) {
	store := &memStore{objects: map[string]string{}}
	var reads []bool
	a := &LogArchiver{Store: store, Source: func(_ context.Context, _, _, _ string, previous bool) (io.ReadCloser, error) {
		reads = append(reads, previous)
		if previous {
			return io.NopCloser(strings.NewReader("run 1: failing with exit code 3\n")), nil
		}
		return io.NopCloser(strings.NewReader("run 2: resuming after step 12\n")), nil // the kubelet is ahead
	}}
	st := &tetherv1.WorkerBindingStatus{}
	exited := []corev1.Pod{*pod("a").Exited(3, at(5)).Obj()}
	if changed, retry, err := a.Archive(context.Background(), st, "job", "node", exited); err != nil || changed || retry != 0 || len(reads) != 0 {
		t.Fatalf("run 1 exited, restart due: changed %v, retry %s, err %v, reads %v; want no read yet", changed, retry, err, reads)
	}
	// The same exit in a pod that can no longer restart it: read at once.
	for name, p := range map[string]*testobj.PodWrapper{
		"deleted":  pod("b").Exited(3, at(5)).Deleting(at(6)),
		"Never":    pod("c").RestartPolicy(corev1.RestartPolicyNever).Exited(3, at(5)),
		"exited 0": pod("d").Exited(0, at(5)),
	} {
		reads = nil
		if _, _, err := a.Archive(context.Background(), &tetherv1.WorkerBindingStatus{}, "job", "node", []corev1.Pod{*p.Obj()}); err != nil || len(reads) != 1 || reads[0] {
			t.Errorf("%s: err %v, reads %v; want one read of the current instance", name, err, reads)
		}
	}
	reads = nil
	restarted := []corev1.Pod{*pod("a").Running(1).LastExit(3, at(5)).Obj()}
	if changed, _, err := a.Archive(context.Background(), st, "job", "node", restarted); err != nil || !changed {
		t.Fatalf("after the restart: changed %v, err %v", changed, err)
	}
	if got := store.objects[upload.LogKey("job", "a")]; !strings.Contains(got, "run 1") {
		t.Errorf("%s = %q, want the first run's log", upload.LogKey("job", "a"), got)
	}
	if len(reads) != 1 || !reads[0] {
		t.Errorf("reads %v, want one, of the previous instance", reads)
	}
}

func TestRestartMayFollow(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	for _, tc := range []struct {
		name string
		pod  *testobj.PodWrapper
		exit int32
		want bool
	}{
		{"OnFailure, failed", pod("a").Running(0), 3, true},
		{"OnFailure, succeeded", pod("a").Running(0), 0, false},
		{"Never", pod("a").RestartPolicy(corev1.RestartPolicyNever).Running(0), 3, false},
		{"Always", pod("a").RestartPolicy(corev1.RestartPolicyAlways).Running(0), 0, true},
		{"pod Failed", pod("a").Phase(corev1.PodFailed), 3, false},
		{"pod deleted", pod("a").Running(0).Deleting(at(1)), 3, false},
		{"container policy over the pod's", pod("a").RestartPolicy(corev1.RestartPolicyNever).Running(0).TrainerRestartPolicy(always), 0, true},
	} {
		if got := restartMayFollow(tc.pod.Obj(), "node", tc.exit); got != tc.want {
			t.Errorf("%s: restartMayFollow = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// h0 is when a test's history starts.
var h0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// at is a time in a history: seconds after h0.
func at(s int) time.Time { return h0.Add(time.Duration(s) * time.Second) }

// pod is node 0's trainer pod of job "tj", uid given, injected, created at h0.
func pod(uid string) *testobj.PodWrapper {
	return testobj.MakeTrainerPod("tj", "ns").CompletionIndex("0").UID(uid).Created(h0).
		RestartPolicy(corev1.RestartPolicyOnFailure).Injected()
}
