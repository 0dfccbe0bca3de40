package jobconfig

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

func defaults() Settings {
	return Settings{
		ArtifactPath:      DefaultArtifactPath,
		HeartbeatInterval: DefaultHeartbeatInterval,
		TrainerContainer:  DefaultTrainerContainer,
	}
}

func TestParseDefaults(t *testing.T) {
	for name, annotations := range map[string]map[string]string{
		"nil":       nil,
		"empty":     {},
		"unrelated": {"example.com/owner": "ml-team", "tether.dev/bind": "true", PodStatusAnnotation: "{}"},
		"ids only":  {JobIDAnnotation: "llama-finetune-0042", WorkerIDAnnotation: "00000000-0000-4000-8000-000000000002"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := Parse(annotations)
			if err != nil {
				t.Fatal(err)
			}
			if want := defaults(); !reflect.DeepEqual(got, want) {
				t.Errorf("Parse = %+v, want the defaults %+v", got, want)
			}
		})
	}
}

func TestParseValid(t *testing.T) {
	tests := []struct {
		key, value string
		// want changes the defaults into the expected settings.
		want func(*Settings)
	}{
		{ArtifactPathAnnotation, "/mnt/output", func(s *Settings) { s.ArtifactPath = "/mnt/output" }},
		{ArtifactPathAnnotation, "/workspace/artifacts", func(s *Settings) {}},
		{ArtifactPathAnnotation, "/var/run/tetherish", func(s *Settings) { s.ArtifactPath = "/var/run/tetherish" }},
		{ArtifactPathAnnotation, "/data/run 1/out", func(s *Settings) { s.ArtifactPath = "/data/run 1/out" }},
		{ArtifactPathAnnotation, "/" + strings.Repeat("a", 1023), func(s *Settings) { s.ArtifactPath = "/" + strings.Repeat("a", 1023) }},
		{IncludeAnnotation, "checkpoints/**", func(s *Settings) { s.Include = []string{"checkpoints/**"} }},
		{IncludeAnnotation, "checkpoints/**, *.safetensors ,final/*.json", func(s *Settings) {
			s.Include = []string{"checkpoints/**", "*.safetensors", "final/*.json"}
		}},
		{ExcludeAnnotation, "**/*.tmp,optimizer/**", func(s *Settings) { s.Exclude = []string{"**/*.tmp", "optimizer/**"} }},
		{HeartbeatIntervalAnnotation, "30s", func(s *Settings) { s.HeartbeatInterval = 30 * time.Second }},
		{HeartbeatIntervalAnnotation, "1s", func(s *Settings) { s.HeartbeatInterval = time.Second }},
		{HeartbeatIntervalAnnotation, "5m", func(s *Settings) { s.HeartbeatInterval = 5 * time.Minute }},
		{HeartbeatIntervalAnnotation, "1m30s", func(s *Settings) { s.HeartbeatInterval = 90 * time.Second }},
		{HeartbeatIntervalAnnotation, "1500ms", func(s *Settings) { s.HeartbeatInterval = 1500 * time.Millisecond }},
		{TrainerContainerAnnotation, "trainer", func(s *Settings) { s.TrainerContainer = "trainer" }},
		{TrainerContainerAnnotation, "pytorch-0", func(s *Settings) { s.TrainerContainer = "pytorch-0" }},
		{SidecarImageAnnotation, "ghcr.io/tether-dev/tether-sidecar:v0.1.0", func(s *Settings) { s.SidecarImage = "ghcr.io/tether-dev/tether-sidecar:v0.1.0" }},
		{SidecarImageAnnotation, "registry.example.com:5000/mirror/tether-sidecar", func(s *Settings) { s.SidecarImage = "registry.example.com:5000/mirror/tether-sidecar" }},
		{SidecarImageAnnotation, "busybox", func(s *Settings) { s.SidecarImage = "busybox" }},
		{SidecarImageAnnotation, "ghcr.io/tether-dev/tether-sidecar@sha256:" + strings.Repeat("ab", 32), func(s *Settings) {
			s.SidecarImage = "ghcr.io/tether-dev/tether-sidecar@sha256:" + strings.Repeat("ab", 32)
		}},
		{JobIDAnnotation, "llama-finetune-0042", func(s *Settings) {}},
		{JobIDAnnotation, "a", func(s *Settings) {}},
		{JobIDAnnotation, "run_7.v2", func(s *Settings) {}},
		{JobIDAnnotation, strings.Repeat("a", 63), func(s *Settings) {}},
		{WorkerIDAnnotation, "00000000-0000-4000-8000-000000000002", func(s *Settings) {}},
	}
	for _, tt := range tests {
		t.Run(tt.key+"="+truncate(tt.value), func(t *testing.T) {
			got, err := Parse(map[string]string{tt.key: tt.value})
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			want := defaults()
			tt.want(&want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Parse = %+v, want %+v", got, want)
			}
		})
	}
}

