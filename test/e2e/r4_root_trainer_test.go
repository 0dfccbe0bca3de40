package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	trainer "github.com/kubeflow/trainer/v2/pkg/apis/trainer/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/test/framework/localcluster"
)

// Real node, scenario 4: a trainer running as root writes its checkpoints
// with mode 0600 and its final model with 0644 into the shared emptyDir. The
// sidecar (uid 65532, as Pod Security "restricted" wants it) can read the
// 0644 file but not the 0600 ones. Nothing is skipped silently: the
// readable file is stored and verified; every unreadable file is named on
// the binding, with the reason and the fix, and the job does not succeed
// (its artifacts are incomplete), although the trainer exited 0.
func TestRealNode4RootTrainerFileModes(t *testing.T) {
	shared(t)
	needRealNode(t)
	timed(t)
	ns := suite.realNodeNamespace(t, "real-root")
	const name = "real-root-trainer"
	plan := localcluster.TrainerPlan{Steps: 6, CheckpointEvery: 2, StepInterval: 500 * time.Millisecond,
		CheckpointMode: "0600", ModelMode: "0644"}
	asRoot := trainer.PodSpecPatch{Containers: []trainer.ContainerPatch{{Name: "node",
		SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To[int64](0), RunAsGroup: ptr.To[int64](0)}}}}
	tj := bound(realTrainJob(name, ns, plan)).NodePatch(asRoot).Obj()
	suite.create(t, tj)
	jobID := tj.Annotations[names.JobIDAnnotation]
	pod := suite.waitRunningOnRealNode(t, suite.injectedPod(t, ns, name, ""))

	wb := suite.waitBinding(t, ns, name, 120*time.Second, "final: artifacts incomplete", phaseIs(tetherv1.PhaseFailed, tetherv1.ReasonArtifactsIncomplete))
	pod = suite.waitPodSucceeded(t, pod)
	trainerLog := suite.podLog(t, pod, "node", false)
	if !strings.Contains(trainerLog, "trainer-standin: uid 0 gid 0") {
		t.Fatalf("the trainer did not run as root: %s", trainerLog)
	}
	files := standinFiles(trainerLog)
	var unreadable []string
	for rel := range files {
		if strings.HasPrefix(rel, "checkpoints/") {
			unreadable = append(unreadable, rel)
		}
	}
	if len(unreadable) != 3 {
		t.Fatalf("the trainer left %v; want 3 checkpoints", files)
	}
	stored := suite.stored(t, jobID)
	if got, want := stored["model/final.safetensors"], files["model/final.safetensors"]; got == "" || got != want {
		t.Errorf("the 0644 model: stored %q, trainer's MD5 %q", got, want)
	}
	for _, rel := range unreadable {
		if _, ok := stored[rel]; ok {
			t.Errorf("%s is stored, though the sidecar cannot read it", rel)
		}
		found := false
		for _, m := range wb.Status.Artifacts.Missing {
			found = found || m == rel
		}
		if !found {
			t.Errorf("%s is not named missing on the binding (missing %v)", rel, wb.Status.Artifacts.Missing)
		}
	}
	msg := wb.Status.Message + " " + wb.Status.Artifacts.LastError
	for _, want := range []string{"permission denied", "65532"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the binding does not say why the files are missing (%q not in %q)", want, msg)
		}
	}
	eventually(t, 20*time.Second, "a Warning Event naming an unreadable file", func() error {
		for _, ev := range suite.events(t, ns, name) {
			if ev.Type == corev1.EventTypeWarning && ev.Reason == tetherv1.ReasonArtifactsIncomplete && strings.Contains(ev.Note, unreadable[0]) {
				return nil
			}
		}
		return fmt.Errorf("no Warning %s Event naming %s", tetherv1.ReasonArtifactsIncomplete, unreadable[0])
	})
	logf("real node 4: model stored; %d unreadable checkpoints named missing: %s", len(unreadable), msg)
}
