package lifecycle

import (
	"fmt"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/jobconfig"
)

func TestUnmatchedGlobs(t *testing.T) {
	paths := []string{"model/model-00001.safetensors", "config.json", "ckpt/step-10/optimizer.pt", "nodes/1/shard-1.pt"}
	for _, tc := range []struct {
		require, want []string
	}{
		{[]string{"model/*.safetensors", "config.json"}, nil},
		{[]string{"**/*.pt"}, nil},
		{[]string{"nodes/*/shard-*.pt"}, nil},
		{[]string{"{config,tokenizer}.json"}, nil},
		// * does not cross a '/': the file is in a subdirectory.
		{[]string{"*.safetensors", "ckpt/*.pt"}, []string{"*.safetensors", "ckpt/*.pt"}},
		{[]string{"tokenizer.json", "config.json", "shard-*.pt"}, []string{"tokenizer.json", "shard-*.pt"}},
		{[]string{"Config.json"}, []string{"Config.json"}}, // case matters, as in the store
	} {
		if got := UnmatchedGlobs(tc.require, paths); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("UnmatchedGlobs(%q) = %q, want %q", tc.require, got, tc.want)
		}
	}
	if got := UnmatchedGlobs([]string{"**"}, nil); !reflect.DeepEqual(got, []string{"**"}) {
		t.Errorf("an empty manifest satisfied %q", got)
	}
}

func TestClosestPaths(t *testing.T) {
	for _, tc := range []struct {
		glob  string
		paths []string
		want  []string
	}{
		// The file in another directory first.
		{"config.json", []string{"tokenizer.json", "logs/train.log", "configs/config.json"}, []string{"configs/config.json", "tokenizer.json", "logs/train.log"}},
		// The extension next, then the shared prefix.
		{"model/*.safetensors", []string{"model/pytorch_model.bin", "weights/model.safetensors", "tokenizer.json", "model/config.json"},
			[]string{"weights/model.safetensors", "model/config.json", "model/pytorch_model.bin"}},
		// Between equals, the nearest by edit distance: a typo.
		{"confg.json", []string{"zzzzzz.json", "config.json"}, []string{"config.json", "zzzzzz.json"}},
		{"x", nil, []string{}},
	} {
		if got := ClosestPaths(tc.glob, tc.paths, 3); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ClosestPaths(%q, %q) = %q, want %q", tc.glob, tc.paths, got, tc.want)
		}
	}
	// Among many files, the shortlist keeps the good ones wherever they are listed.
	var many []string
	for i := range 5000 {
		many = append(many, fmt.Sprintf("ckpt/step-%05d/optimizer.pt", i))
	}
	many = append(many, "final/model.safetensors")
	if got := ClosestPaths("model/*.safetensors", many, 3); len(got) != 3 || got[0] != "final/model.safetensors" {
		t.Errorf("ClosestPaths among 5001 files = %q, want final/model.safetensors first", got)
	}
}

// The message names each glob that matched nothing and stays bounded
// however many globs and paths there are and however long they are.
func TestRequiredOutputsMessageIsBounded(t *testing.T) {
	var require []string
	for i := range jobconfig.MaxRequireGlobs {
		require = append(require, fmt.Sprintf("%03d/%s", i, strings.Repeat("g", jobconfig.MaxRequireGlobBytes-4)))
	}
	var paths []string
	for i := range 1000 {
		paths = append(paths, fmt.Sprintf("%03d/%s", i, strings.Repeat("p", 1000)))
	}
	st := &tetherv1.WorkerBindingStatus{Phase: tetherv1.PhaseFinishing, Reason: tetherv1.ReasonPromotingArtifacts}
	if RequiredOutputs(st, require, paths) {
		t.Fatal("globs that match nothing passed")
	}
	if st.Phase != tetherv1.PhaseFailed || st.Reason != tetherv1.ReasonRequiredOutputsMissing {
		t.Fatalf("%s/%s, want Failed/RequiredOutputsMissing", st.Phase, st.Reason)
	}
	if len(st.Message) > maxRequiredMessageBytes {
		t.Errorf("message of %d bytes, over %d", len(st.Message), maxRequiredMessageBytes)
	}
	if !strings.Contains(st.Message, `"000/ggg`) || !strings.Contains(st.Message, "closest verified: 000/ppp") {
		t.Errorf("message %q does not name the first glob and its closest path", st.Message[:200])
	}
	named := strings.Count(st.Message, "matched no verified file")
	if more := fmt.Sprintf("; and %d more globs that matched nothing", len(require)-named); named == 0 || !strings.HasSuffix(st.Message, more) {
		t.Errorf("message names %d globs and does not end in %q: %q", named, more, st.Message)
	}

	small := &tetherv1.WorkerBindingStatus{Phase: tetherv1.PhaseFinishing, Reason: tetherv1.ReasonPromotingArtifacts}
	RequiredOutputs(small, []string{"g0", "g1", "g2", "g3", "g4", "g5", "g6", "g7", "g8", "g9"}, []string{"a"})
	if !strings.HasSuffix(small.Message, "; and 2 more globs that matched nothing") {
		t.Errorf("message %q does not count the globs it does not name", small.Message)
	}
	empty := &tetherv1.WorkerBindingStatus{Phase: tetherv1.PhaseFinishing, Reason: tetherv1.ReasonPromotingArtifacts}
	RequiredOutputs(empty, []string{"config.json"}, nil)
	if want := `the final verified manifests (0 files) lack required outputs (tether.dev/require): "config.json" matched no verified file`; empty.Message != want {
		t.Errorf("message %q, want %q", empty.Message, want)
	}
}