func TestParseInvalid(t *testing.T) {
	tests := []struct {
		key, value string
		problem    string // a substring of the error's problem
	}{
		{ArtifactPathAnnotation, "", "absolute"},
		{ArtifactPathAnnotation, "workspace/artifacts", "absolute"},
		{ArtifactPathAnnotation, "/workspace/../etc", "clean"},
		{ArtifactPathAnnotation, "/workspace/./artifacts", "clean"},
		{ArtifactPathAnnotation, "/workspace//artifacts", "clean"},
		{ArtifactPathAnnotation, "/workspace/artifacts/", "clean"},
		{ArtifactPathAnnotation, "/", "root"},
		{ArtifactPathAnnotation, "/" + strings.Repeat("a", 1024), "1024"},
		{ArtifactPathAnnotation, "/workspace/a:b", "':'"},
		{ArtifactPathAnnotation, "/workspace/a,b", "','"},
		{ArtifactPathAnnotation, "/workspace/a\x00b", "NUL"},
		{ArtifactPathAnnotation, "/var/run/tether", "/var/run/tether"},
		{ArtifactPathAnnotation, "/var/run/tether/artifacts", "/var/run/tether"},
		{IncludeAnnotation, "", "empty glob"},
		{IncludeAnnotation, "checkpoints/**,,*.safetensors", "empty glob"},
		{IncludeAnnotation, "checkpoints/**, ", "empty glob"},
		{IncludeAnnotation, "[abc", `glob "[abc" is malformed`},
		{IncludeAnnotation, "final/{model,tokenizer", "malformed"},
		// The list is split on every comma, so doublestar's {a,b} alternation
		// cannot be written: it splits into "final/{model" and "tokenizer}.json".
		{IncludeAnnotation, "final/{model,tokenizer}.json", `glob "final/{model" is malformed`},
		{IncludeAnnotation, "/abs/**", `glob "/abs/**" must be relative`},
		{ExcludeAnnotation, "/tmp/*", "relative"},
		{ExcludeAnnotation, "**/*.tmp,[", "malformed"},
		{HeartbeatIntervalAnnotation, "soon", "not a duration"},
		{HeartbeatIntervalAnnotation, "10", "not a duration"},
		{HeartbeatIntervalAnnotation, "", "not a duration"},
		{HeartbeatIntervalAnnotation, "0.5s", "between 1s and 5m0s"},
		{HeartbeatIntervalAnnotation, "0s", "between"},
		{HeartbeatIntervalAnnotation, "-10s", "between"},
		{HeartbeatIntervalAnnotation, "5m1s", "between"},
		{TrainerContainerAnnotation, "Node_1", "DNS label"},
		{TrainerContainerAnnotation, "", "DNS label"},
		{TrainerContainerAnnotation, "-node", "DNS label"},
		{TrainerContainerAnnotation, strings.Repeat("a", 64), "DNS label"},
		{SidecarImageAnnotation, "not a ref!!", "not an image reference"},
		{SidecarImageAnnotation, "", "not an image reference"},
		{SidecarImageAnnotation, "GHCR.io/Tether/Sidecar:v1", "not an image reference"},
		{SidecarImageAnnotation, "ghcr.io/tether-dev/tether-sidecar:", "not an image reference"},
		{JobIDAnnotation, "Bad_ID", "lowercase"},
		{JobIDAnnotation, "", "lowercase"},
		{JobIDAnnotation, "-llama", "starting and ending"},
		{JobIDAnnotation, "llama.", "starting and ending"},
		{JobIDAnnotation, "llama/0042", "lowercase"},
		{JobIDAnnotation, strings.Repeat("a", 64), "1-63"},
		{WorkerIDAnnotation, "Worker 1", "lowercase"},
	}
	for _, tt := range tests {
		t.Run(tt.key+"="+truncate(tt.value), func(t *testing.T) {
			_, err := Parse(map[string]string{tt.key: tt.value})
			if err == nil {
				t.Fatal("Parse accepted the value")
			}
			var iae *InvalidAnnotationError
			if !errors.As(err, &iae) {
				t.Fatalf("error %v (%T) is not an *InvalidAnnotationError", err, err)
			}
			if iae.Key != tt.key || iae.Value != tt.value {
				t.Errorf("error names %s=%q, want %s=%q", iae.Key, iae.Value, tt.key, tt.value)
			}
			if !strings.Contains(iae.Problem, tt.problem) {
				t.Errorf("problem %q does not mention %q", iae.Problem, tt.problem)
			}
			checkErrorMessage(t, err.Error(), iae)
		})
	}
}

