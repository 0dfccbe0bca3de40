package lifecycle

import (
	"slices"
	"testing"
	"time"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/jobconfig"
)

func TestSettingsRecordedOrDefaults(t *testing.T) {
	var spec tetherv1.WorkerBindingSpec
	if SettingsRecorded(&spec) {
		t.Fatal("an empty spec counts as recorded")
	}
	if s := Settings(&spec); s.HeartbeatInterval.Duration != jobconfig.DefaultHeartbeatInterval || s.TrainerContainer != jobconfig.DefaultTrainerContainer || s.Nodes != jobconfig.NodesAll {
		t.Errorf("defaults: %+v", s)
	}
	spec.Settings = RecordSettings(jobconfig.Settings{HeartbeatInterval: 3 * time.Second, TrainerContainer: "trainer"})
	if !SettingsRecorded(&spec) {
		t.Fatal("recorded settings not seen")
	}
	// Recorded without Nodes: the default, as for every other field.
	if s := Settings(&spec); s.HeartbeatInterval.Duration != 3*time.Second || s.TrainerContainer != "trainer" || s.Nodes != jobconfig.NodesAll {
		t.Errorf("recorded: %+v", s)
	}
	if s := Settings(&spec); s.Require != nil {
		t.Errorf("a job requiring nothing recorded %q", s.Require)
	}
	parsed, err := jobconfig.Parse(map[string]string{"tether.dev/require": "model/*.safetensors, config.json"})
	if err != nil {
		t.Fatal(err)
	}
	spec.Settings = RecordSettings(parsed)
	parsed.Require[0] = "changed"
	if s := Settings(&spec); !slices.Equal(s.Require, []string{"model/*.safetensors", "config.json"}) {
		t.Errorf("required outputs recorded as %q", s.Require)
	}
}
