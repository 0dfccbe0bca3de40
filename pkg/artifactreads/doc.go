// Package artifactreads is the orchestrator read endpoint
// (docs/orchestrator.md): GET tetherv1.ReadPathPrefix
// <namespace>/workerbindings/<name>/objects/<path> with a Kubernetes
// bearer token. The token is authenticated (TokenReview) and its user
// authorized to get the WorkerBinding (SubjectAccessReview); the object,
// under the binding's job id, is then redirected to a presigned URL of the
// store or streamed through the control plane.
//
// The handler is a plain http.Handler with its dependencies injected
// (Options): the control plane mounts it on the binding server's listener
// today, and may serve it elsewhere (behind the kube-apiserver, as an
// aggregated API) without the binding server.
package artifactreads
