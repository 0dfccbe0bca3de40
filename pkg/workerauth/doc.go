// Package workerauth is the gate every request of a worker's sidecar passes
// on the binding server (pkg/bindingserver): register, session opens and
// artifact requests. The job token names the binding (looked up by its
// SHA-256, compared in constant time), the binding's TrainJob must still
// vouch for it (trainjob.go), the claimed job, worker and pod must be the
// binding's, the pod's projected ServiceAccount token proves the pod
// (TokenReview, podtoken.go), and the pod's node must be one the binding
// binds. Each real token, and each source address sending unknown tokens,
// has request budgets of its own (ratelimit.go).
//
// Refusals carry the protocol's error code and a metric reason; the caller
// answers, counts and logs them.
package workerauth
