package names

// Labels and annotations on TrainJobs. Everything Tether reads or writes on
// user objects lives under the tether.dev/ prefix.
const (
	// BindLabel is the one label a platform team adds to a TrainJob. The
	// webhooks also put it on a bound job's JobSet and trainer pod
	// template, so all three select on one key.
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
	// NodesAnnotation says which nodes of a multi-node job are bound.
	NodesAnnotation = "tether.dev/nodes"
	// SidecarImageAnnotation overrides the control plane's sidecar image for one job.
	SidecarImageAnnotation = "tether.dev/sidecar-image"
	// SidecarRequestsAnnotation and SidecarLimitsAnnotation override the
	// sidecar's requests and limits for one job, resource by resource
	// ("cpu=100m,memory=128Mi"); unnamed resources keep the control plane's.
	SidecarRequestsAnnotation = "tether.dev/sidecar-requests"
	SidecarLimitsAnnotation   = "tether.dev/sidecar-limits"
	// TrainerStatusAnnotation says whether Tether writes the worker's
	// progress into TrainJob.status.trainerStatus.
	TrainerStatusAnnotation = "tether.dev/trainer-status"
	// StallAfterAnnotation is how long the trainer's step may stand still
	// before the binding says TrainerStalled.
	StallAfterAnnotation = "tether.dev/stall-after"
	// RequireAnnotation is comma-separated globs, relative to the job's
	// artifact prefix, each of which must match a verified file of the job's
	// final manifests for its binding to succeed.
	RequireAnnotation = "tether.dev/require"

	// RuntimePatchManager names Tether's spec.runtimePatches entry on a
	// TrainJob (Trainer v2.2+ requires a domain-prefixed manager and keys
	// the list by it).
	RuntimePatchManager = "tether.dev/bind"
)

// Annotations on pods and WorkerBindings.
const (
	// PodStatusAnnotation records what the pod webhook injected; its
	// presence makes re-invocation a no-op.
	PodStatusAnnotation = "tether.dev/status"
	// CommandAnnotation on a WorkerBinding asks the binding server to push
	// a command to the job's workers: "<name>:<id>", e.g. "flush:42". A new
	// id pushes the command again; the outcome is status.lastCommand.
	CommandAnnotation = "tether.dev/command"
)

// The token Secret: the controller writes it for every bound TrainJob, the
// pod webhook mounts it into the sidecar, and the sidecar reads its files.
const (
	// TokenSecretType marks token Secrets, so they are recognisable in a listing.
	TokenSecretType = "tether.dev/binding-token"
	// TokenKey holds the job's token; it is also the file name in the mount.
	TokenKey = "token"
	// CABundleKey holds the PEM CA bundle that verifies the binding server.
	CABundleKey = "ca.crt"
	// PodTokenAudience is the audience of the pod's projected
	// ServiceAccount token (HeaderPodToken): the API server accepts it for
	// nothing else, and the binding server accepts no token of another
	// audience (a pod's kube-api-access token in particular).
	PodTokenAudience = "tether.dev/binding"
)

// Leases of the control plane's own.
const (
	// ReplicaLeaseLabel marks the binding server replicas' Leases (value
	// "true"), so the controller's cache holds only them.
	ReplicaLeaseLabel = "tether.dev/binding-replica"

	// ClaimLabel marks a Lease that claims a chosen job id (value "true").
	ClaimLabel = "tether.dev/job-id-claim"
	// ClaimJobIDLabel holds the claimed id (a job id is a valid label
	// value): kubectl get leases -n tether-system -l tether.dev/job-id=<id>.
	ClaimJobIDLabel = "tether.dev/job-id"
	// ClaimNamespaceAnnotation, ClaimNameAnnotation and ClaimUIDAnnotation
	// name the TrainJob that holds a claim.
	ClaimNamespaceAnnotation = "tether.dev/claim-namespace"
	ClaimNameAnnotation      = "tether.dev/claim-trainjob"
	ClaimUIDAnnotation       = "tether.dev/claim-uid"
	// ClaimNamespaceUIDAnnotation holds the UID of the holder's namespace:
	// the id is that namespace's, and a later namespace of the same name
	// is another tenant. Claims of earlier releases lack it; they are
	// judged by when the namespace was created.
	ClaimNamespaceUIDAnnotation = "tether.dev/claim-namespace-uid"
)

