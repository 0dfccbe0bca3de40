package binding

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/test/framework/testobj"
)

// requireModelAndConfig is what the jobs of these tests require.
const requireModelAndConfig = "model/*.safetensors,config.json"

// requiringJob is a running bound job that requires requireModelAndConfig.
func requiringJob(t *testing.T) *job {
	t.Helper()
	j := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: "1s", names.RequireAnnotation: requireModelAndConfig})
	if got, want := j.binding(t).Spec.Settings.Require, []string{"model/*.safetensors", "config.json"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("spec.settings.require %q, want %q", got, want)
	}
	runningClient(t, j.clientConfig())
	j.waitPhase(t, tetherv1.PhaseRunning, "")
	return j
}

// finalFlush is the sidecar's final flush of what the artifact directory
// holds now: its manifest lists those files; it waits until the binding
// records that manifest's verdict, of files files.
func (j *job) finalFlush(t *testing.T, files int32) {
	t.Helper()
	if rep, err := j.syncer(t).Flush(context.Background()); err != nil {
		t.Fatalf("flush: %v (%+v)", err, rep)
	}
	eventually(t, 15*time.Second, func() error {
		a := j.binding(t).Status.Artifacts
		if a == nil || !a.ManifestVerified || a.Files != files {
			return fmt.Errorf("artifacts %+v, want a verified manifest of %d files", a, files)
		}
		return nil
	})
}

// complete ends the trainer with exit 0 and completes the TrainJob.
func (j *job) complete(t *testing.T) {
	t.Helper()
	finishTrainer(t, j, 0)
	setTrainJobCondition(t, j, "Complete", "jobset completed")
}

// warningEvent waits for a Warning Event of reason on j's TrainJob and
// returns its note.
func warningEvent(t *testing.T, j *job, reason string) string {
	t.Helper()
	var note string
	eventually(t, 15*time.Second, func() error {
		var list eventsv1.EventList
		if err := env.Client.List(context.Background(), &list, client.InNamespace(j.ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Regarding.Name == j.name && e.Reason == reason && e.Type == corev1.EventTypeWarning {
				note = e.Note
				return nil
			}
		}
		return fmt.Errorf("no Warning %s Event on TrainJob %s", reason, j.name)
	})
	return note
}

func TestRequiredOutputsPresentSucceeds(t *testing.T) {
	j := requiringJob(t)
	j.write(t, "model/model-00001-of-00002.safetensors", []byte("weights 1"))
	j.write(t, "model/model-00002-of-00002.safetensors", []byte("weights 2"))
	j.write(t, "config.json", []byte(`{"layers":2}`))
	j.write(t, "logs/train.log", []byte("step 1\n"))
	j.finalFlush(t, 4)
	j.complete(t)
	j.waitPhase(t, tetherv1.PhaseSucceeded, tetherv1.ReasonTrainerSucceeded)
}

func TestRequiredOutputMissingFromFinalManifestFails(t *testing.T) {
	j := requiringJob(t)
	// The weights are written where the glob does not look.
	j.write(t, "weights/model.safetensors", []byte("weights"))
	j.write(t, "config.json", []byte(`{"layers":2}`))
	j.finalFlush(t, 2)
	j.complete(t)
	wb := j.waitPhase(t, tetherv1.PhaseFailed, tetherv1.ReasonRequiredOutputsMissing)
	want := `"model/*.safetensors" matched no verified file (closest verified: weights/model.safetensors`
	if !strings.Contains(wb.Status.Message, want) || strings.Contains(wb.Status.Message, `"config.json"`) {
		t.Errorf("message %q, want it to name the unmatched glob only, with %q", wb.Status.Message, want)
	}
	if note := warningEvent(t, j, tetherv1.ReasonRequiredOutputsMissing); !strings.Contains(note, want) {
		t.Errorf("Event note %q does not name the glob and the closest path", note)
	}
}

func TestRequiredOutputOfAnEarlierManifestOnlyFails(t *testing.T) {
	j := requiringJob(t)
	j.write(t, "model/model.safetensors", []byte("checkpoint weights"))
	j.write(t, "config.json", []byte(`{"layers":2}`))
	j.finalFlush(t, 2)
	// The trainer removes the weights (a verified node may not add files
	// in the same attempt); the last manifest no longer lists them.
	if err := os.Remove(filepath.Join(j.artifactDir, "model", "model.safetensors")); err != nil {
		t.Fatal(err)
	}
	j.finalFlush(t, 1)
	j.complete(t)
	wb := j.waitPhase(t, tetherv1.PhaseFailed, tetherv1.ReasonRequiredOutputsMissing)
	if want := `(1 files) lack required outputs (tether.dev/require): "model/*.safetensors" matched no verified file (closest verified: config.json)`; !strings.Contains(wb.Status.Message, want) {
		t.Errorf("message %q does not contain %q", wb.Status.Message, want)
	}
	warningEvent(t, j, tetherv1.ReasonRequiredOutputsMissing)
}

func TestInvalidRequireIsDeniedAtAdmission(t *testing.T) {
	nsCounter++
	ns := fmt.Sprintf("bind-%d", nsCounter)
	mustCreate(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	tj := testobj.MakeTrainJob("train", ns).Bound().Annotation(names.RequireAnnotation, "model/*.safetensors,../other/config.json").Obj()
	err := env.Client.Create(context.Background(), tj)
	want := `annotation tether.dev/require="model/*.safetensors,../other/config.json" is invalid: glob "../other/config.json" must not contain '..'`
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), `(example: tether.dev/require: "model/*.safetensors,config.json")`) {
		t.Fatalf("creating a TrainJob with an invalid %s: %v, want a denial with %q and an example", names.RequireAnnotation, err, want)
	}
}
