package workerbinding

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/pkg/trainjob"
)

// failedCreateShare is how long one read of a namespace's FailedCreate
// Events answers every binding of that namespace: a burst of new TrainJobs
// (test/performance/controller: 2,000 in one namespace, none with a pod
// yet) would otherwise list the namespace's Events once per binding every
// 15 s (lifecycle's createFailureRecheck), each LIST filtering all of them
// in the API server.
// Well under the recheck, so a FailedCreate is reported at most this much
// later than a read of its own would have.
const failedCreateShare = 5 * time.Second

// createFailure finds why the TrainJob's trainer Jobs cannot create their
// pods: the newest FailedCreate Event of a Job of its trainer replicated
// job (<trainjob>-node-<i>), as the Job controller records it when Pod
// Security, a ResourceQuota or a webhook refuses a pod. It returns "" when
// there is none. Events are read uncached, only for such a binding, at
// most 100 of the namespace's FailedCreate Events, and one read is shared
// by the namespace's bindings for failedCreateShare.
func (r *Reconciler) createFailure(ctx context.Context, tj *unstructured.Unstructured) (string, error) {
	if r.Live == nil {
		return "", nil
	}
	events, err := r.failedCreates.read(ctx, r.Live, tj.GetNamespace())
	if err != nil {
		return "", err
	}
	prefix := tj.GetName() + "-" + trainjob.TrainerReplicatedJob + "-"
	var newest *corev1.Event
	for i := range events {
		e := &events[i]
		if !strings.HasPrefix(e.InvolvedObject.Name, prefix) {
			continue
		}
		if newest == nil || eventTime(e).After(eventTime(newest)) {
			newest = e
		}
	}
	if newest == nil {
		return "", nil
	}
	count := max(newest.Count, 1)
	if newest.Series != nil {
		count = max(count, newest.Series.Count)
	}
	return fmt.Sprintf("Job %s cannot create its pods (FailedCreate x%d, last at %s): %s", newest.InvolvedObject.Name, count,
		eventTime(newest).UTC().Format(time.RFC3339), newest.Message), nil
}

// failedCreateReads shares reads of namespaces' FailedCreate Events (the
// zero value is ready): a read younger than failedCreateShare, or in
// flight, answers every caller for its namespace. Entries older than that
// are dropped on the next read, so it holds the namespaces read within the
// last failedCreateShare.
type failedCreateReads struct {
	mu    sync.Mutex
	byNS  map[string]*failedCreateRead
	clock func() time.Time // nil: time.Now (tests set it)
}

type failedCreateRead struct {
	done   chan struct{} // closed when events and err are set
	at     time.Time
	events []corev1.Event
	err    error
}

func (f *failedCreateReads) read(ctx context.Context, live client.Reader, namespace string) ([]corev1.Event, error) {
	now := time.Now()
	if f.clock != nil {
		now = f.clock()
	}
	f.mu.Lock()
	e := f.byNS[namespace]
	if e == nil || now.Sub(e.at) >= failedCreateShare || e.finishedWith() != nil {
		for ns, old := range f.byNS {
			if now.Sub(old.at) >= failedCreateShare && old.finished() {
				delete(f.byNS, ns)
			}
		}
		if f.byNS == nil {
			f.byNS = map[string]*failedCreateRead{}
		}
		e = &failedCreateRead{done: make(chan struct{}), at: now}
		f.byNS[namespace] = e
		f.mu.Unlock()
		var list corev1.EventList
		sel := fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.kind", "Job"), fields.OneTermEqualSelector("reason", "FailedCreate"))
		e.err = live.List(ctx, &list, client.InNamespace(namespace), client.MatchingFieldsSelector{Selector: sel}, client.Limit(100))
		e.events = list.Items
		close(e.done)
		return e.events, e.err
	}
	f.mu.Unlock()
	select {
	case <-e.done:
		return e.events, e.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (e *failedCreateRead) finished() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// finishedWith is the error of a finished read (nil while in flight): a
// failed read is not shared once over.
func (e *failedCreateRead) finishedWith() error {
	if !e.finished() {
		return nil
	}
	return e.err
}

func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}
