package binding

// The token Secret: the controller writes it for every bound TrainJob, the
// pod webhook mounts it into the sidecar, and the sidecar reads its files.
const (
	// TokenSecretType marks token Secrets, so they are recognisable in a listing.
	TokenSecretType = "tether.dev/binding-token"
	// TokenKey holds the job's token; it is also the file name in the mount.
	TokenKey = "token"
	// CABundleKey holds the PEM CA bundle that verifies the binding server.
	CABundleKey = "ca.crt"
)

// TokenSecretName is the token Secret of TrainJob trainJob (same namespace).
func TokenSecretName(trainJob string) string { return trainJob + "-tether-token" }
