package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// WorkerBindingPhase is where a bound job is in its life as a job-bound worker.
// +kubebuilder:validation:Enum=Pending;Registered;Running;Finishing;Succeeded;Failed
type WorkerBindingPhase string

const (
	// PhasePending: the token is issued; no sidecar has registered yet.
	PhasePending WorkerBindingPhase = "Pending"
	// PhaseRegistered: the sidecar presented its token and registered.
	PhaseRegistered WorkerBindingPhase = "Registered"
	// PhaseRunning: heartbeats are arriving.
	PhaseRunning WorkerBindingPhase = "Running"
	// PhaseFinishing: the trainer stopped; artifacts are being flushed and verified.
	PhaseFinishing WorkerBindingPhase = "Finishing"
	// PhaseSucceeded: the trainer exited 0 and every artifact was verified.
	PhaseSucceeded WorkerBindingPhase = "Succeeded"
	// PhaseFailed: see Reason.
	PhaseFailed WorkerBindingPhase = "Failed"
)

// Condition types on a WorkerBinding.
const (
	// ConditionTokenIssued is True once the token Secret exists and its hash is recorded.
	ConditionTokenIssued = "TokenIssued"
	// ConditionHeartbeatLost is True while the worker has missed its heartbeats.
	ConditionHeartbeatLost = "HeartbeatLost"
	// ConditionPodsInjected is False when trainer pods of the job run without the sidecar
	// (they existed before the job was bound); it names them.
	ConditionPodsInjected = "PodsInjected"

	// The outcome conditions, derived from the phase by every status writer
	// (lifecycle.SetOutcomeConditions) so that kubectl wait, kstatus and
	// other generic tools can tell where a binding is. Each carries the
	// phase's reason and message, whatever its status; docs/orchestrator.md
	// lists when each is True.

	// ConditionReady is True while the job's sidecars are registered and
	// heartbeating (Running, reason Heartbeating), and once Succeeded (a
	// final binding with Ready False reads as in progress to kstatus).
	ConditionReady = "Ready"
	// ConditionSucceeded is True once the binding is Succeeded, False before
	// and when it failed.
	ConditionSucceeded = "Succeeded"
	// ConditionFailed is True once the binding is Failed, False otherwise.
	ConditionFailed = "Failed"
	// ConditionProgressing is True while the binding is live and moving:
	// False once final, and while Kueue holds the job, its pods cannot be
	// created, its worker is silent or its trainer stalled.
	ConditionProgressing = "Progressing"
	// ConditionReconciling is True until the binding is final (kstatus:
	// InProgress).
	ConditionReconciling = "Reconciling"
	// ConditionStalled is True once the binding is Failed (kstatus: Failed).
	ConditionStalled = "Stalled"
)

// OutcomeConditionTypes are the types of the outcome conditions. They are
// fixed once the binding is final.
func OutcomeConditionTypes() []string {
	return []string{ConditionReady, ConditionSucceeded, ConditionFailed, ConditionProgressing, ConditionReconciling, ConditionStalled}
}

