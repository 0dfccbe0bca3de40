package e2e

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
)

const burstPrefix = "burst"

// Scenario 7: both control-plane replicas are restarted one after the other
// (a rolling update), twice, while labeled TrainJobs are created ten per second,
// each making its trainer pod: no TrainJob create fails, every pod is
// created (no FailedCreate) and injected.
func TestScenario7RollingRestartUnderBurst(t *testing.T) {
	timed(t)
	ns := suite.newNamespace(t, burstPrefix)
	ctx := context.Background()
	// Free the nodes for whatever runs next, pass or fail: a burst left
	// holding the kwok nodes' CPU would fail the scenarios after it.
	// Wait until they are gone too: a burst cut short (a failure) still has
	// the Job controller creating, and Tether injecting, its pods, which the
	// serial scenario after it would count as its own.
	t.Cleanup(func() {
		if err := suite.c.Client.DeleteAllOf(context.Background(), &trainer.TrainJob{}, client.InNamespace(ns)); err != nil {
			t.Error(err)
			return
		}
		// The garbage collector takes minutes to cascade through some 250
		// JobSets and Jobs on a loaded machine (CI once saw 8 pods left
		// after 2 minutes): the pods left are deleted (gracefully, so that
		// PodRunner ends their processes), every 5 s while a Job not yet
		// collected recreates them.
		var lastDelete time.Time
		eventually(t, 4*time.Minute, "the burst's TrainJobs and pods gone", func() error {
			var tjs trainer.TrainJobList
			var pods corev1.PodList
			if err := suite.c.Client.List(context.Background(), &tjs, client.InNamespace(ns)); err != nil {
				return err
			}
			if err := suite.c.Client.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
				return err
			}
			if len(tjs.Items)+len(pods.Items) > 0 {
				if len(tjs.Items) == 0 && time.Since(lastDelete) > 5*time.Second {
					lastDelete = time.Now()
					_ = suite.c.Client.DeleteAllOf(context.Background(), &corev1.Pod{}, client.InNamespace(ns))
				}
				return fmt.Errorf("%d TrainJobs and %d pods left", len(tjs.Items), len(pods.Items))
			}
			return nil
		})
	})
	deniedBefore, _ := suite.metricValue(t, "tether_pod_admissions_total", `outcome="denied"`)

	var created, failed atomic.Int64
	var errMu sync.Mutex
	var errs []string
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			tj := bound(trainJob(fmt.Sprintf("job-%03d", i), ns)).Obj()
			if err := suite.c.Client.Create(ctx, tj); err != nil {
				failed.Add(1)
				errMu.Lock()
				errs = append(errs, err.Error())
				errMu.Unlock()
				continue
			}
			if tj.Annotations[names.JobIDAnnotation] == "" {
				failed.Add(1)
				errMu.Lock()
				errs = append(errs, tj.Name+": admitted without the webhook's job id")
				errMu.Unlock()
			}
			created.Add(1)
		}
	}()
	time.Sleep(time.Second)
	start := time.Now()
	for round := range 2 {
		for i := range suite.tether.Replicas() {
			if err := suite.tether.RestartReplica(ctx, i); err != nil {
				close(stop)
				t.Fatal(err)
			}
			logf("rolling restart %d: replica %d back after %.1fs", round+1, i, time.Since(start).Seconds())
		}
	}
	time.Sleep(time.Second)
	close(stop)
	<-done
	logf("burst: %d TrainJobs created during a %.1fs rolling restart, %d failed", created.Load(), time.Since(start).Seconds(), failed.Load())
	if failed.Load() > 0 {
		t.Fatalf("%d TrainJob admissions failed during the rolling restart: %v", failed.Load(), errs)
	}
	n := int(created.Load())
	if n < 10 {
		t.Fatalf("only %d TrainJobs created: the burst did not overlap the restart", n)
	}
	eventually(t, 120*time.Second, "every TrainJob's pod created and injected", func() error {
		var pods corev1.PodList
		if err := suite.c.Client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return err
		}
		injected := 0
		for _, p := range pods.Items {
			if p.Annotations[names.PodStatusAnnotation] != "" {
				injected++
			}
		}
		if injected < n {
			return fmt.Errorf("%d of %d pods injected", injected, n)
		}
		return nil
	})
	var events corev1.EventList
	if err := suite.c.Client.List(ctx, &events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.Reason == "FailedCreate" {
			t.Errorf("%s %s: FailedCreate: %s", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Message)
		}
	}
	if denied, _ := suite.metricValue(t, "tether_pod_admissions_total", `outcome="denied"`); denied != deniedBefore {
		t.Errorf("pod admissions denied went %v -> %v", deniedBefore, denied)
	}
}