func TestRequiredOutputsLeavesAFinalBinding(t *testing.T) {
	st := &tetherv1.WorkerBindingStatus{Phase: tetherv1.PhaseFailed, Reason: tetherv1.ReasonCancelled, Message: "cancelled"}
	if RequiredOutputs(st, []string{"config.json"}, nil) {
		t.Error("a glob that matches nothing passed")
	}
	if st.Reason != tetherv1.ReasonCancelled || st.Message != "cancelled" {
		t.Errorf("a final binding was changed: %s (%s)", st.Reason, st.Message)
	}
}

// A promoting binding of a job with required outputs asks for its verified
// manifests' paths and is not promoted before they are checked; what the
// read brings decides.
func TestRequiredOutputsReadBeforePromotion(t *testing.T) {
	complete := complete(21)
	pods := []corev1.Pod{*tpod(0, "a", 1).Exited(0, at(19)).Obj()}
	newBinding := func(require []string) *tetherv1.WorkerBinding {
		wb := &tetherv1.WorkerBinding{ObjectMeta: metav1.ObjectMeta{Name: "tj", Namespace: "ns", CreationTimestamp: metav1.NewTime(h0)}}
		wb.Spec.Settings = RecordSettings(jobconfig.Settings{HeartbeatInterval: 10 * time.Second, TrainerContainer: "node", Nodes: jobconfig.NodesAll,
			Require: require})
		wb.Status.NodeCount = 1
		Initial(&wb.Status)
		register(0, "a")(&wb.Status, at(1))
		verifiedManifest(0, shaFinal)(&wb.Status, at(20))
		return wb
	}
	p := Policy{StatusInterval: 10 * time.Second, MissedHeartbeats: 3, ArtifactGrace: 30 * time.Second}

	out := Derive(newBinding(nil), p, Observation{Now: at(22), Conditions: complete, Pods: pods})
	if out.Want.ListedPaths != nil || !out.Want.Promote {
		t.Fatalf("without required outputs: wants %+v, want a promotion and no read", out.Want)
	}

	wb := newBinding([]string{"config.json"})
	before := wb.Status.DeepCopy()
	out = Derive(wb, p, Observation{Now: at(22), Conditions: complete, Pods: pods})
	if want := map[int32]string{0: shaFinal}; !maps.Equal(out.Want.ListedPaths, want) || out.Want.Promote || !out.Want.Provisional() {
		t.Fatalf("wants %+v, want the paths of %v read before any promotion", out.Want, want)
	}
	if !reflect.DeepEqual(before, &wb.Status) {
		t.Error("Derive changed the binding it was given")
	}

	for _, tc := range []struct {
		name          string
		read          ListedPaths
		phase         tetherv1.WorkerBindingPhase
		reason        string
		messageHas    string
		promote       bool
		requeue       time.Duration
		nodeVerified  bool
		missingOnNode string
	}{
		{"the file is listed: promoted", ListedPaths{Paths: []string{"config.json"}},
			tetherv1.PhaseFinishing, tetherv1.ReasonPromotingArtifacts, "putting the latest verified versions in place", true, 0, true, ""},
		{"the file is not listed: Failed, nothing promoted", ListedPaths{Paths: []string{"configs/config.json"}},
			tetherv1.PhaseFailed, tetherv1.ReasonRequiredOutputsMissing, `"config.json" matched no verified file (closest verified: configs/config.json)`, false, 0, true, ""},
		{"the store cannot be read: still promoting, retried", ListedPaths{Err: "S3 GET: 503 SlowDown"},
			tetherv1.PhaseFinishing, tetherv1.ReasonPromotingArtifacts, "503 SlowDown", false, listedPathsRetry, true, ""},
		{"the manifest changed after its verdict: the verdict is taken back", ListedPaths{Changed: &ChangedManifest{Rank: 0, Path: "manifest.json", Why: "no stored version has the recorded SHA-256"}},
			tetherv1.PhaseFinishing, tetherv1.ReasonAwaitingArtifacts, "waiting for the artifact manifest", false, listedPathsRetry, false, "manifest.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			read := tc.read
			out := Derive(wb, p, Observation{Now: at(22), Conditions: complete, Pods: pods, ListedPaths: &read})
			st := &out.Status
			if st.Phase != tc.phase || st.Reason != tc.reason || !strings.Contains(st.Message, tc.messageHas) {
				t.Errorf("%s/%s (%q), want %s/%s with %q", st.Phase, st.Reason, st.Message, tc.phase, tc.reason, tc.messageHas)
			}
			if out.Want.Promote != tc.promote || out.Want.Provisional() {
				t.Errorf("wants %+v, want promote %v and no read", out.Want, tc.promote)
			}
			if out.Requeue != tc.requeue {
				t.Errorf("requeue %s, want %s", out.Requeue, tc.requeue)
			}
			a := st.Nodes[0].Artifacts
			if a.Verified != tc.nodeVerified || tc.missingOnNode != "" && (len(a.Missing) != 1 || a.Missing[0] != tc.missingOnNode) {
				t.Errorf("node 0's artifacts %+v, want verified %v missing %q", a, tc.nodeVerified, tc.missingOnNode)
			}
		})
	}
}