// Reasons used in conditions, phases and Events.
const (
	ReasonTokenIssued      = "TokenIssued"
	ReasonTokenSecretError = "TokenSecretError"
	ReasonJobIDConflict    = "JobIDConflict"
	// ReasonIdentityMismatch: the binding's ids are not its TrainJob's.
	ReasonIdentityMismatch = "IdentityMismatch"
	ReasonPodsNotInjected  = "PodsNotInjected"
	ReasonPodsInjected     = "PodsInjected"
	ReasonNoPods           = "NoPods"

	ReasonRegistered          = "Registered"
	ReasonHeartbeating        = "Heartbeating"
	ReasonHeartbeatLost       = "HeartbeatLost"
	ReasonHeartbeatResumed    = "HeartbeatResumed"
	ReasonSuspended           = "Suspended"
	ReasonAdmitted            = "Admitted"
	ReasonPreempted           = "Preempted"
	ReasonTerminating         = "Terminating"
	ReasonTrainerSucceeded    = "TrainerSucceeded"
	ReasonTrainerFailed       = "TrainerFailed"
	ReasonJobFailed           = "JobFailed"
	ReasonCancelled           = "Cancelled"
	ReasonArtifactsIncomplete = "ArtifactsIncomplete"
	ReasonAwaitingArtifacts   = "AwaitingArtifacts"
	// ReasonPromotingArtifacts: every artifact is verified and the latest
	// verified versions are being moved over their final keys; the binding
	// succeeds only once a reader of the final keys gets them.
	ReasonPromotingArtifacts = "PromotingArtifacts"
	ReasonTrainerExited      = "TrainerExited"
	ReasonAttemptStarted     = "AttemptStarted"
	ReasonNeverBound         = "NeverBound"
	ReasonPodCreateFailed    = "PodCreateFailed"
	// ReasonTrainerStalled: the trainer's step stopped advancing while the
	// job is live (condition Progressing only; lifecycle.ConditionSignals).
	ReasonTrainerStalled = "TrainerStalled"
	// ReasonStepsResumed: a stalled trainer's step advanced again.
	ReasonStepsResumed = "StepsResumed"
	// ReasonRequiredOutputsMissing: every manifest was verified, but a glob
	// of spec.settings.require matched no file of the final manifests.
	ReasonRequiredOutputsMissing = "RequiredOutputsMissing"
)

// ReasonCancelling: the orchestrator's cancel was answered (every node
// flushed, or the flush failed) and trainer pods remain until its stop
// (Kueue Workload deactivated, TrainJob suspended or deleted) ends them;
// Failed/Cancelled follows once none remains.
const ReasonCancelling = "Cancelling"

// What started an attempt (status.attemptStartedBy). Every one of them
// starts a new attempt, numbered by status.attempt.
const (
	// AttemptAdmission: the job's first pod after its first admission.
	AttemptAdmission = "Admission"
	// AttemptReadmission: Kueue admitted the job again after preempting it.
	AttemptReadmission = "Readmission"
	// AttemptJobSetRestart: JobSet recreated every pod (failurePolicy
	// RestartJobSet; label jobset.sigs.k8s.io/restart-attempt).
	AttemptJobSetRestart = "JobSetRestart"
	// AttemptPodReplaced: a node's pod was replaced by a new pod of the
	// same rank (restartPolicy Never, or the pod was deleted).
	AttemptPodReplaced = "PodReplaced"
	// AttemptTrainerRestarted: a node's trainer container was restarted in
	// place by the kubelet (restartPolicy OnFailure, JobSet's default).
	AttemptTrainerRestarted = "TrainerRestarted"
)

// WorkerBindingSpec is the fixed identity of a bound job. Its identity
// fields are immutable (the API server refuses a change, for every user);
// the rest (the token's hash, the previous token, the settings) is written by
// the control plane only: the ValidatingAdmissionPolicy
// tether-workerbinding-spec (manifests/base) refuses a spec change by anyone
// else. docs/platform.md, "The job id".
type WorkerBindingSpec struct {
	// TrainJobName is the TrainJob (in the same namespace) this binding belongs to.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.trainJobName is immutable: a binding belongs to one TrainJob for good"
	// +required
	TrainJobName string `json:"trainJobName"`

	// JobID is the job's identity towards the orchestrator and the prefix of its artifacts.
	// Claimed for good across the cluster by the TrainJob that first bound it
	// (a Lease in the control plane's namespace; docs/platform.md).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.jobID is immutable: it is the job's artifact prefix, claimed for its TrainJob; bind under another id with a new TrainJob"
	// +required
	JobID string `json:"jobID"`

	// WorkerID is the identity of the job's single bound worker.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.workerID is immutable"
	// +required
	WorkerID string `json:"workerID"`

	// TokenSecretName names the Secret holding the job's token and CA bundle.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.tokenSecretName is immutable"
	// +required
	TokenSecretName string `json:"tokenSecretName"`

	// TokenSHA256 is the lowercase hex SHA-256 of the token; the binding server
	// finds a binding by it. The token itself is never stored here.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	// +required
	TokenSHA256 string `json:"tokenSHA256"`

	// PreviousToken is the token the last reissue replaced, still accepted
	// until its ValidUntil: the kubelet updates a running pod's Secret
	// volume only on its next sync of the pod (about a minute by default),
	// and until then the sidecar holds the old token. Cleared once expired.
	// +optional
	PreviousToken *PreviousToken `json:"previousToken,omitempty"`

	// Settings are the job's settings that matter after admission, recorded
	// from the TrainJob's annotations when they are first valid (normally at
	// creation): the controller and the binding server read them here rather
	// than parsing the TrainJob again.
	// +optional
	Settings WorkerBindingSettings `json:"settings,omitempty"`
}

