package jobconfig

// Label and annotation keys. Everything Tether reads or writes on user objects
// lives under the tether.dev/ prefix.
const (
	// BindLabel is the one label a platform team adds to a TrainJob.
	BindLabel = "tether.dev/bind"
	// BindValue is the only value of BindLabel that binds.
	BindValue = "true"

	// JobIDAnnotation is the job's identity: kept when the user sets it, else generated.
	JobIDAnnotation = "tether.dev/job-id"
	// WorkerIDAnnotation is the bound worker's identity, generated once.
	WorkerIDAnnotation = "tether.dev/worker-id"

	// ArtifactPathAnnotation is the artifact directory in the trainer container.
	ArtifactPathAnnotation = "tether.dev/artifact-path"
	// IncludeAnnotation and ExcludeAnnotation are comma-separated globs,
	// relative to the artifact directory.
	IncludeAnnotation = "tether.dev/include"
	ExcludeAnnotation = "tether.dev/exclude"
	// HeartbeatIntervalAnnotation is how often the sidecar heartbeats.
	HeartbeatIntervalAnnotation = "tether.dev/heartbeat-interval"
	// TrainerContainerAnnotation names the trainer container in the pod.
	TrainerContainerAnnotation = "tether.dev/trainer-container"
	// NodesAnnotation says which nodes of a multi-node job are bound:
	// NodesAll (the default) or NodesPrimary.
	NodesAnnotation = "tether.dev/nodes"
	// SidecarImageAnnotation overrides the control plane's sidecar image for one job.
	SidecarImageAnnotation = "tether.dev/sidecar-image"
	// SidecarRequestsAnnotation and SidecarLimitsAnnotation override the
	// sidecar's requests and limits for one job, resource by resource
	// ("cpu=100m,memory=128Mi"); unnamed resources keep the control plane's.
	SidecarRequestsAnnotation = "tether.dev/sidecar-requests"
	SidecarLimitsAnnotation   = "tether.dev/sidecar-limits"

	// TrainerStatusAnnotation says whether Tether writes the worker's
	// progress into TrainJob.status.trainerStatus: auto (the default: when
	// the trainer does not report it natively) or off.
	TrainerStatusAnnotation = "tether.dev/trainer-status"
	// PodStatusAnnotation records what the pod webhook injected; its presence
	// makes re-invocation a no-op.
	PodStatusAnnotation = "tether.dev/status"
)

// Values of TrainerStatusAnnotation.
const (
	TrainerStatusAuto = "auto"
	TrainerStatusOff  = "off"
)

// Values of NodesAnnotation.
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
	return labels[BindLabel] == BindValue
}
