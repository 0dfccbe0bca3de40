package lifecycle

import (
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
	if s := Settings(&spec); s.HeartbeatInterval.Duration != jobconfig.DefaultHeartbeatInterval || s.TrainerContainer != jobconfig.DefaultTrainerContainer {
		t.Errorf("defaults: %+v", s)
	}
	spec.Settings = RecordSettings(jobconfig.Settings{HeartbeatInterval: 3 * time.Second, TrainerContainer: "trainer"})
	if !SettingsRecorded(&spec) {
		t.Fatal("recorded settings not seen")
	}
	if s := Settings(&spec); s.HeartbeatInterval.Duration != 3*time.Second || s.TrainerContainer != "trainer" {
		t.Errorf("recorded: %+v", s)
	}
}