// PreviousToken is a replaced token's hash and how long it stays valid.
type PreviousToken struct {
	// SHA256 is the lowercase hex SHA-256 of the replaced token.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	// +required
	SHA256 string `json:"sha256"`
	// ValidUntil is when the binding server stops accepting it and closes
	// the sessions it opened.
	// +required
	ValidUntil metav1.Time `json:"validUntil"`
}

// WorkerBindingSettings are a bound job's recorded settings. Empty fields
// mean the defaults (nothing is recorded while the TrainJob's settings are
// invalid).
type WorkerBindingSettings struct {
	// HeartbeatInterval is how often the sidecar heartbeats (the interval
	// the pod webhook gave it).
	// +optional
	HeartbeatInterval metav1.Duration `json:"heartbeatInterval,omitempty"`

	// TrainerContainer names the container whose exit code is the trainer's.
	// +optional
	TrainerContainer string `json:"trainerContainer,omitempty"`

	// Nodes is which nodes of the job are bound: all (the default) or
	// primary (rank 0 only; annotation tether.dev/nodes).
	// +optional
	// +kubebuilder:validation:Enum=all;primary
	Nodes string `json:"nodes,omitempty"`

	// StallAfter is how long the trainer's step may stand still, while
	// its heartbeats go on, before the binding says TrainerStalled
	// (annotation tether.dev/stall-after). Unset: the larger of 15 minutes
	// and 10 times the median step interval seen.
	// +optional
	StallAfter *metav1.Duration `json:"stallAfter,omitempty"`
	// Require are the job's required outputs (annotation
	// tether.dev/require): doublestar globs on the paths of its final
	// verified manifests, relative to the job's prefix (nodes/<r>/... for
	// node r > 0). The binding succeeds only when each matches a verified
	// file; else it fails with reason RequiredOutputsMissing.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	// +listType=atomic
	Require []string `json:"require,omitempty"`
}

