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
)

// Reasons used in conditions, phases and Events.
const (
	ReasonTokenIssued      = "TokenIssued"
	ReasonTokenSecretError = "TokenSecretError"
	ReasonJobIDConflict    = "JobIDConflict"
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
)

// WorkerBindingSpec is the fixed identity of a bound job. It never changes
// after creation.
type WorkerBindingSpec struct {
	// TrainJobName is the TrainJob (in the same namespace) this binding belongs to.
	// +kubebuilder:validation:MinLength=1
	TrainJobName string `json:"trainJobName"`

	// JobID is the job's identity towards the orchestrator and the prefix of its artifacts.
	// Unique across the cluster among live bindings.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	JobID string `json:"jobID"`

	// WorkerID is the identity of the job's single bound worker.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	WorkerID string `json:"workerID"`

	// TokenSecretName names the Secret holding the job's token and CA bundle.
	TokenSecretName string `json:"tokenSecretName"`

	// TokenSHA256 is the lowercase hex SHA-256 of the token; the binding server
	// finds a binding by it. The token itself is never stored here.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
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
	SHA256 string `json:"sha256"`
	// ValidUntil is when the binding server stops accepting it and closes
	// the sessions it opened.
	ValidUntil metav1.Time `json:"validUntil"`
}

// WorkerBindingSettings are a bound job's recorded settings. Empty fields
// mean the defaults (a binding created by an older release).
type WorkerBindingSettings struct {
	// HeartbeatInterval is how often the sidecar heartbeats (the interval
	// the pod webhook gave it).
	// +optional
	HeartbeatInterval metav1.Duration `json:"heartbeatInterval,omitempty"`

	// TrainerContainer names the container whose exit code is the trainer's.
	// +optional
	TrainerContainer string `json:"trainerContainer,omitempty"`
}

// WorkerBindingStatus is the observed state of a bound job.
type WorkerBindingStatus struct {
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

	// Attempt counts the times the job was (re)admitted and its worker
	// registered: a preempted job's next pod starts a new attempt.
	// +optional
	Attempt int32 `json:"attempt,omitempty"`

	// Worker is the pod that registered for the current attempt.
	// +optional
	Worker *WorkerStatus `json:"worker,omitempty"`

	// LastHeartbeatTime is when the binding server last heard from the
	// worker. It is written at most once per status interval.
	// +optional
	LastHeartbeatTime *metav1.Time `json:"lastHeartbeatTime,omitempty"`

	// LastSeq is the highest heartbeat sequence number acknowledged.
	// +optional
	LastSeq int64 `json:"lastSeq,omitempty"`

	// Progress is the last progress the worker reported.
	// +optional
	Progress *Progress `json:"progress,omitempty"`

	// TrainerExitCode is the trainer container's exit code, from pod status.
	// +optional
	TrainerExitCode *int32 `json:"trainerExitCode,omitempty"`

	// Artifacts is what the binding server verified of the job's artifacts.
	// +optional
	Artifacts *ArtifactsStatus `json:"artifacts,omitempty"`

	// LastCommand is the last command pushed to the worker and its outcome.
	// +optional
	LastCommand *CommandStatus `json:"lastCommand,omitempty"`

	// Conditions are the binding's current conditions.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// WorkerStatus identifies the pod whose sidecar registered.
type WorkerStatus struct {
	PodName string `json:"podName"`
	PodUID  string `json:"podUID"`
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// RegisteredTime is when the sidecar registered.
	RegisteredTime metav1.Time `json:"registeredTime"`
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
	// failed).
	// +optional
	// +kubebuilder:validation:MaxItems=10
	Missing []string `json:"missing,omitempty"`
	// MissingCount counts every such file (Missing names at most 10).
	// +optional
	MissingCount int32 `json:"missingCount,omitempty"`
	// UploadedBytes is what the worker reports having had verified so far.
	// +optional
	UploadedBytes int64 `json:"uploadedBytes,omitempty"`
	// LastError is the last upload failure the worker or the server
	// reported: the file, the error and what to do.
	// +optional
	LastError string `json:"lastError,omitempty"`
	// Logs are the object keys of archived trainer logs.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	Logs []string `json:"logs,omitempty"`
	// Skipped names up to 5 entries of the artifact directory the worker
	// does not upload by policy, each "<path>: <reason>": symlinks (with
	// where they point), FIFOs, sockets, devices. Nothing is skipped
	// silently.
	// +optional
	// +kubebuilder:validation:MaxItems=5
	Skipped []string `json:"skipped,omitempty"`
	// SkippedCount counts every skipped entry (Skipped names at most 5).
	// +optional
	SkippedCount int32 `json:"skippedCount,omitempty"`
}

// CommandStatus is a command sent to the worker (through the
// tether.dev/command annotation) and what became of it.
type CommandStatus struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// State is Sent, Acknowledged or Failed.
	State string `json:"state"`
	// +optional
	Message string `json:"message,omitempty"`
	// +optional
	Time *metav1.Time `json:"time,omitempty"`
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
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`
// +kubebuilder:printcolumn:name="Step",type=integer,JSONPath=`.status.progress.step`
// +kubebuilder:printcolumn:name="Artifacts",type=integer,JSONPath=`.status.artifacts.files`
// +kubebuilder:printcolumn:name="Last Heartbeat",type=date,JSONPath=`.status.lastHeartbeatTime`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type WorkerBinding struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   WorkerBindingSpec   `json:"spec"`
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
