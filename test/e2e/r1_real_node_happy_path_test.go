package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/mutate"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/localcluster"
)

// Real node, scenario 1: the happy path under a real kubelet, containerd and
// runc, from Tether's images, on Trainer's own torch-distributed runtime
// (plus hostNetwork) through Kueue. The kubelet starts the native sidecar
// before the trainer; the sidecar registers, heartbeats and uploads a
// checkpoint while the trainer runs; the trainer exits 0; the kubelet stops
// the sidecar, which flushes and uploads the manifest; the binding
// succeeds, the TrainJob completes, and the trainer's log is archived
// through the real pods/log API.
func TestRealNode1HappyPath(t *testing.T) {
	shared(t)
	node := needRealNode(t)
	timed(t)
	ns := suite.realNodeNamespace(t, "real-happy")
	const name = "real-finetune"
	plan := localcluster.TrainerPlan{Steps: 40, CheckpointEvery: 5, StepInterval: time.Second}
	tj := bound(realTrainJob(name, ns, plan)).Obj()
	suite.create(t, tj)
	jobID := tj.Annotations[names.JobIDAnnotation]

	pod := suite.injectedPod(t, ns, name, "")
	if pod.Spec.HostNetwork {
		t.Fatal("a pod of Trainer's torch-distributed runtime as shipped has hostNetwork")
	}
	// The sidecar is given the binding server's URL as installed: the
	// Service's DNS name, which only CoreDNS in the pod resolves.
	if got := injectedEnv(pod, names.EnvServerURL); got != localcluster.ControlPlaneBindingURL {
		t.Fatalf("sidecar's %s = %q, want the Service's DNS name %s", names.EnvServerURL, got, localcluster.ControlPlaneBindingURL)
	}
	sidecarImage := node.Image("tether-sidecar")
	if got := pod.Spec.InitContainers[len(pod.Spec.InitContainers)-1].Image; got != sidecarImage {
		t.Fatalf("injected sidecar image %q, want the one make images built (%s)", got, sidecarImage)
	}

	// The kubelet starts the native sidecar first, then the trainer.
	pod = suite.waitRunningOnRealNode(t, pod)
	sc, tr := containerStatus(pod, mutate.SidecarName), containerStatus(pod, "node")
	if sc.State.Running.StartedAt.After(tr.State.Running.StartedAt.Time) {
		t.Errorf("sidecar started at %s, after the trainer (%s)", sc.State.Running.StartedAt, tr.State.Running.StartedAt)
	}
	if !strings.HasPrefix(sc.ImageID, "sha256:") && !strings.Contains(sc.ImageID, "@sha256:") {
		t.Errorf("sidecar image ID %q: not run from an image", sc.ImageID)
	}

	wb := suite.waitBinding(t, ns, name, 60*time.Second, "registered and heartbeating", phaseIs(tetherv1.PhaseRunning, ""))
	// Registered by way of the Service's name: the sidecar was given no
	// other address.
	if wb.Status.Worker == nil || wb.Status.Worker.PodUID != string(pod.UID) || wb.Status.Worker.NodeName != nodeOf(t, pod).Name {
		t.Fatalf("registered worker %+v, want pod %s on node %s", wb.Status.Worker, pod.UID, pod.Spec.NodeName)
	}
	logf("real-happy: pod %s on %s (IP %s) registered through %s", pod.Name, pod.Spec.NodeName, pod.Status.PodIP, localcluster.ControlPlaneBindingURL)
	first := wb.Status.LastHeartbeatTime.Time
	suite.waitBinding(t, ns, name, 30*time.Second, "progress and newer heartbeats", func(wb *tetherv1.WorkerBinding) error {
		if wb.Status.Progress == nil || wb.Status.Progress.Step == nil || *wb.Status.Progress.Step < 2 {
			return fmt.Errorf("no progress yet")
		}
		if !wb.Status.LastHeartbeatTime.After(first) {
			return fmt.Errorf("heartbeat time not advancing")
		}
		return nil
	})

	// A checkpoint is stored with the MD5 of the file in the pod's emptyDir
	// (read on the host, where the kubelet keeps it) while the trainer runs.
	// The sidecar runs with its defaults here (10s settle time, 10s between
	// sync rounds), so a checkpoint is stored up to ~20s after it is written.
	dir := hostArtifactDir(t, pod)
	eventually(t, 60*time.Second, "a checkpoint verified during training", func() error {
		stored, local := suite.stored(t, jobID), localFiles(t, dir)
		for rel, sum := range stored {
			if strings.HasPrefix(rel, "checkpoints/") && local[rel] == sum {
				return nil
			}
		}
		return fmt.Errorf("no checkpoint stored with the local MD5 yet (stored %v, local %v)", stored, local)
	})
	if p := suite.podNow(t, ns, pod.Name); p == nil || trainerTerminated(p) {
		t.Fatal("the trainer had already exited: the checkpoint was not uploaded during training")
	}

	// The trainer exits 0; the kubelet stops the sidecar; the flush uploads
	// the manifest; Succeeded.
	wb = suite.waitBinding(t, ns, name, 120*time.Second, "Succeeded", phaseIs(tetherv1.PhaseSucceeded, tetherv1.ReasonTrainerSucceeded))
	a := wb.Status.Artifacts
	if a == nil || !a.ManifestVerified || ptr.Deref(wb.Status.TrainerExitCode, -1) != 0 {
		t.Fatalf("succeeded without a verified manifest or exit 0: artifacts %+v, exit code %v", a, wb.Status.TrainerExitCode)
	}
	pod = suite.waitPod(t, ns, pod.Name, 60*time.Second, "pod Succeeded, sidecar stopped by the kubelet", func(p *corev1.Pod) error {
		if p.Status.Phase != corev1.PodSucceeded {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		if s := containerStatus(p, mutate.SidecarName); s == nil || s.State.Terminated == nil {
			return fmt.Errorf("sidecar not terminated: %+v", s)
		}
		return nil
	})
	trainerEnd := containerStatus(pod, "node").State.Terminated
	sidecarEnd := containerStatus(pod, mutate.SidecarName).State.Terminated
	if trainerEnd.ExitCode != 0 || sidecarEnd.StartedAt.After(trainerEnd.FinishedAt.Time) || sidecarEnd.FinishedAt.Before(&trainerEnd.FinishedAt) {
		t.Errorf("trainer %+v, sidecar %+v: the sidecar must outlive the trainer and stop after it", trainerEnd, sidecarEnd)
	}

	// What the trainer left (its own closing list, from the pod's log through
	// the kubelet) is exactly what is stored, each file with its MD5.
	files := suite.expectStoredAsTrainerLeft(t, pod, jobID)
	if _, ok := files["model/final.safetensors"]; !ok || len(files) < 5 {
		t.Fatalf("trainer's file list %v: want the final model and at least 4 more", files)
	}
	if int(a.Files) != len(files) {
		t.Errorf("manifest lists %d files, the trainer left %d (%v)", a.Files, len(files), files)
	}
	eventually(t, 60*time.Second, "TrainJob Complete", func() error {
		if !meta.IsStatusConditionTrue(suite.getTrainJob(t, ns, name).Status.Conditions, "Complete") {
			return fmt.Errorf("not Complete")
		}
		return nil
	})
	// The control plane archived the trainer's log, read through pods/log.
	eventually(t, 60*time.Second, "the trainer's log archived", func() error {
		body, _, err := suite.tether.S3.Get(context.Background(), upload.LogKey(jobID, pod.Name))
		if err != nil {
			return err
		}
		if !strings.Contains(string(body), "trainer-standin: final model written") {
			return fmt.Errorf("archived log lacks the trainer's last line: %q", body)
		}
		return nil
	})
	logf("real node 1: %d files, %d bytes verified; trainer ran %s, sidecar stopped %s after it",
		a.Files, a.Bytes, trainerEnd.FinishedAt.Sub(trainerEnd.StartedAt.Time), sidecarEnd.FinishedAt.Sub(trainerEnd.FinishedAt.Time))
}