// WorkerBindingStatus is the observed state of a bound job.
type WorkerBindingStatus struct {
	// Conditions are the binding's current conditions.
	// +listType=map
	// +listMapKey=type
	// +optional
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type" protobuf:"bytes,1,rep,name=conditions"`

	// Phase is a summary of the binding's life. See the phase constants.
	// +optional
	Phase WorkerBindingPhase `json:"phase,omitempty"`

	// Reason is a CamelCase word saying why the binding is in its phase.
	// +optional
	Reason string `json:"reason,omitempty"`

	// Message is a human-readable explanation of Reason.
	// +optional
	Message string `json:"message,omitempty"`

	// ObservedGeneration is the generation this status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Attempt numbers the job's attempts: the first pod after admission
	// starts attempt 1, and each Kueue re-admission, JobSet restart,
	// replacement pod and in-place trainer restart starts the next one
	// (AttemptStartedBy says which). docs/platform.md shows each case.
	// +optional
	Attempt int32 `json:"attempt,omitempty"`

	// AttemptStartedBy is what started the current attempt: Admission,
	// Readmission, JobSetRestart, PodReplaced or TrainerRestarted.
	// +optional
	AttemptStartedBy string `json:"attemptStartedBy,omitempty"`

	// AttemptStartTime is when the current attempt started.
	// +optional
	AttemptStartTime *metav1.Time `json:"attemptStartTime,omitempty"`

	// AttemptNode is the rank whose pod or trainer started the current
	// attempt (PodReplaced, TrainerRestarted).
	// +optional
	AttemptNode *int32 `json:"attemptNode,omitempty"`

	// JobSetRestartAttempt is the JobSet restart attempt of the current
	// pods (their jobset.sigs.k8s.io/restart-attempt label).
	// +optional
	JobSetRestartAttempt int32 `json:"jobSetRestartAttempt,omitempty"`

	// NodeCount is how many nodes of the job are bound (read from its
	// JobSet; 1 with spec.settings.nodes=primary). 0 until known.
	// +optional
	NodeCount int32 `json:"nodeCount,omitempty"`

	// Nodes is each bound node's worker, by rank (at most 256 nodes,
	// binding.MaxBoundNodes).
	// +optional
	// +listType=map
	// +listMapKey=rank
	// +kubebuilder:validation:MaxItems=256
	Nodes []NodeStatus `json:"nodes,omitempty"`

	// Worker is node 0's pod in the current attempt (the node whose
	// progress the binding shows). Nodes has every node's.
	// +optional
	Worker *WorkerStatus `json:"worker,omitempty"`

	// LastHeartbeatTime is when the binding server last heard from any of
	// the job's nodes, as of the last status write (see
	// NodeStatus.LastHeartbeatTime and NodeStatus.SessionReplica).
	// +optional
	LastHeartbeatTime *metav1.Time `json:"lastHeartbeatTime,omitempty"`

	// LastSeq is the highest heartbeat sequence number acknowledged from node 0.
	// +optional
	LastSeq int64 `json:"lastSeq,omitempty"`

	// Progress is the last progress node 0 reported. It may go backwards
	// when a restarted trainer resumes from an earlier checkpoint.
	// +optional
	Progress *Progress `json:"progress,omitempty"`

	// TrainerExitCode is the exit code of the last trainer exit seen on
	// any node (LastTrainerExit has the details).
	// +optional
	TrainerExitCode *int32 `json:"trainerExitCode,omitempty"`

	// TrainerExits counts the trainer exits seen on every node over the
	// job's life (each is also an Event).
	// +optional
	TrainerExits int32 `json:"trainerExits,omitempty"`

	// LastTrainerExit is the last trainer exit seen on any node.
	// +optional
	LastTrainerExit *TrainerExit `json:"lastTrainerExit,omitempty"`

	// Artifacts is what the binding server verified of the job's artifacts.
	// +optional
	Artifacts *ArtifactsStatus `json:"artifacts,omitempty"`

	// LastCheckpoint is the newest checkpoint node 0's sidecar found in
	// the artifact directory with every file verified: what a preempted
	// or restarted job can resume from.
	// +optional
	LastCheckpoint *CheckpointStatus `json:"lastCheckpoint,omitempty"`

	// LastCommand is the last command pushed to the worker and its outcome.
	// +optional
	LastCommand *CommandStatus `json:"lastCommand,omitempty"`

	// DirectUploads is the controller's sweep of the job's pending direct
	// uploads and open multipart uploads once the binding has ended: a
	// presigned upload URL outlives its binding by up to its TTL, and an
	// upload never completed is billed until it is aborted
	// (docs/artifacts.md).
	// +optional
	DirectUploads *DirectUploadsStatus `json:"directUploads,omitempty"`
}

// DirectUploadsStatus records, on an ended binding, until when the
// controller removes what lands under the job's pending-upload prefix
// (.tether-uploads/<job-id>/) and aborts the job's open multipart uploads,
// so that the deadline survives a restart and a change of elected replica.
type DirectUploadsStatus struct {
	// ExpireTime is when every upload URL presigned for the job has expired
	// and a body sent through one before that has landed: when the
	// controller saw the binding end, plus --presign-ttl (none when the
	// store presigns nothing), plus --upload-sweep-margin. No URL is
	// presigned, and no multipart upload started, once the binding ended.
	// +required
	ExpireTime metav1.Time `json:"expireTime"`
	// SweptTime is when the controller's last sweep, begun after
	// ExpireTime, left the prefix empty and no multipart upload of the job
	// open; no sweep runs after it.
	// +optional
	SweptTime *metav1.Time `json:"sweptTime,omitempty"`
}

