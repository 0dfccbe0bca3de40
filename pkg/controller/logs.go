package controller

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/upload"
)

// LogSource streams a container's log.
type LogSource func(ctx context.Context, namespace, pod, container string) (io.ReadCloser, error)

// KubeletLogs reads logs through the API server (pods/log), as kubectl logs does.
func KubeletLogs(cs kubernetes.Interface) LogSource {
	return func(ctx context.Context, namespace, pod, container string) (io.ReadCloser, error) {
		return cs.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{Container: container}).Stream(ctx)
	}
}

// maxLogKeys bounds status.artifacts.logs.
const maxLogKeys = 16

// LogArchiver copies a terminated trainer container's log next to the job's
// artifacts, as <job-id>/logs/<pod>.log, keeping at most MaxBytes: a longer
// log loses its beginning, and says so in its first line.
type LogArchiver struct {
	Source   LogSource
	Store    upload.Backend
	MaxBytes int64
}

// LogKey is where a pod's trainer log is archived.
func LogKey(jobID, pod string) string { return jobID + "/logs/" + pod + ".log" }

// archive stores the trainer log of every terminated trainer pod not yet
// archived and records the keys; it reports whether the status changed.
// Failures are returned after trying every pod; the next reconcile retries.
func (a *LogArchiver) archive(ctx context.Context, st *tetherv1.WorkerBindingStatus, jobID, container string, pods []corev1.Pod) (bool, error) {
	if a == nil || a.Source == nil || a.Store == nil {
		return false, nil
	}
	changed := false
	var errs []error
	for i := range pods {
		p := &pods[i]
		if !trainerTerminated(p, container) {
			continue
		}
		key := LogKey(jobID, p.Name)
		if st.Artifacts != nil && slices.Contains(st.Artifacts.Logs, key) {
			continue
		}
		if err := a.copyLog(ctx, p, container, key); err != nil {
			errs = append(errs, fmt.Errorf("archiving the trainer log of pod %s: %w", p.Name, err))
			continue
		}
		if st.Artifacts == nil {
			st.Artifacts = &tetherv1.ArtifactsStatus{}
		}
		if len(st.Artifacts.Logs) < maxLogKeys {
			st.Artifacts.Logs = append(st.Artifacts.Logs, key)
			changed = true
		}
	}
	if len(errs) > 0 {
		return changed, errs[0]
	}
	return changed, nil
}

func (a *LogArchiver) copyLog(ctx context.Context, p *corev1.Pod, container, key string) error {
	rc, err := a.Source(ctx, p.Namespace, p.Name, container)
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

// TailLog reads r to the end and returns its last max bytes; when it had to
// drop the beginning, the result starts with a line saying how much. Memory
// stays within about 2×max whatever the log's size.
func TailLog(r io.Reader, max int64) ([]byte, error) {
	if max <= 0 {
		max = 10 << 20
	}
	buf := make([]byte, 0, min(max, 1<<20))
	var total int64
	chunk := make([]byte, 64<<10)
	for {
		n, err := r.Read(chunk)
		total += int64(n)
		buf = append(buf, chunk[:n]...)
		if int64(len(buf)) > 2*max {
			buf = append(buf[:0], buf[int64(len(buf))-max:]...)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if int64(len(buf)) <= max && total == int64(len(buf)) {
		return buf, nil
	}
	kept := buf[int64(len(buf))-max:]
	marker := fmt.Sprintf("[tether: log truncated: the first %d of %d bytes were dropped to keep the last %d]\n", total-max, total, max)
	return append([]byte(marker), kept...), nil
}

func trainerTerminated(p *corev1.Pod, container string) bool {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == container && cs.State.Terminated != nil {
			return true
		}
	}
	return false
}
