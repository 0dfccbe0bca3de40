package mutate

// Outcome is what the pod webhook did with a pod.
type Outcome string

const (
	// OutcomePatched: the sidecar patch was returned. Not "injected": a later
	// admission step (Pod Security, quota, another webhook) may still refuse
	// the pod; InjectionReporter announces the pods that exist.
	OutcomePatched Outcome = "patched"
	// OutcomeSkipped: the pod is admitted unchanged.
	OutcomeSkipped Outcome = "skipped"
	// OutcomeDenied: the pod is refused with the decision's message.
	OutcomeDenied Outcome = "denied"
)

// Reason says why. Skip and deny reasons are bounded enums: they are metric
// label values and Event reasons.
type Reason string

const (
	// ReasonInjected is the reason of OutcomePatched.
	ReasonInjected Reason = "Injected"
	// ReasonInjectionWarning is the Event reason of an injection's warnings.
	ReasonInjectionWarning Reason = "InjectionWarning"

	// Skips: the pod is admitted unchanged.
	SkipNotTrainerPod   Reason = "NotTrainerPod"   // not the trainer replicated job
	SkipNoTrainJob      Reason = "NoTrainJob"      // its JobSet has no TrainJob of the same name
	SkipNotBound        Reason = "NotBound"        // the TrainJob is not labeled for binding
	SkipAlreadyInjected Reason = "AlreadyInjected" // re-invocation: status, sidecar and ids agree
	SkipNotPrimaryNode  Reason = "NotPrimaryNode"  // node rank > 0 of a job bound with tether.dev/nodes=primary

	// Denials: a bound job's pod would run without its sidecar.
	DenyMissingIdentity    Reason = "MissingIdentity"
	DenyInvalidSettings    Reason = "InvalidSettings"
	DenyNoTrainerContainer Reason = "NoTrainerContainer"
	DenyArtifactMount      Reason = "ArtifactMountConflict"
	DenyNameConflict       Reason = "NameConflict"
	DenyStaleInjection     Reason = "StaleInjection" // a copied status with Tether's names, not this job's injection
	DenyTrainJobLookup     Reason = "TrainJobLookupFailed"
	DenyUndecodable        Reason = "Undecodable"
	DenyNodeRank           Reason = "NodeRank" // no node rank, or one beyond binding.MaxBoundNodes
	// The pod names no ServiceAccount, so it can hold no projected token to
	// prove itself with (pod.go, serviceAccountRefusal).
	DenyNoServiceAccount Reason = "NoServiceAccount"
	// The runtime declares the sidecar (Kueue mode) but not as Tether can complete it.
	DenySidecarDeclaration Reason = "InvalidSidecarDeclaration"
	// The job's sidecar-requests/-limits contradict the runtime's declaration.
	DenySidecarResources Reason = "SidecarResourcesConflict"
)

// Decision is the injector's verdict on one pod.
type Decision struct {
	Outcome Outcome
	Reason  Reason
	// Message explains a skip or denial to a person; for denials it is the
	// admission response's message.
	Message string
	// Warnings are returned to the API client and recorded as Events.
	Warnings []string
}

func injected(warnings []string) Decision {
	return Decision{Outcome: OutcomePatched, Reason: ReasonInjected, Warnings: warnings}
}

func skipped(r Reason, msg string) Decision {
	return Decision{Outcome: OutcomeSkipped, Reason: r, Message: msg}
}

func denied(r Reason, msg string) Decision {
	return Decision{Outcome: OutcomeDenied, Reason: r, Message: msg}
}