// Headers of the binding protocol (docs/protocol.md).
const (
	// HeaderProtocolVersion carries the protocol version a peer speaks.
	HeaderProtocolVersion = "Tether-Protocol-Version"
	// Session requests also claim the worker's identity; the server checks
	// it against the binding and the registered pod.
	HeaderJobID        = "Tether-Job-ID"
	HeaderWorkerID     = "Tether-Worker-ID"
	HeaderPodNamespace = "Tether-Pod-Namespace"
	HeaderPodName      = "Tether-Pod-Name"
	HeaderPodUID       = "Tether-Pod-UID"
	// HeaderPodToken carries the pod's projected ServiceAccount token
	// (audience PodTokenAudience) beside the job's token, on registration,
	// session and artifact requests: every rank of a job holds the same job
	// token, so only this token proves which pod is asking.
	HeaderPodToken = "Tether-Pod-Token"
)

// Headers of the artifact endpoint (docs/artifacts.md).
const (
	// HeaderArtifactToken carries the job's token on every artifact request.
	HeaderArtifactToken = "X-Tether-Token"
	// HeaderArtifactPodUID carries the sidecar's pod UID on every artifact
	// request: in a multi-node job a write is allowed only to the keys of
	// the rank whose current (registered) pod it names.
	HeaderArtifactPodUID = "X-Tether-Pod-UID"
	// HeaderPending is "true" on a HEAD answered with the key's pending
	// object (the latest upload, not yet promoted).
	HeaderPending = "X-Tether-Pending"
	// HeaderManifestVerified is "true" or "false" on a manifest PUT's response.
	HeaderManifestVerified = "X-Tether-Manifest-Verified"
	// HeaderManifestMissing is the first missing entry's path (URL path
	// escaped) on a manifest PUT's response.
	HeaderManifestMissing = "X-Tether-Manifest-Missing"
	// HeaderMultipart ("1") on a PUT says the client verifies an object
	// stored in parts by its CRC-64/NVME (its ETag is not the MD5): only then
	// does the endpoint store a body under 5 GiB in parts. A sidecar from
	// before objects were stored in parts sends none, and gets single PUTs.
	HeaderMultipart = "X-Tether-Multipart"
	// HeaderResumeOffset on a PUT says its body is the object's bytes from
	// this offset on: the stored parts of the key's open upload hold the
	// bytes before it (the resume exchange, upload.PathResume).
	HeaderResumeOffset = "X-Tether-Resume-Offset"
	// HeaderResumeCRC64NVME on a resumed PUT is the CRC-64/NVME (S3's form)
	// of the bytes before HeaderResumeOffset, as the resume exchange gave it
	// and the sidecar found it in its file.
	HeaderResumeCRC64NVME = "X-Tether-Resume-Crc64nvme"
)

// Headers of the orchestrators' read endpoint (docs/orchestrator.md).
const (
	// HeaderPresignExpires is when a presigned URL (in Location) expires, RFC 3339.
	HeaderPresignExpires = "X-Tether-Presign-Expires"
	// HeaderStream asks for the object through the control plane even when
	// the store could presign ("true").
	HeaderStream = "X-Tether-Stream"
)

// The environment the pod webhook sets on the sidecar and cmd/sidecar
// reads: the whole configuration of a sidecar.
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
	// PodTokenAudience); the kubelet rotates it, so it is read for every
	// request.
	EnvPodTokenFile = "TETHER_POD_TOKEN_FILE"
)

// EnvSidecarImage sets the control plane's sidecar image when
// --sidecar-image is not given. The manifests name the image there (not in
// an argument), so that an overlay's `images:` entry for the sidecar
// rewrites it as it rewrites the control plane's container image.
const EnvSidecarImage = "TETHER_SIDECAR_IMAGE"
