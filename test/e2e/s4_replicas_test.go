package e2e

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/test/framework/localcluster"
)

// phaseRank orders the phases of one attempt; a regression is a lower rank.
// A binding whose status is not written yet (phase "") counts as Pending.
var phaseRank = map[tetherv1.WorkerBindingPhase]int{
	"": 0, tetherv1.PhasePending: 0, tetherv1.PhaseRegistered: 1, tetherv1.PhaseRunning: 2,
	tetherv1.PhaseFinishing: 3, tetherv1.PhaseSucceeded: 4, tetherv1.PhaseFailed: 4,
}

// phaseSample is one state the binding was seen in.
type phaseSample struct {
	phase   tetherv1.WorkerBindingPhase
	reason  string
	attempt int32
}

func (p phaseSample) String() string {
	return fmt.Sprintf("%s/%s/attempt=%d", p.phase, p.reason, p.attempt)
}

// watchPhases records every phase/reason/attempt the binding shows until stop.
func watchPhases(ns, name string, stop <-chan struct{}) func() []phaseSample {
	var mu sync.Mutex
	var seen []phaseSample
	done := make(chan struct{})
	go func() {
		defer close(done)
		var last *phaseSample
		for {
			if wb, err := suite.getBinding(ns, name); err == nil {
				s := phaseSample{wb.Status.Phase, wb.Status.Reason, wb.Status.Attempt}
				if last == nil || s != *last {
					mu.Lock()
					seen = append(seen, s)
					mu.Unlock()
					last = &s
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return func() []phaseSample { <-done; mu.Lock(); defer mu.Unlock(); return seen }
}

// sessionHolder is the replica whose /metrics shows the job's open session.
func sessionHolder(ns, name string) (int, error) {
	for _, r := range suite.tether.Replicas() {
		text, err := r.Metrics()
		if err != nil {
			continue
		}
		if v, ok := findMetric(text, "tether_job_session_connected", jobLabels(ns, name)...); ok && v == 1 {
			return r.Index, nil
		}
	}
	return -1, fmt.Errorf("no replica holds the session")
}

// Scenario 4: mid-job, the replica holding the worker's session is
// restarted (graceful: the other replica serves it meanwhile), then the
// other one crashes (SIGKILL) and comes back. Nothing verified is lost, the
// phase never goes back, it stays one attempt with one registration, and
// the job succeeds.
func TestScenario4ReplicaRestarts(t *testing.T) {
	timed(t)
	ns := suite.newNamespace(t, "replicas")
	const name = "long-run"
	setPlans(ns, name, localcluster.TrainerPlan{Steps: 40, CheckpointEvery: 4, StepInterval: 500 * time.Millisecond})
	tj := bound(trainJob(name, ns)).Queue("user-queue").Obj()
	suite.create(t, tj)
	jobID := tj.Annotations[names.JobIDAnnotation]
	stop := make(chan struct{})
	phases := watchPhases(ns, name, stop)
	pod := suite.injectedPod(t, ns, name, "")
	dir := suite.runner.ArtifactDir(pod)
	wb := suite.waitBinding(t, ns, name, 60*time.Second, "Running", phaseIs(tetherv1.PhaseRunning, ""))
	registered := wb.Status.Worker.RegisteredTime

	var holder int
	eventually(t, 20*time.Second, "a replica holds the session", func() (err error) { holder, err = sessionHolder(ns, name); return err })
	other := 1 - holder
	start := time.Now()
	if err := suite.tether.RestartReplica(t.Context(), holder); err != nil {
		t.Fatal(err)
	}
	logf("replica %d (session holder) restarted in %.1fs", holder, time.Since(start).Seconds())
	eventually(t, 30*time.Second, "the session on a serving replica", func() error {
		_, err := sessionHolder(ns, name)
		return err
	})
	if err := suite.tether.KillReplica(other); err != nil {
		t.Fatal(err)
	}
	logf("replica %d killed (SIGKILL)", other)
	eventually(t, 30*time.Second, "the session back on the restarted replica", func() error {
		h, err := sessionHolder(ns, name)
		if err == nil && h != holder {
			return fmt.Errorf("held by %d", h)
		}
		return err
	})
	if err := suite.tether.StartReplicaAgain(t.Context(), other); err != nil {
		t.Fatal(err)
	}

	wb = suite.waitBinding(t, ns, name, 120*time.Second, "Succeeded", phaseIs(tetherv1.PhaseSucceeded, tetherv1.ReasonTrainerSucceeded))
	close(stop)
	seen := phases()
	logf("phases seen: %v", seen)
	prev := -1
	for _, s := range seen {
		rank, known := phaseRank[s.phase]
		if !known {
			t.Errorf("unknown phase %q in %v", s.phase, seen)
		}
		if rank < prev {
			t.Errorf("phase regressed to %s in %v", s, seen)
		} else {
			prev = rank
		}
		if s.attempt > 1 {
			t.Errorf("a second attempt started (%s): restarts must not count as attempts", s)
		}
	}
	if !wb.Status.Worker.RegisteredTime.Equal(&registered) {
		t.Errorf("registration changed from %s to %s", registered, wb.Status.Worker.RegisteredTime)
	}
	if err := sameFiles(localFiles(t, dir), suite.stored(t, jobID)); err != nil {
		t.Fatalf("artifacts lost across restarts: %v", err)
	}
}
