package jobconfig

import "github.com/tether-dev/tether/api/names"

// Values of names.TrainerStatusAnnotation.
const (
	TrainerStatusAuto = "auto"
	TrainerStatusOff  = "off"
)

// Values of names.NodesAnnotation.
const (
	// NodesAll binds every node: each gets a sidecar and its own artifact
	// prefix, and the job completes once every node's manifest is verified.
	NodesAll = "all"
	// NodesPrimary binds node rank 0 only, for jobs that write every
	// artifact on rank 0 (Tether's behaviour before multi-node binding).
	NodesPrimary = "primary"
)

// IsBound reports whether labels carry the bind label with its binding value.
func IsBound(labels map[string]string) bool {
	return labels[names.BindLabel] == names.BindValue
}
