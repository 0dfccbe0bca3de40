package plugin

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pmezard/go-difflib/difflib"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) *metav1.Time { return ptr.To(metav1.NewTime(t0.Add(d))) }

// bindings are a two-node job that trained, resumed after a JobSet restart,
// and succeeded, and a queued job.
func bindings() []tetherv1.WorkerBinding {
	done := tetherv1.WorkerBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "llm-finetune", Namespace: "team-a", CreationTimestamp: metav1.NewTime(t0)},
		Spec:       tetherv1.WorkerBindingSpec{TrainJobName: "llm-finetune", JobID: "llm-0042", WorkerID: "w-1"},
		Status: tetherv1.WorkerBindingStatus{Phase: tetherv1.PhaseSucceeded, Reason: tetherv1.ReasonTrainerSucceeded,
			Message: "trainer exited 0 and every artifact is verified", Attempt: 2, AttemptStartedBy: tetherv1.AttemptJobSetRestart,
			AttemptStartTime: at(5 * time.Minute), NodeCount: 2, LastHeartbeatTime: at(19 * time.Minute),
			Progress: &tetherv1.Progress{Step: ptr.To[int64](1000), Fraction: "1", Epoch: "3", Loss: "0.1825", UpdatedTime: at(19 * time.Minute)},
			Nodes: []tetherv1.NodeStatus{
				{Rank: 0, PodName: "llm-finetune-node-0-0-abcde", RegisteredTime: at(5*time.Minute + 3*time.Second), LastHeartbeatTime: at(19 * time.Minute),
					LastExit:  &tetherv1.TrainerExit{ExitCode: 0, Reason: "Completed", Attempt: 2, FinishedAt: *at(19 * time.Minute)},
					Artifacts: &tetherv1.NodeArtifacts{Manifest: "llm-0042/manifest.json", Verified: true, Files: 3, Bytes: 3 << 20}},
				{Rank: 1, PodName: "llm-finetune-node-0-1-fghij", RegisteredTime: at(5*time.Minute + 4*time.Second), LastHeartbeatTime: at(19 * time.Minute), Restarts: 1,
					LastExit:  &tetherv1.TrainerExit{ExitCode: 0, Reason: "Completed", Attempt: 2, FinishedAt: *at(19 * time.Minute)},
					Artifacts: &tetherv1.NodeArtifacts{Manifest: "llm-0042/nodes/1/manifest.json", Verified: true, Files: 1, Bytes: 1 << 20}},
			},
			LastTrainerExit: &tetherv1.TrainerExit{Rank: 1, PodName: "llm-finetune-node-0-1-fghij", ExitCode: 0, Reason: "Completed", Attempt: 2, FinishedAt: *at(19 * time.Minute)},
			Artifacts: &tetherv1.ArtifactsStatus{Manifest: "llm-0042/manifest.json", ManifestVerified: true, Files: 3, Bytes: 3 << 20,
				Logs:    []string{"llm-0042/.tether/logs/llm-finetune-node-0-0-abcde.log", "llm-0042/.tether/logs/llm-finetune-node-0-1-fghij.log"},
				Skipped: []string{`latest: symlink to "/etc/passwd", outside the artifact directory`, "queue: a FIFO"}, SkippedCount: 3},
			LastCommand: &tetherv1.CommandStatus{ID: "7", Name: "flush", State: "Acknowledged", SentNodes: []int32{0, 1}, AckedNodes: []int32{0, 1}, Time: at(10 * time.Minute)},
		},
	}
	queued := tetherv1.WorkerBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "eval-sweep", Namespace: "team-b", CreationTimestamp: metav1.NewTime(t0.Add(18 * time.Minute))},
		Spec:       tetherv1.WorkerBindingSpec{TrainJobName: "eval-sweep", JobID: "sweep-7", WorkerID: "w-2"},
		Status:     tetherv1.WorkerBindingStatus{Phase: tetherv1.PhasePending, Reason: tetherv1.ReasonSuspended},
	}
	return []tetherv1.WorkerBinding{done, queued}
}

