// Package artifactreads is the orchestrator read endpoint
// (docs/orchestrator.md), in two ways in:
//
//   - New: GET tetherv1.ReadPathPrefix<namespace>/workerbindings/<name>/objects/<path>
//     on the binding Service, with a Kubernetes bearer token (TokenReview),
//     whose user must be allowed to get the WorkerBinding
//     (SubjectAccessReview). The caller is in the cluster and reaches the
//     store: an object of a store that presigns is answered with a redirect
//     to a presigned URL (--artifact-read-redirect), else streamed, and
//     streamed whenever the caller asks (names.HeaderStream).
//   - NewAggregated: the same reads under tetherv1.ReadAPIPathPrefix, as
//     the aggregated API the kube-apiserver proxies (FrontProxy). Every
//     object is streamed: the API server passes no redirect of an aggregated
//     API on (it answers 502), and its caller may not reach the store.
//
// The handler is a plain http.Handler with its dependencies injected
// (Options); the control plane mounts New on the binding server's listener
// and NewAggregated on the webhook listener (--read-api).
package artifactreads