// WorkerStatus identifies the pod whose sidecar registered.
type WorkerStatus struct {
	// +required
	PodName string `json:"podName"`
	// +required
	PodUID string `json:"podUID"`
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// RegisteredTime is when the sidecar registered.
	// +required
	RegisteredTime metav1.Time `json:"registeredTime"`
}

// NodeStatus is one bound node's worker in the current attempt.
type NodeStatus struct {
	// Rank is the node's rank: the pod's Job completion index (Trainer's
	// runtimes run every node as one indexed Job), or its JobSet job index
	// when each Job runs one pod.
	// +required
	Rank int32 `json:"rank"`
	// +optional
	PodName string `json:"podName,omitempty"`
	// +optional
	PodUID string `json:"podUID,omitempty"`
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// RegisteredTime is when the node's sidecar registered in this attempt.
	// +optional
	RegisteredTime *metav1.Time `json:"registeredTime,omitempty"`
	// LastHeartbeatTime is when the binding server last heard from the
	// node's sidecar, as of the last status write: heartbeats are kept in
	// memory by the replica holding the session and written on transitions,
	// on reported changes (at most once per status interval) and otherwise
	// once per liveness write interval. Between writes SessionReplica's
	// Lease says whether the node is still live.
	// +optional
	LastHeartbeatTime *metav1.Time `json:"lastHeartbeatTime,omitempty"`
	// LastSeq is the node's highest acknowledged heartbeat sequence number,
	// as of the last status write.
	// +optional
	LastSeq int64 `json:"lastSeq,omitempty"`
	// SessionReplica is the control-plane replica that held the node's
	// session at the last status write: the name of its Lease
	// (coordination.k8s.io/v1) in the control plane's namespace. While that
	// Lease is renewed, the replica vouches for the node's heartbeats; once
	// it expires, the node is HeartbeatLost missedHeartbeats intervals after
	// the later of the Lease's last renewal and LastHeartbeatTime, unless
	// another replica takes the session. Empty when the replica held no
	// Lease (liveness then rests on LastHeartbeatTime alone).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	SessionReplica string `json:"sessionReplica,omitempty"`
	// HeartbeatLost is true while the node's sidecar misses its heartbeats.
	// +optional
	HeartbeatLost bool `json:"heartbeatLost,omitempty"`
	// Terminating is true once the node's sidecar reported SIGTERM.
	// +optional
	Terminating bool `json:"terminating,omitempty"`
	// UploadedBytes is what the node's sidecar reports having had verified.
	// +optional
	UploadedBytes int64 `json:"uploadedBytes,omitempty"`
	// Restarts is how often the kubelet restarted this pod's trainer container.
	// +optional
	Restarts int32 `json:"restarts,omitempty"`
	// LastExit is the node's last trainer exit.
	// +optional
	LastExit *TrainerExit `json:"lastExit,omitempty"`
	// Artifacts is the server's verdict on the node's manifest in this attempt.
	// +optional
	Artifacts *NodeArtifacts `json:"artifacts,omitempty"`
}

