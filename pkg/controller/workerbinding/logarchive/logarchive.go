package logarchive

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/trainjob"
	"github.com/tether-dev/tether/pkg/upload"
)

// LogSource streams a container's log: of its current instance, or with
// previous of the one before its last restart (the kubelet keeps just that).
type LogSource func(ctx context.Context, namespace, pod, container string, previous bool) (io.ReadCloser, error)

// KubeletLogs reads logs through the API server (pods/log), as kubectl logs does.
func KubeletLogs(cs kubernetes.Interface) LogSource {
	return func(ctx context.Context, namespace, pod, container string, previous bool) (io.ReadCloser, error) {
		return cs.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{Container: container, Previous: previous}).Stream(ctx)
	}
}

// maxLogKeys bounds status.artifacts.logs.
const maxLogKeys = 16

// LogArchiver copies a terminated trainer container's log next to the job's
// artifacts, as <job-id>/.tether/logs/<pod>.log (upload.LogsDir: reserved,
// so no sidecar can write or replace it), keeping at most MaxBytes: a longer
// log loses its beginning, and says so in its first line.
type LogArchiver struct {
	Source   LogSource
	Store    upload.Backend
	MaxBytes int64
	// Now is the clock; nil is time.Now.
	Now func() time.Time

	mu sync.Mutex
	// failures are the logs whose copy failed, by key: retried with backoff,
	// at most maxLogAttempts times (the pod may be gone from its node).
	failures map[string]*logFailure
	// copied are the logs stored whose key may not be on the binding yet
	// (its status write lost a race): recorded again, not read again.
	copied map[string]bool
}

type logFailure struct {
	attempts int
	next     time.Time
}

// Retries of a log that cannot be copied: 10s, 20s, 40s, ... at most
// maxLogAttempts attempts in all (about 5 minutes), then the log is given up
// (and said so once).
const (
	maxLogAttempts = 6
	logRetryBase   = 10 * time.Second
	// maxLogFailures bounds the failure records kept.
	maxLogFailures = 4096
)

func (a *LogArchiver) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// Archive stores the trainer log of every ended trainer instance of the
// job's injected pods not yet archived (the current one once terminated, the
// one before a restart in place) and records the keys. It reports whether
// the status changed and when to try again the logs that failed (0: none
// left to retry); a log that keeps failing is given up after maxLogAttempts.
func (a *LogArchiver) Archive(ctx context.Context, st *tetherv1.WorkerBindingStatus, jobID, container string, pods []corev1.Pod) (bool, time.Duration, error) {
	if a == nil || a.Source == nil || a.Store == nil {
		return false, 0, nil
	}
	changed := false
	var errs []error
	var retry time.Duration
	now := a.now()
	for i := range pods {
		p := &pods[i]
		if !trainjob.IsInjected(p) {
			continue // a pod that was never bound is not the binding's
		}
		cs := containerStatus(p, container)
		if cs == nil {
			continue
		}
		type instance struct {
			key      string
			previous bool
		}
		var todo []instance
		// The instance before the current one: only while the current one
		// is running or has ended, when the kubelet's "previous" is exactly
		// instance RestartCount-1 (not while it waits in back-off, when
		// "previous" may already be the instance just ended).
		if cs.LastTerminationState.Terminated != nil && cs.RestartCount > 0 && cs.State.Waiting == nil {
			todo = append(todo, instance{upload.RestartLogKey(jobID, p.Name, cs.RestartCount-1), true})
		}
		// The current instance, once ended, but only when no other can
		// follow it: pods/log names no instance, so a read racing the
		// kubelet's restart would store the next instance's log under this
		// one's key. One the kubelet restarts is read as "previous" instead.
		if cs.State.Terminated != nil && !restartMayFollow(p, container, cs.State.Terminated.ExitCode) {
			todo = append(todo, instance{upload.RestartLogKey(jobID, p.Name, cs.RestartCount), false})
		}
		for _, in := range todo {
			if st.Artifacts != nil && slices.Contains(st.Artifacts.Logs, in.key) {
				continue
			}
			if a.isCopied(in.key) {
				if st.Artifacts == nil {
					st.Artifacts = &tetherv1.ArtifactsStatus{}
				}
				if len(st.Artifacts.Logs) < maxLogKeys {
					st.Artifacts.Logs = append(st.Artifacts.Logs, in.key)
					changed = true
				}
				continue
			}
			wait, try := a.due(in.key, now)
			if !try {
				if wait > 0 && (retry == 0 || wait < retry) {
					retry = wait
				}
				continue
			}
			if err := a.copyLog(ctx, p, container, in.key, in.previous); err != nil {
				if wait, again := a.failed(in.key, now); again {
					errs = append(errs, fmt.Errorf("archiving the trainer log of pod %s (%s): %w", p.Name, in.key, err))
					if retry == 0 || wait < retry {
						retry = wait
					}
				} else {
					errs = append(errs, fmt.Errorf("giving up on the trainer log of pod %s (%s) after %d attempts: %w", p.Name, in.key, maxLogAttempts, err))
				}
				continue
			}
			a.succeeded(in.key)
			a.markCopied(in.key)
			if st.Artifacts == nil {
				st.Artifacts = &tetherv1.ArtifactsStatus{}
			}
			if len(st.Artifacts.Logs) < maxLogKeys {
				st.Artifacts.Logs = append(st.Artifacts.Logs, in.key)
				changed = true
			}
		}
	}
	return changed, retry, errors.Join(errs...)
}

