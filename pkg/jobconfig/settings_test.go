package jobconfig

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/api/names"
)

func defaults() Settings {
	return Settings{
		ArtifactPath:      DefaultArtifactPath,
		HeartbeatInterval: DefaultHeartbeatInterval,
		TrainerContainer:  DefaultTrainerContainer,
		Nodes:             NodesAll,
		TrainerStatus:     TrainerStatusAuto,
	}
}

func TestParseDefaults(t *testing.T) {
	for name, annotations := range map[string]map[string]string{
		"nil":       nil,
		"empty":     {},
		"unrelated": {"example.com/owner": "ml-team", "tether.dev/bind": "true", names.PodStatusAnnotation: "{}"},
		"ids only":  {names.JobIDAnnotation: "llama-finetune-0042", names.WorkerIDAnnotation: "00000000-0000-4000-8000-000000000002"},
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
		{names.ArtifactPathAnnotation, "/mnt/output", func(s *Settings) { s.ArtifactPath = "/mnt/output" }},
		{names.ArtifactPathAnnotation, "/workspace/artifacts", func(s *Settings) {}},
		{names.ArtifactPathAnnotation, "/var/run/tetherish", func(s *Settings) { s.ArtifactPath = "/var/run/tetherish" }},
		{names.ArtifactPathAnnotation, "/data/run 1/out", func(s *Settings) { s.ArtifactPath = "/data/run 1/out" }},
		{names.ArtifactPathAnnotation, "/" + strings.Repeat("a", 1023), func(s *Settings) { s.ArtifactPath = "/" + strings.Repeat("a", 1023) }},
		{names.IncludeAnnotation, "checkpoints/**", func(s *Settings) { s.Include = []string{"checkpoints/**"} }},
		{names.IncludeAnnotation, "checkpoints/**, *.safetensors ,final/*.json", func(s *Settings) {
			s.Include = []string{"checkpoints/**", "*.safetensors", "final/*.json"}
		}},
		{names.ExcludeAnnotation, "**/*.tmp,optimizer/**", func(s *Settings) { s.Exclude = []string{"**/*.tmp", "optimizer/**"} }},
		// doublestar's {a,b} alternation: the list is not split inside braces.
		{names.IncludeAnnotation, "final/{model,tokenizer}.json", func(s *Settings) { s.Include = []string{"final/{model,tokenizer}.json"} }},
		{names.IncludeAnnotation, "checkpoints/**, final/{model,tokenizer}.json ,*.{pt,safetensors}", func(s *Settings) {
			s.Include = []string{"checkpoints/**", "final/{model,tokenizer}.json", "*.{pt,safetensors}"}
		}},
		{names.IncludeAnnotation, "{a,{b,c}}/**,d", func(s *Settings) { s.Include = []string{"{a,{b,c}}/**", "d"} }},
		{names.ExcludeAnnotation, "**/*.{tmp,lock},optimizer/**", func(s *Settings) { s.Exclude = []string{"**/*.{tmp,lock}", "optimizer/**"} }},
		{names.HeartbeatIntervalAnnotation, "30s", func(s *Settings) { s.HeartbeatInterval = 30 * time.Second }},
		{names.HeartbeatIntervalAnnotation, "1s", func(s *Settings) { s.HeartbeatInterval = time.Second }},
		{names.HeartbeatIntervalAnnotation, "5m", func(s *Settings) { s.HeartbeatInterval = 5 * time.Minute }},
		{names.HeartbeatIntervalAnnotation, "1m30s", func(s *Settings) { s.HeartbeatInterval = 90 * time.Second }},
		{names.HeartbeatIntervalAnnotation, "1500ms", func(s *Settings) { s.HeartbeatInterval = 1500 * time.Millisecond }},
		{names.TrainerContainerAnnotation, "trainer", func(s *Settings) { s.TrainerContainer = "trainer" }},
		{names.TrainerContainerAnnotation, "pytorch-0", func(s *Settings) { s.TrainerContainer = "pytorch-0" }},
		{names.SidecarImageAnnotation, "ghcr.io/tether-dev/tether-sidecar:v0.1.0", func(s *Settings) { s.SidecarImage = "ghcr.io/tether-dev/tether-sidecar:v0.1.0" }},
		{names.SidecarImageAnnotation, "registry.example.com:5000/mirror/tether-sidecar", func(s *Settings) { s.SidecarImage = "registry.example.com:5000/mirror/tether-sidecar" }},
		{names.SidecarImageAnnotation, "busybox", func(s *Settings) { s.SidecarImage = "busybox" }},
		{names.NodesAnnotation, NodesPrimary, func(s *Settings) { s.Nodes = NodesPrimary }},
		{names.NodesAnnotation, NodesAll, func(s *Settings) {}},
		{names.TrainerStatusAnnotation, TrainerStatusOff, func(s *Settings) { s.TrainerStatus = TrainerStatusOff }},
		{names.TrainerStatusAnnotation, TrainerStatusAuto, func(s *Settings) {}},
		{names.StallAfterAnnotation, "45m", func(s *Settings) { s.StallAfter = 45 * time.Minute }},
		{names.StallAfterAnnotation, "1m", func(s *Settings) { s.StallAfter = time.Minute }},
		{names.StallAfterAnnotation, "168h", func(s *Settings) { s.StallAfter = 168 * time.Hour }},
		{names.SidecarImageAnnotation, "ghcr.io/tether-dev/tether-sidecar@sha256:" + strings.Repeat("ab", 32), func(s *Settings) {
			s.SidecarImage = "ghcr.io/tether-dev/tether-sidecar@sha256:" + strings.Repeat("ab", 32)
		}},
		{names.JobIDAnnotation, "llama-finetune-0042", func(s *Settings) {}},
		{names.JobIDAnnotation, "a", func(s *Settings) {}},
		{names.JobIDAnnotation, "run_7.v2", func(s *Settings) {}},
		{names.JobIDAnnotation, strings.Repeat("a", 63), func(s *Settings) {}},
		{names.WorkerIDAnnotation, "00000000-0000-4000-8000-000000000002", func(s *Settings) {}},
		{names.RequireAnnotation, "model/*.safetensors,config.json", func(s *Settings) { s.Require = []string{"model/*.safetensors", "config.json"} }},
		{names.RequireAnnotation, " nodes/1/**/*.pt , {model,tokenizer}/config.json", func(s *Settings) {
			s.Require = []string{"nodes/1/**/*.pt", "{model,tokenizer}/config.json"}
		}},
		{names.RequireAnnotation, "**", func(s *Settings) { s.Require = []string{"**"} }},
		{names.RequireAnnotation, "a..b/c..", func(s *Settings) { s.Require = []string{"a..b/c.."} }},
		{names.RequireAnnotation, strings.Repeat("a", MaxRequireGlobBytes), func(s *Settings) { s.Require = []string{strings.Repeat("a", MaxRequireGlobBytes)} }},
		{names.RequireAnnotation, strings.TrimSuffix(strings.Repeat("f,", MaxRequireGlobs), ","), func(s *Settings) {
			s.Require = slices.Repeat([]string{"f"}, MaxRequireGlobs)
		}},
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
		{names.ArtifactPathAnnotation, "", "absolute"},
		{names.NodesAnnotation, "rank0", "must be all (every node is bound) or primary"},
		{names.NodesAnnotation, "Primary", "must be all"},
		{names.TrainerStatusAnnotation, "on", "must be auto (Tether writes TrainJob.status.trainerStatus unless the trainer reports it) or off"},
		{names.TrainerStatusAnnotation, "", "must be auto"},
		{names.StallAfterAnnotation, "an hour", "not a duration"},
		{names.StallAfterAnnotation, "59s", "must be between 1m and 168h"},
		{names.StallAfterAnnotation, "169h", "must be between 1m and 168h"},
		{names.ArtifactPathAnnotation, "workspace/artifacts", "absolute"},
		{names.ArtifactPathAnnotation, "/workspace/../etc", "clean"},
		{names.ArtifactPathAnnotation, "/workspace/./artifacts", "clean"},
		{names.ArtifactPathAnnotation, "/workspace//artifacts", "clean"},
		{names.ArtifactPathAnnotation, "/workspace/artifacts/", "clean"},
		{names.ArtifactPathAnnotation, "/", "root"},
		{names.ArtifactPathAnnotation, "/" + strings.Repeat("a", 1024), "1024"},
		{names.ArtifactPathAnnotation, "/workspace/a:b", "':'"},
		{names.ArtifactPathAnnotation, "/workspace/a,b", "','"},
		{names.ArtifactPathAnnotation, "/workspace/a\x00b", "NUL"},
		{names.ArtifactPathAnnotation, "/var/run/tether", "/var/run/tether"},
		{names.ArtifactPathAnnotation, "/var/run/tether/artifacts", "/var/run/tether"},
		{names.IncludeAnnotation, "", "empty glob"},
		{names.IncludeAnnotation, "checkpoints/**,,*.safetensors", "empty glob"},
		{names.IncludeAnnotation, "checkpoints/**, ", "empty glob"},
		{names.IncludeAnnotation, "[abc", `glob "[abc" is malformed`},
		// Unbalanced braces: an unclosed '{' keeps the rest of the list in
		// one glob, a stray '}' stays in its own.
		{names.IncludeAnnotation, "final/{model,tokenizer", `glob "final/{model,tokenizer" is malformed`},
		{names.IncludeAnnotation, "checkpoints/**,final/{model,tokenizer", `glob "final/{model,tokenizer" is malformed`},
		{names.IncludeAnnotation, "final/model},tokenizer", `glob "final/model}" is malformed`},
		{names.IncludeAnnotation, "{a,b},[abc", `glob "[abc" is malformed`},
		{names.IncludeAnnotation, "{a,b},,c", "empty glob"},
		{names.IncludeAnnotation, "{a,b},/abs", `glob "/abs" must be relative`},
		{names.IncludeAnnotation, "/abs/**", `glob "/abs/**" must be relative`},
		{names.ExcludeAnnotation, "/tmp/*", "relative"},
		{names.ExcludeAnnotation, "**/*.tmp,[", "malformed"},
		{names.HeartbeatIntervalAnnotation, "soon", "not a duration"},
		{names.HeartbeatIntervalAnnotation, "10", "not a duration"},
		{names.HeartbeatIntervalAnnotation, "", "not a duration"},
		{names.HeartbeatIntervalAnnotation, "0.5s", "between 1s and 5m"},
		{names.HeartbeatIntervalAnnotation, "0s", "between"},
		{names.HeartbeatIntervalAnnotation, "-10s", "between"},
		{names.HeartbeatIntervalAnnotation, "5m1s", "between"},
		{names.TrainerContainerAnnotation, "Node_1", "DNS label"},
		{names.TrainerContainerAnnotation, "", "DNS label"},
		{names.TrainerContainerAnnotation, "-node", "DNS label"},
		{names.TrainerContainerAnnotation, strings.Repeat("a", 64), "DNS label"},
		{names.SidecarImageAnnotation, "not a ref!!", "not an image reference"},
		{names.SidecarImageAnnotation, "", "not an image reference"},
		{names.SidecarImageAnnotation, "GHCR.io/Tether/Sidecar:v1", "not an image reference"},
		{names.SidecarImageAnnotation, "ghcr.io/tether-dev/tether-sidecar:", "not an image reference"},
		{names.JobIDAnnotation, "Bad_ID", "lowercase"},
		{names.JobIDAnnotation, "", "lowercase"},
		{names.JobIDAnnotation, "-llama", "starting and ending"},
		{names.JobIDAnnotation, "llama.", "starting and ending"},
		{names.JobIDAnnotation, "llama/0042", "lowercase"},
		{names.JobIDAnnotation, strings.Repeat("a", 64), "1-63"},
		{names.WorkerIDAnnotation, "Worker 1", "lowercase"},
		{names.RequireAnnotation, "", "empty glob"},
		{names.RequireAnnotation, "model/*.safetensors,,config.json", "empty glob"},
		{names.RequireAnnotation, "config.json,", "empty glob"},
		{names.RequireAnnotation, "model/[abc", `glob "model/[abc" is malformed`},
		{names.RequireAnnotation, "model/{a,b", `glob "model/{a,b" is malformed`},
		{names.RequireAnnotation, "/workspace/artifacts/config.json", "must be relative"},
		{names.RequireAnnotation, "../other-job/config.json", "must not contain '..'"},
		{names.RequireAnnotation, "model/../config.json", "must not contain '..'"},
		{names.RequireAnnotation, "./config.json", "clean path"},
		{names.RequireAnnotation, "model//config.json", "clean path"},
		{names.RequireAnnotation, "model/", "clean path"},
		{names.RequireAnnotation, strings.Repeat("a", MaxRequireGlobBytes+1), "at most 256 are allowed"},
		{names.RequireAnnotation, strings.TrimSuffix(strings.Repeat("f,", MaxRequireGlobs+1), ","), "33 globs; at most 32 are allowed"},
		{names.RequireAnnotation, strings.Repeat("a", MaxRequireGlobs*(MaxRequireGlobBytes+1)+1), "at most 32 globs of at most 256 bytes"},
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
		names.ArtifactPathAnnotation:      "artifacts",
		names.IncludeAnnotation:           "[abc",
		names.ExcludeAnnotation:           "/tmp/*",
		names.HeartbeatIntervalAnnotation: "10m",
		names.TrainerContainerAnnotation:  "Node_1",
		names.SidecarImageAnnotation:      "not a ref!!",
		names.JobIDAnnotation:             "Bad_ID",
		names.WorkerIDAnnotation:          "Bad_ID",
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
	want := []string{names.ArtifactPathAnnotation, names.IncludeAnnotation, names.ExcludeAnnotation, names.HeartbeatIntervalAnnotation,
		names.TrainerContainerAnnotation, names.SidecarImageAnnotation, names.JobIDAnnotation, names.WorkerIDAnnotation}
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
		names.HeartbeatIntervalAnnotation: "soon",
		names.TrainerContainerAnnotation:  "trainer",
		names.IncludeAnnotation:           "/abs",
	})
	if err == nil {
		t.Fatal("Parse accepted invalid annotations")
	}
	for _, key := range []string{names.HeartbeatIntervalAnnotation, names.IncludeAnnotation} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("error does not report %s: %v", key, err)
		}
	}
	if strings.Contains(err.Error(), names.TrainerContainerAnnotation) {
		t.Errorf("error reports the valid %s: %v", names.TrainerContainerAnnotation, err)
	}
}