// NodeArtifacts is what one node's sidecar had verified in this attempt.
type NodeArtifacts struct {
	// Manifest is the object key of the node's manifest, once uploaded:
	// <job-id>/manifest.json for rank 0, <job-id>/nodes/<rank>/manifest.json
	// for the others.
	// +optional
	Manifest string `json:"manifest,omitempty"`
	// ManifestSHA256 is the SHA-256 (lowercase hex) of the manifest the
	// verdict is on: readers check the stored manifest against it, and
	// only what it lists is promoted.
	// +optional
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	// +kubebuilder:validation:MaxLength=64
	ManifestSHA256 string `json:"manifestSHA256,omitempty"`
	// Verified is true when every file the manifest lists is stored as listed.
	// +optional
	Verified bool `json:"verified,omitempty"`
	// Files and Bytes count the manifest's files.
	// +optional
	Files int32 `json:"files,omitempty"`
	// +optional
	Bytes int64 `json:"bytes,omitempty"`
	// Missing names up to 10 files, by key relative to the job's prefix,
	// that are not stored as the manifest lists them or that the node's
	// final flush could not verify; MissingCount counts them all.
	// Each is at most 256 bytes (lifecycle.MaxMissingPathBytes; a longer
	// key is cut, ending in "…").
	// +optional
	// +kubebuilder:validation:MaxItems=10
	// +kubebuilder:validation:items:MaxLength=256
	// +listType=atomic
	Missing []string `json:"missing,omitempty"`
	// +optional
	MissingCount int32 `json:"missingCount,omitempty"`
	// LastError is why the manifest or the first missing file failed (at
	// most 512 bytes, lifecycle.MaxNodeErrorBytes).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	LastError string `json:"lastError,omitempty"`
}

// TrainerExit is one exit of a node's trainer container.
type TrainerExit struct {
	// +required
	Rank int32 `json:"rank"`
	// +required
	PodName string `json:"podName"`
	// +required
	ExitCode int32 `json:"exitCode"`
	// Reason is the container runtime's (Error, OOMKilled, Completed, ...).
	// +optional
	Reason string `json:"reason,omitempty"`
	// +required
	FinishedAt metav1.Time `json:"finishedAt"`
	// Attempt is the attempt the exit ended.
	// +optional
	Attempt int32 `json:"attempt,omitempty"`
	// Restarted is true once the kubelet restarted the container after it.
	// +optional
	Restarted bool `json:"restarted,omitempty"`
}

// Progress is training progress as the trainer reported it. Numbers travel
// as strings where Kubernetes API conventions forbid floats.
type Progress struct {
	// +optional
	Step *int64 `json:"step,omitempty"`
	// Epoch, Loss and Fraction are decimal strings ("1.5").
	// +optional
	Epoch string `json:"epoch,omitempty"`
	// +optional
	Loss string `json:"loss,omitempty"`
	// +optional
	Fraction string `json:"fraction,omitempty"`
	// UpdatedTime is when the trainer last wrote progress.
	// +optional
	UpdatedTime *metav1.Time `json:"updatedTime,omitempty"`
	// LastStepTime is when Step last changed: the trainer's time of the
	// progress line that changed it, else when the binding server heard it.
	// +optional
	LastStepTime *metav1.Time `json:"lastStepTime,omitempty"`
	// StepInterval is the median time per step over the recent steps the
	// binding server heard of (the default stall window is 10 times it).
	// +optional
	StepInterval *metav1.Duration `json:"stepInterval,omitempty"`
}

// CheckpointStatus is a checkpoint whose every file is verified.
type CheckpointStatus struct {
	// Path is the checkpoint relative to the job's prefix (a directory
	// ends in "/"), as node 0's files are stored.
	// +required
	// +kubebuilder:validation:MaxLength=1024
	Path string `json:"path"`
	// Step is the training step its name carries.
	// +required
	Step int64 `json:"step"`
	// Time is when its last file was verified.
	// +required
	Time metav1.Time `json:"time"`
	// Files and Bytes count its files.
	// +optional
	Files int32 `json:"files,omitempty"`
	// +optional
	Bytes int64 `json:"bytes,omitempty"`
}

