package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/mutate"
	"github.com/tether-dev/tether/test/framework/localcluster"
)

// Real node, scenario 5: the sidecar is killed outright (SIGKILL to its
// processes, as the OOM killer would) after checkpoints were verified. The
// kubelet restarts the native sidecar in place; the new instance registers
// again, resumes without sending the verified files again, and the job
// succeeds with every file stored.
func TestRealNode5SidecarKilled(t *testing.T) {
	shared(t)
	needRealNode(t)
	timed(t)
	ns := suite.realNodeNamespace(t, "real-sidecar-kill")
	const name = "real-sidecar-kill"
	plan := localcluster.TrainerPlan{Steps: 60, CheckpointEvery: 3, StepInterval: time.Second}
	tj := bound(realTrainJob(name, ns, plan)).Obj()
	suite.create(t, tj)
	jobID := tj.Annotations[names.JobIDAnnotation]
	pod := suite.injectedPod(t, ns, name, "")
	pod = suite.waitRunningOnRealNode(t, pod)

	// Two checkpoints verified (same MD5 as the files in the emptyDir).
	dir := hostArtifactDir(t, pod)
	var before map[string]time.Time
	eventually(t, 60*time.Second, "two checkpoints verified", func() error {
		stored, local := suite.stored(t, jobID), localFiles(t, dir)
		n := 0
		for rel, sum := range stored {
			if strings.HasPrefix(rel, "checkpoints/") && local[rel] == sum {
				n++
			}
		}
		if n < 2 {
			return fmt.Errorf("%d checkpoints verified (stored %v)", n, stored)
		}
		return nil
	})
	before = suite.lastModified(t, jobID)
	verifiedCheckpoints := 0
	for key := range before {
		// A final object (a pending one is under the server's .tether/).
		if strings.HasPrefix(strings.TrimPrefix(key, jobID+"/"), "checkpoints/") {
			verifiedCheckpoints++
		}
	}

	pod = suite.podNow(t, ns, pod.Name)
	sidecar := containerStatus(pod, mutate.SidecarName)
	if err := nodeOf(t, pod).KillContainer(sidecar.ContainerID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	logf("%s/%s: SIGKILLed the sidecar (%s)", ns, name, sidecar.ContainerID)

	// The kubelet restarts it in place: same pod, restart count 1, running.
	pod = suite.waitPod(t, ns, pod.Name, 60*time.Second, "sidecar restarted by the kubelet", func(p *corev1.Pod) error {
		s := containerStatus(p, mutate.SidecarName)
		if s == nil || s.RestartCount < 1 || s.State.Running == nil {
			return fmt.Errorf("sidecar %+v", s)
		}
		if s.LastTerminationState.Terminated == nil || s.LastTerminationState.Terminated.ExitCode != 137 {
			return fmt.Errorf("last termination %+v, want exit 137 (SIGKILL)", s.LastTerminationState.Terminated)
		}
		return nil
	})
	if tr := containerStatus(pod, "node"); tr.RestartCount != 0 || tr.State.Running == nil {
		t.Fatalf("the trainer must run on undisturbed: %+v", tr)
	}
	// The new instance registers again (the server takes it as the same
	// worker resuming: the binding keeps its registration) and its sync
	// rounds find the verified checkpoints already stored: its own log,
	// read through the kubelet, says so. A file counts once its mtime is
	// the settle time old (10 s: no close event is seen for a file closed
	// before the restart), so the checkpoints verified just before the
	// kill may wait a round or two (CI once saw the first round hold all of
	// them pending). The trainer checkpoints every 3s meanwhile, so those
	// rounds may also upload what was closed while no sidecar ran; that
	// nothing verified before the kill is sent again is checked by
	// Last-Modified once the job is done.
	eventually(t, 30*time.Second, "the restarted sidecar registered and found the verified files stored", func() error {
		log := suite.podLog(t, pod, mutate.SidecarName, false)
		if !strings.Contains(log, `"msg":"registered"`) {
			return fmt.Errorf("no registration in the new sidecar's log yet")
		}
		rounds := syncRounds(log)
		if len(rounds) == 0 {
			return fmt.Errorf("no sync round in the new sidecar's log yet")
		}
		present := 0
		for _, r := range rounds {
			present += r["alreadyPresent"]
		}
		if present < verifiedCheckpoints {
			return fmt.Errorf("rounds after the restart: %v, want the %d checkpoints verified before the kill found already present", rounds, verifiedCheckpoints)
		}
		logf("%s/%s: the restarted sidecar's rounds until then: %v", ns, name, rounds)
		return nil
	})
	if prev := suite.podLog(t, pod, mutate.SidecarName, true); !strings.Contains(prev, `"msg":"registered"`) {
		t.Errorf("the killed instance's log (previous) lacks its registration: %s", prev)
	}
	if wb := suite.waitBinding(t, ns, name, 10*time.Second, "still running", phaseIs(tetherv1.PhaseRunning, "")); wb.Status.Attempt != 1 {
		t.Errorf("a sidecar restart is not a new attempt: attempt %d", wb.Status.Attempt)
	}

	wb := suite.waitBinding(t, ns, name, 120*time.Second, "Succeeded", phaseIs(tetherv1.PhaseSucceeded, tetherv1.ReasonTrainerSucceeded))
	pod = suite.waitPodSucceeded(t, pod)
	files := suite.expectStoredAsTrainerLeft(t, pod, jobID)
	if int(wb.Status.Artifacts.Files) != len(files) || !wb.Status.Artifacts.ManifestVerified {
		t.Fatalf("artifacts %+v, the trainer left %d files", wb.Status.Artifacts, len(files))
	}
	// Verified before the kill: not sent again (Last-Modified unchanged).
	after := suite.lastModified(t, jobID)
	kept := 0
	for key, t0 := range before {
		if !strings.Contains(key, "/checkpoints/") {
			continue
		}
		if !after[key].Equal(t0) {
			t.Errorf("%s was stored again after the sidecar restart (Last-Modified %s → %s)", key, t0, after[key])
		}
		kept++
	}
	if kept < 2 {
		t.Fatalf("only %d checkpoints were stored before the kill: %v", kept, before)
	}
	logf("real node 5: sidecar restarted once; %d checkpoints verified before the kill not re-sent; %d files in all", kept, len(files))
}

// syncRounds returns the counters of each "artifact sync round" line of a
// sidecar's JSON log, in order.
func syncRounds(log string) []map[string]int {
	var rounds []map[string]int
	for _, line := range strings.Split(log, "\n") {
		i := strings.Index(line, "{")
		if i < 0 || !strings.Contains(line, `"msg":"artifact sync round"`) {
			continue
		}
		var fields map[string]any
		if err := json.Unmarshal([]byte(line[i:]), &fields); err != nil {
			continue
		}
		out := map[string]int{}
		for k, v := range fields {
			if n, ok := v.(float64); ok {
				out[k] = int(n)
			}
		}
		rounds = append(rounds, out)
	}
	return rounds
}
