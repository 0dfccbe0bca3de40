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

	// Conditions are the binding's current conditions.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
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