func events() []eventsv1.Event {
	ev := func(d time.Duration, reason, note string) eventsv1.Event {
		return eventsv1.Event{EventTime: metav1.NewMicroTime(t0.Add(d)), Reason: reason, Note: note,
			Regarding: corev1.ObjectReference{Kind: "TrainJob", Name: "llm-finetune"}}
	}
	restart := ev(5*time.Minute, "AttemptStarted", "attempt 2 started by JobSetRestart")
	restart.Series = &eventsv1.EventSeries{Count: 2, LastObservedTime: metav1.NewMicroTime(t0.Add(5 * time.Minute))}
	return []eventsv1.Event{
		ev(19*time.Minute+2*time.Second, "TrainerSucceeded", "trainer exited 0 and every artifact is verified"),
		ev(time.Second, "TokenIssued", "binding Pending: waiting for the sidecar to register"),
		restart,
		ev(5*time.Minute+3*time.Second, "Registered", "node 0 registered"),
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/plugin -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		diff, _ := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{A: difflib.SplitLines(string(want)), B: difflib.SplitLines(string(got)),
			FromFile: path, ToFile: "got", Context: 2})
		t.Errorf("output differs from %s (go test ./internal/plugin -update rewrites it):\n%s", path, diff)
	}
}

func testOptions(output string, all bool) (*options, *bytes.Buffer) {
	var out, errOut bytes.Buffer
	return &options{streams: genericiooptions.IOStreams{Out: &out, ErrOut: &errOut}, output: output, allNamespaces: all,
		now: func() time.Time { return t0.Add(20 * time.Minute) }}, &out
}

func TestGetOutputs(t *testing.T) {
	for _, c := range []struct {
		file, output string
		all, single  bool
	}{
		{"get.txt", "", false, false},
		{"get-all-namespaces-wide.txt", "wide", true, false},
		{"get-name.txt", "name", false, false},
		{"get-one.yaml", "yaml", false, true},
	} {
		o, out := testOptions(c.output, c.all)
		items := bindings()
		if c.single {
			items = items[:1]
		}
		if err := o.printBindings(out, items, c.single); err != nil {
			t.Fatal(err)
		}
		golden(t, c.file, out.Bytes())
	}
	o, out := testOptions("toml", false)
	if err := o.printBindings(out, bindings(), false); err == nil {
		t.Error("-o toml accepted")
	}
}

func TestDescribeTimeline(t *testing.T) {
	o, out := testOptions("", false)
	wb := bindings()[0]
	if err := o.describe(out, &wb, events()); err != nil {
		t.Fatal(err)
	}
	golden(t, "describe.txt", out.Bytes())
}

func TestCommandLineErrors(t *testing.T) {
	for _, args := range [][]string{
		{"wait", "x", "--for=condition="},
		{"wait", "x", "--for=phase=Done"},
		{"wait", "x", "--for=jsonpath={.status.phase"},
		{"get", "a", "b"},
		{"artifacts", "get", "x"},
	} {
		var out, errOut bytes.Buffer
		cmd := NewCommand(genericiooptions.IOStreams{Out: &out, ErrOut: &errOut})
		cmd.SetArgs(append([]string{"--kubeconfig", "/nonexistent"}, args...))
		if err := cmd.Execute(); err == nil {
			t.Errorf("kubectl tether %v: no error", args)
		}
	}
	// Shell completion is generated by cobra from the command tree.
	var out bytes.Buffer
	cmd := NewCommand(genericiooptions.IOStreams{Out: &out, ErrOut: &out})
	cmd.SetArgs([]string{"completion", "bash"})
	if err := cmd.Execute(); err != nil || !bytes.Contains(out.Bytes(), []byte("__start_kubectl-tether")) {
		t.Errorf("completion bash: %v, %d bytes", err, out.Len())
	}
}
