package binding

// Environment variables the pod webhook sets on the sidecar and cmd/sidecar
// reads. They are the whole configuration of a sidecar.
const (
	EnvJobID             = "TETHER_JOB_ID"
	EnvWorkerID          = "TETHER_WORKER_ID"
	EnvTrainJob          = "TETHER_TRAINJOB"
	EnvServerURL         = "TETHER_SERVER_URL"
	EnvTokenFile         = "TETHER_TOKEN_FILE"
	EnvCAFile            = "TETHER_CA_FILE"
	EnvArtifactDir       = "TETHER_ARTIFACT_DIR"
	EnvHeartbeatInterval = "TETHER_HEARTBEAT_INTERVAL"
	EnvInclude           = "TETHER_INCLUDE"
	EnvExclude           = "TETHER_EXCLUDE"
	EnvPodName           = "TETHER_POD_NAME"
	EnvPodNamespace      = "TETHER_POD_NAMESPACE"
	EnvPodUID            = "TETHER_POD_UID"
	EnvNodeName          = "TETHER_NODE_NAME"
	// EnvNodeRank is the pod's node rank in the job (its Job completion
	// index): node rank > 0 keeps its artifacts under <job-id>/nodes/<rank>/.
	EnvNodeRank = "TETHER_NODE_RANK"
	// EnvFlushBudget bounds the sidecar's final flush on SIGTERM; the pod
	// webhook derives it from the pod's termination grace period.
	EnvFlushBudget = "TETHER_FLUSH_BUDGET"
	// EnvPodTokenFile is the pod's projected ServiceAccount token (audience
	// PodTokenAudience), which proves which pod the sidecar runs in
	// (HeaderPodToken); the kubelet rotates it, so it is read for every
	// request.
	EnvPodTokenFile = "TETHER_POD_TOKEN_FILE"
)

// ProgressFile is the optional file, relative to the artifact directory, where
// a trainer can append one JSON object per line ({"step":100,"epoch":1.5,
// "loss":0.23}); the sidecar reports the last complete line in heartbeats.
const ProgressFile = "tether-progress.jsonl"
