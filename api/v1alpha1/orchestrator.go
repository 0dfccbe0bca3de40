package v1alpha1

// The orchestrator's contract with the control plane, beyond the
// WorkerBinding's fields: the names an orchestrator writes and reads. Both
// the control plane (pkg/artifactreads, pkg/bindingserver) and the orchestrators' client
// (pkg/client) import them from here, as Kubernetes keeps its well-known
// labels and annotations next to its types: an orchestrator already
// depends on this package to read a WorkerBinding, and this package
// depends on neither half (docs/orchestrator.md).

// Command states in status.lastCommand.
const (
	CommandSent         = "Sent"
	CommandAcknowledged = "Acknowledged"
	CommandFailed       = "Failed"
)

// ReadPathPrefix is the orchestrator read endpoint (docs/orchestrator.md):
// GET ReadPathPrefix<namespace>/workerbindings/<name>/objects/<path>, where
// path is relative to the job's prefix (manifest.json, nodes/1/manifest.json,
// ckpt/step-100.pt, .tether/logs/<pod>.log).
const ReadPathPrefix = "/orchestrator/v1/namespaces/"

// The read endpoint served through the kube-apiserver as an aggregated API
// (docs/orchestrator.md, "Reads through the API server"): GET
// ReadAPIPathPrefix<namespace>/workerbindings/<name>/objects/<path> on the
// API server, with the caller's own kubeconfig. The API server authorizes
// the caller for get on the subresource workerbindings/objects in
// ReadAPIGroup (RBAC decides who reads what), then proxies the request to
// the control plane, which trusts only the API server's front-proxy
// identity and asks again (SubjectAccessReview) before it reads.
const (
	// ReadAPIGroup is the aggregated API's group.
	ReadAPIGroup = "artifacts.tether.dev"
	// ReadAPIVersion is its only version.
	ReadAPIVersion = "v1alpha1"
	// ReadAPIService is the APIService that registers it.
	ReadAPIService = ReadAPIVersion + "." + ReadAPIGroup
	// ReadAPIResource and ReadAPISubresource are what the caller is
	// authorized for: get workerbindings/objects.
	ReadAPIResource    = "workerbindings"
	ReadAPISubresource = "objects"
	// ReadAPIPathPrefix is where the reads are, on the API server.
	ReadAPIPathPrefix = "/apis/" + ReadAPIGroup + "/" + ReadAPIVersion + "/namespaces/"
)