// checkErrorMessage asserts what a person fixing the annotation reads: the
// key, the bad value, and an example that is itself valid.
func checkErrorMessage(t *testing.T, msg string, iae *InvalidAnnotationError) {
	t.Helper()
	for what, want := range map[string]string{
		"key":     iae.Key,
		"value":   fmt.Sprintf("%q", iae.Value),
		"example": fmt.Sprintf("(example: %s: %q)", iae.Key, iae.Example),
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks the %s %s", msg, what, want)
		}
	}
	if iae.Example == "" {
		t.Error("empty example")
	}
	if _, err := Parse(map[string]string{iae.Key: iae.Example}); err != nil {
		t.Errorf("the example %s=%q is itself invalid: %v", iae.Key, iae.Example, err)
	}
}

func TestParseReportsEveryInvalidAnnotation(t *testing.T) {
	annotations := map[string]string{
		ArtifactPathAnnotation:      "artifacts",
		IncludeAnnotation:           "[abc",
		ExcludeAnnotation:           "/tmp/*",
		HeartbeatIntervalAnnotation: "10m",
		TrainerContainerAnnotation:  "Node_1",
		SidecarImageAnnotation:      "not a ref!!",
		JobIDAnnotation:             "Bad_ID",
		WorkerIDAnnotation:          "Bad_ID",
	}
	_, err := Parse(annotations)
	if err == nil {
		t.Fatal("Parse accepted every invalid annotation")
	}
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("error %T does not wrap several errors", err)
	}
	var keys []string
	for _, e := range joined.Unwrap() {
		var iae *InvalidAnnotationError
		if !errors.As(e, &iae) {
			t.Fatalf("error %v (%T) is not an *InvalidAnnotationError", e, e)
		}
		keys = append(keys, iae.Key)
		checkErrorMessage(t, err.Error(), iae)
	}
	// In Parse's order, which is also the order of the message's lines.
	want := []string{ArtifactPathAnnotation, IncludeAnnotation, ExcludeAnnotation, HeartbeatIntervalAnnotation,
		TrainerContainerAnnotation, SidecarImageAnnotation, JobIDAnnotation, WorkerIDAnnotation}
	if !reflect.DeepEqual(keys, want) {
		t.Errorf("reported %v, want %v", keys, want)
	}
	if lines := strings.Count(err.Error(), "\n") + 1; lines != len(want) {
		t.Errorf("message has %d lines, want one per annotation (%d):\n%s", lines, len(want), err)
	}
}

func TestParseKeepsValidSettingsNextToInvalidOnes(t *testing.T) {
	// Callers must not use Settings when err != nil; this only pins down that
	// one bad annotation does not stop the others from being validated.
	_, err := Parse(map[string]string{
		HeartbeatIntervalAnnotation: "soon",
		TrainerContainerAnnotation:  "trainer",
		IncludeAnnotation:           "/abs",
	})
	if err == nil {
		t.Fatal("Parse accepted invalid annotations")
	}
	for _, key := range []string{HeartbeatIntervalAnnotation, IncludeAnnotation} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("error does not report %s: %v", key, err)
		}
	}
	if strings.Contains(err.Error(), TrainerContainerAnnotation) {
		t.Errorf("error reports the valid %s: %v", TrainerContainerAnnotation, err)
	}
}

func TestValidateID(t *testing.T) {
	for _, id := range []string{"llama-finetune-0042", "00000000-0000-4000-8000-000000000001", "a", "a.b_c-d"} {
		if err := ValidateID(JobIDAnnotation, id); err != nil {
			t.Errorf("ValidateID(%q): %v", id, err)
		}
	}
	for _, id := range []string{"", "Bad_ID", "_a", "a_", "a b", "a/b", strings.Repeat("a", 64)} {
		err := ValidateID(WorkerIDAnnotation, id)
		var iae *InvalidAnnotationError
		if !errors.As(err, &iae) || iae.Key != WorkerIDAnnotation || iae.Value != id {
			t.Errorf("ValidateID(%q) = %v, want an InvalidAnnotationError for %s", id, err, WorkerIDAnnotation)
		}
	}
}

func TestIsBound(t *testing.T) {
	for _, tt := range []struct {
		labels map[string]string
		want   bool
	}{
		{nil, false},
		{map[string]string{}, false},
		{map[string]string{BindLabel: "true"}, true},
		{map[string]string{BindLabel: "false"}, false},
		{map[string]string{BindLabel: "True"}, false},
		{map[string]string{BindLabel: ""}, false},
		{map[string]string{"bind": "true"}, false},
	} {
		if got := IsBound(tt.labels); got != tt.want {
			t.Errorf("IsBound(%v) = %v, want %v", tt.labels, got, tt.want)
		}
	}
}

// truncate keeps subtest names short.
func truncate(s string) string {
	if len(s) > 40 {
		return s[:20] + "..." + fmt.Sprint(len(s))
	}
	return s
}
