package lifecycle

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/jobconfig"
)

// RecordSettings is what a WorkerBinding records of a job's parsed settings.
func RecordSettings(s jobconfig.Settings) tetherv1.WorkerBindingSettings {
	out := tetherv1.WorkerBindingSettings{HeartbeatInterval: metav1.Duration{Duration: s.HeartbeatInterval}, TrainerContainer: s.TrainerContainer,
		Nodes: s.Nodes, Require: slices.Clone(s.Require)}
	if s.StallAfter > 0 {
		out.StallAfter = &metav1.Duration{Duration: s.StallAfter}
	}
	return out
}

// SettingsRecorded reports whether the binding carries its settings.
func SettingsRecorded(spec *tetherv1.WorkerBindingSpec) bool {
	return spec.Settings.HeartbeatInterval.Duration > 0 && spec.Settings.TrainerContainer != ""
}

// Settings are the binding's recorded settings, with jobconfig's defaults for
// what is not recorded (a binding of a TrainJob whose settings have not been
// valid yet: its pods are denied meanwhile).
func Settings(spec *tetherv1.WorkerBindingSpec) tetherv1.WorkerBindingSettings {
	s := spec.Settings
	if s.HeartbeatInterval.Duration <= 0 {
		s.HeartbeatInterval.Duration = jobconfig.DefaultHeartbeatInterval
	}
	if s.TrainerContainer == "" {
		s.TrainerContainer = jobconfig.DefaultTrainerContainer
	}
	if s.Nodes == "" {
		s.Nodes = jobconfig.NodesAll
	}
	return s
}