// restartMayFollow reports whether the kubelet may still start another
// instance of the pod's container after one that exited with exitCode: never
// in a pod that is terminal or being deleted; otherwise as the container's
// restart policy (or the pod's) says. Restart rules are not evaluated: a
// container that has them may restart.
func restartMayFollow(p *corev1.Pod, container string, exitCode int32) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	policy := p.Spec.RestartPolicy
	for i := range p.Spec.Containers {
		c := &p.Spec.Containers[i]
		if c.Name != container {
			continue
		}
		if len(c.RestartPolicyRules) > 0 {
			return true
		}
		if c.RestartPolicy != nil {
			policy = corev1.RestartPolicy(*c.RestartPolicy)
		}
	}
	switch policy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return exitCode != 0
	}
	return true // Always, and the API's default
}

// due reports whether key may be tried now, or how long until it may (0
// with false: given up).
func (a *LogArchiver) due(key string, now time.Time) (time.Duration, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f := a.failures[key]
	switch {
	case f == nil:
		return 0, true
	case f.attempts >= maxLogAttempts:
		return 0, false
	case now.Before(f.next):
		return f.next.Sub(now), false
	}
	return 0, true
}

// failed counts a failed attempt and returns the wait before the next, or
// false once the log is given up.
func (a *LogArchiver) failed(key string, now time.Time) (time.Duration, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.failures == nil {
		a.failures = map[string]*logFailure{}
	}
	if len(a.failures) >= maxLogFailures {
		// Bounded memory: forget the logs given up on (a pod that comes
		// back would get its attempts again).
		for k, f := range a.failures {
			if f.attempts >= maxLogAttempts {
				delete(a.failures, k)
			}
		}
	}
	f := a.failures[key]
	if f == nil {
		f = &logFailure{}
		a.failures[key] = f
	}
	f.attempts++
	if f.attempts >= maxLogAttempts {
		return 0, false
	}
	wait := logRetryBase << (f.attempts - 1)
	f.next = now.Add(wait)
	return wait, true
}

func (a *LogArchiver) isCopied(key string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.copied[key]
}

// markCopied remembers a stored log (bounded: the set starts over when
// full, costing at most one more read of a log).
func (a *LogArchiver) markCopied(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.copied == nil || len(a.copied) >= maxLogFailures {
		a.copied = map[string]bool{}
	}
	a.copied[key] = true
}

func (a *LogArchiver) succeeded(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.failures, key)
}

func (a *LogArchiver) copyLog(ctx context.Context, p *corev1.Pod, container, key string, previous bool) error {
	rc, err := a.Source(ctx, p.Namespace, p.Name, container, previous)
	if err != nil {
		return err
	}
	defer rc.Close()
	tail, err := TailLog(rc, a.MaxBytes)
	if err != nil {
		return err
	}
	_, err = a.Store.Put(ctx, key, bytes.NewReader(tail), int64(len(tail)))
	return err
}

// TailLog reads r to the end and returns its last limit bytes; when it had to
// drop the beginning, the result starts with a line saying how much. Memory
// stays within about 2×limit whatever the log's size.
func TailLog(r io.Reader, limit int64) ([]byte, error) {
	if limit <= 0 {
		limit = 10 << 20
	}
	buf := make([]byte, 0, min(limit, 1<<20))
	var total int64
	chunk := make([]byte, 64<<10)
	for {
		n, err := r.Read(chunk)
		total += int64(n)
		buf = append(buf, chunk[:n]...)
		if int64(len(buf)) > 2*limit {
			buf = append(buf[:0], buf[int64(len(buf))-limit:]...)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if int64(len(buf)) <= limit && total == int64(len(buf)) {
		return buf, nil
	}
	kept := buf[int64(len(buf))-limit:]
	marker := fmt.Sprintf("[tether: log truncated: the first %d of %d bytes were dropped to keep the last %d]\n", total-limit, total, limit)
	return append([]byte(marker), kept...), nil
}

func containerStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == name {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}