// ArtifactsStatus summarises a job's artifacts in bounded form.
type ArtifactsStatus struct {
	// Manifest is the object key of the job's manifest, once uploaded.
	// +optional
	Manifest string `json:"manifest,omitempty"`
	// ManifestVerified is true when every file the manifest lists is stored
	// with its size and MD5.
	// +optional
	ManifestVerified bool `json:"manifestVerified,omitempty"`
	// Files and Bytes count the manifest's files.
	// +optional
	Files int32 `json:"files,omitempty"`
	// +optional
	Bytes int64 `json:"bytes,omitempty"`
	// Missing names up to 10 files that are not verified: manifest files
	// not stored as listed, or files the worker's final flush could not
	// verify (with no manifest uploaded; LastError says why the first one
	// failed). Each is at most 256 bytes, as on the nodes.
	// +optional
	// +kubebuilder:validation:MaxItems=10
	// +kubebuilder:validation:items:MaxLength=256
	// +listType=atomic
	Missing []string `json:"missing,omitempty"`
	// MissingCount counts every such file (Missing names at most 10).
	// +optional
	MissingCount int32 `json:"missingCount,omitempty"`
	// UploadedBytes is what the worker reports having had verified so far.
	// +optional
	UploadedBytes int64 `json:"uploadedBytes,omitempty"`
	// LastError is the last upload failure the worker or the server
	// reported: the file, the error and what to do (at most 1024 bytes,
	// lifecycle.MaxErrorBytes).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	LastError string `json:"lastError,omitempty"`
	// Logs are the object keys of archived trainer logs.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	Logs []string `json:"logs,omitempty"`
	// Skipped names up to 5 entries of the artifact directory the worker
	// does not upload by policy, each "<path>: <reason>": symlinks (with
	// where they point), FIFOs, sockets, devices. Nothing is skipped
	// silently.
	// +optional
	// +kubebuilder:validation:MaxItems=5
	// +listType=atomic
	Skipped []string `json:"skipped,omitempty"`
	// SkippedCount counts every skipped entry (Skipped names at most 5).
	// +optional
	SkippedCount int32 `json:"skippedCount,omitempty"`
}

// CommandStatus is a command sent to the worker (through the
// tether.dev/command annotation) and what became of it.
type CommandStatus struct {
	// +required
	ID string `json:"id"`
	// +required
	Name string `json:"name"`
	// State is Sent, Acknowledged (by every node it was sent to) or
	// Failed (a node answered with an error, in Message).
	// +required
	State string `json:"state"`
	// SentNodes and AckedNodes are the ranks it was sent to and those that
	// acknowledged it.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	SentNodes []int32 `json:"sentNodes,omitempty"`
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	AckedNodes []int32 `json:"ackedNodes,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// +optional
	Time *metav1.Time `json:"time,omitempty"`
	// Attempt is the binding's attempt when the command was first sent: a
	// cancel ends only that attempt (a job resumed after it runs on).
	// +optional
	Attempt int32 `json:"attempt,omitempty"`
}

// WorkerBinding binds one Kubeflow TrainJob to Tether: the job's identity, its
// token's hash and its phase as a job-bound worker.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=wb;wbs,categories=tether
// +kubebuilder:printcolumn:name="TrainJob",type=string,JSONPath=`.spec.trainJobName`
// +kubebuilder:printcolumn:name="Job ID",type=string,JSONPath=`.spec.jobID`
// +kubebuilder:printcolumn:name="Worker",type=string,JSONPath=`.spec.workerID`,priority=1
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Attempt",type=integer,JSONPath=`.status.attempt`
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.status.nodeCount`,priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`
// +kubebuilder:printcolumn:name="Step",type=integer,JSONPath=`.status.progress.step`
// +kubebuilder:printcolumn:name="Artifacts",type=integer,JSONPath=`.status.artifacts.files`
// +kubebuilder:printcolumn:name="Last Heartbeat",type=date,JSONPath=`.status.lastHeartbeatTime`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type WorkerBinding struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec WorkerBindingSpec `json:"spec"`
	// +optional
	Status WorkerBindingStatus `json:"status,omitempty"`
}

// WorkerBindingList is a list of WorkerBindings.
//
// +kubebuilder:object:root=true
type WorkerBindingList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WorkerBinding `json:"items"`
}

func init() {
	SchemeBuilder.Register(&WorkerBinding{}, &WorkerBindingList{})
}