func TestHeartbeatRangeMessage(t *testing.T) {
	_, err := Parse(map[string]string{names.HeartbeatIntervalAnnotation: "10m"})
	const want = `annotation tether.dev/heartbeat-interval="10m" is invalid: must be between 1s and 5m (example: tether.dev/heartbeat-interval: "10s")`
	if err == nil || err.Error() != want {
		t.Errorf("Parse error\n%v\nwant\n%s", err, want)
	}
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Second:                     "1s",
		1500 * time.Millisecond:         "1.5s",
		5 * time.Minute:                 "5m",
		90 * time.Second:                "1m30s",
		time.Hour:                       "1h",
		time.Hour + 30*time.Minute:      "1h30m",
		time.Hour + time.Second:         "1h0m1s",
		10*time.Minute + 10*time.Second: "10m10s",
	} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestSplitGlobs(t *testing.T) {
	for _, tt := range []struct {
		list string
		want []string
	}{
		{"", []string{""}},
		{"a", []string{"a"}},
		{" a , b ", []string{"a", "b"}},
		{"a,,b", []string{"a", "", "b"}},
		{"a,", []string{"a", ""}},
		{"{a,b}", []string{"{a,b}"}},
		{"x/{a,b}/*.{c,d},e", []string{"x/{a,b}/*.{c,d}", "e"}},
		{"{a,{b,c}},d", []string{"{a,{b,c}}", "d"}},
		{"{a, b},c", []string{"{a, b}", "c"}}, // spaces inside an alternation are the pattern's
		{`a\,b,c`, []string{`a\,b`, "c"}},     // an escaped comma is a literal comma
		{`a\{,b`, []string{`a\{`, "b"}},       // so is an escaped brace
		{"[,;],b", []string{"[,;]", "b"}},     // a class may hold a comma
		{"[!,]x,b", []string{"[!,]x", "b"}},
		{"[{]x,b", []string{"[{]x", "b"}}, // a brace in a class opens nothing
		{`[\]],b`, []string{`[\]]`, "b"}},
		// Unbalanced: not split where unbalanced; ValidatePattern rejects the glob.
		{"a,{b,c", []string{"a", "{b,c"}},
		{"a},b", []string{"a}", "b"}},
		{"[a,b", []string{"[a,b"}},
		{`a\`, []string{`a\`}},
	} {
		if got := SplitGlobs(tt.list); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("SplitGlobs(%q) = %q, want %q", tt.list, got, tt.want)
		}
	}
}

// TestSplitGlobsRoundTrip: the sidecar gets the validated globs joined with
// ","; SplitGlobs gives them back.
func TestSplitGlobsRoundTrip(t *testing.T) {
	s, err := Parse(map[string]string{names.IncludeAnnotation: "checkpoints/**, final/{model,tokenizer}.json, [,;]x, *.{a,{b,c}}"})
	if err != nil {
		t.Fatal(err)
	}
	if got := SplitGlobs(strings.Join(s.Include, ",")); !reflect.DeepEqual(got, s.Include) {
		t.Errorf("SplitGlobs(join(%q)) = %q", s.Include, got)
	}
}

func TestValidateUpdate(t *testing.T) {
	const (
		badPath      = "/var/run/tether/out"
		badHeartbeat = "soon"
	)
	stored := map[string]string{
		names.ArtifactPathAnnotation:      badPath,
		names.HeartbeatIntervalAnnotation: badHeartbeat,
		names.JobIDAnnotation:             "llama-finetune-0042",
	}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range stored {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "<deleted>" {
				delete(m, kv[i])
			} else {
				m[kv[i]] = kv[i+1]
			}
		}
		return m
	}
	for _, tt := range []struct {
		name        string
		annotations map[string]string
		old         map[string]string
		want        []string // the keys reported, in Parse's order
	}{
		{"unchanged invalid values", with(), stored, nil},
		{"other annotation added", with("example.com/owner", "ml-team"), stored, nil},
		{"invalid value removed", with(names.HeartbeatIntervalAnnotation, "<deleted>"), stored, nil},
		{"invalid value fixed", with(names.HeartbeatIntervalAnnotation, "30s"), stored, nil},
		{"invalid value changed to another", with(names.HeartbeatIntervalAnnotation, "10m"), stored, []string{names.HeartbeatIntervalAnnotation}},
		{"invalid annotation added", with(names.TrainerContainerAnnotation, "Node_1"), stored, []string{names.TrainerContainerAnnotation}},
		{"invalid id added", with(names.WorkerIDAnnotation, "Bad_ID"), stored, []string{names.WorkerIDAnnotation}},
		{"several changed", with(names.ArtifactPathAnnotation, "out", names.TrainerContainerAnnotation, "Node_1"), stored,
			[]string{names.ArtifactPathAnnotation, names.TrainerContainerAnnotation}},
		{"no old object", stored, nil, []string{names.ArtifactPathAnnotation, names.HeartbeatIntervalAnnotation}},
		{"value was valid before", map[string]string{names.HeartbeatIntervalAnnotation: badHeartbeat},
			map[string]string{names.HeartbeatIntervalAnnotation: "10s"}, []string{names.HeartbeatIntervalAnnotation}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateUpdate(tt.annotations, tt.old)
			var keys []string
			if err != nil {
				for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
					keys = append(keys, e.(*InvalidAnnotationError).Key)
				}
			}
			if !reflect.DeepEqual(keys, tt.want) {
				t.Errorf("ValidateUpdate reported %v, want %v (error: %v)", keys, tt.want, err)
			}
		})
	}
}

func TestValidateID(t *testing.T) {
	for _, id := range []string{"llama-finetune-0042", "00000000-0000-4000-8000-000000000001", "a", "a.b_c-d"} {
		if err := ValidateID(names.JobIDAnnotation, id); err != nil {
			t.Errorf("ValidateID(%q): %v", id, err)
		}
	}
	for _, id := range []string{"", "Bad_ID", "_a", "a_", "a b", "a/b", strings.Repeat("a", 64)} {
		err := ValidateID(names.WorkerIDAnnotation, id)
		var iae *InvalidAnnotationError
		if !errors.As(err, &iae) || iae.Key != names.WorkerIDAnnotation || iae.Value != id {
			t.Errorf("ValidateID(%q) = %v, want an InvalidAnnotationError for %s", id, err, names.WorkerIDAnnotation)
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
		{map[string]string{names.BindLabel: "true"}, true},
		{map[string]string{names.BindLabel: "false"}, false},
		{map[string]string{names.BindLabel: "True"}, false},
		{map[string]string{names.BindLabel: ""}, false},
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
