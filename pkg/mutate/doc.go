// Package mutate holds Tether's three admission webhooks: TrainJob, JobSet
// and Pod.
//
// The TrainJob webhook touches metadata only: it stamps the job's identity
// (job id, worker id) and validates the per-job settings annotations. No
// Trainer version lets a TrainJob add a container, so the sidecar is injected
// by the Pod webhook, into the trainer pods (replicated job "node") that
// JobSet creates for a bound TrainJob: appended, or, where the runtime
// declares it so that Kueue counts it (Kueue mode, declared.go), completed
// in place with the declared resources. The JobSet webhook carries the
// routing label down to the trainer pods' template (routing.go), so the Pod
// webhook is called for bound jobs' pods only.
//
// The decision logic (TrainJobMutator, PodInjector) is pure: it takes objects
// and returns the mutated object or a reason, which keeps it golden-testable.
// The handlers add decoding, the TrainJob lookup, Events and metrics. The
// pod webhook is served on a fast path, internal/codec, which decodes the
// AdmissionReview and encodes the patch in fewer passes than
// controller-runtime and asks the webhook one question (PodHandler.admit);
// Handle is the plain path the golden tests take, and the tests prove both
// answer alike.
package mutate
