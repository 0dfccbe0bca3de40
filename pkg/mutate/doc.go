// Package mutate holds Tether's two admission webhooks.
//
// The TrainJob webhook touches metadata only: it stamps the job's identity
// (job id, worker id) and validates the per-job settings annotations. No
// Trainer version lets a TrainJob add a container, so the sidecar is injected
// by the Pod webhook, into the trainer pods (replicated job "node") that
// JobSet creates for a bound TrainJob: appended, or, where the runtime
// declares it so that Kueue counts it (Kueue mode, declared.go), completed
// in place with the declared resources.
//
// The decision logic (TrainJobMutator, PodInjector) is pure: it takes objects
// and returns the mutated object or a reason, which keeps it golden-testable.
// The handlers add decoding, the TrainJob lookup, Events and metrics.
package mutate
