package controlplane

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/internal/version"
	"github.com/tether-dev/tether/pkg/artifactstore/endpoint"
	"github.com/tether-dev/tether/pkg/artifactstore/store"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/bindingserver"
	"github.com/tether-dev/tether/pkg/controller/uploadsweep"
	"github.com/tether-dev/tether/pkg/controller/workerbinding/logarchive"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/mutate"
	"github.com/tether-dev/tether/pkg/replicalease"
	"github.com/tether-dev/tether/pkg/upload"
)

// Certificate modes.
const (
	// CertModeSelfManaged: the control plane issues and rotates its own CA and
	// serving certificate (cert-controller's rotator, as Kueue does) and
	// patches the caBundle of its webhook configuration.
	CertModeSelfManaged = "self-managed"
	// CertModeExternal: certificates are mounted by someone else (cert-manager,
	// or a test harness) and the caBundle is injected by them.
	CertModeExternal = "external"
)

// Options configure the control plane. Their flag names are the contract in
// docs/contract.md; manifests/ sets them.
type Options struct {
	Namespace  string
	CertMode   string
	CertDir    string
	CertSecret string
	// ExtraDNSNames are added to the self-managed serving certificate, e.g.
	// a name the binding server is reached by from outside the cluster.
	ExtraDNSNames []string
	ServiceName   string
	WebhookConfig string
	WebhookHost   string
	WebhookPort   int
	// CABundleFile is the PEM that token Secrets carry for the sidecar;
	// default <cert-dir>/ca.crt.
	CABundleFile string
	// WebhookClientCA, when set, is a PEM file of the CA that signs the
	// kube-apiserver's client certificate for admission webhooks (its
	// AdmissionConfiguration): the admission paths then answer only a
	// caller presenting a certificate it verifies (webhookclient.go).
	WebhookClientCA string

	// BindingAddr is where the binding server listens for sidecars.
	BindingAddr string
	// StatusInterval bounds heartbeat-only status writes per binding.
	StatusInterval time.Duration
	// MissedHeartbeats is how many heartbeat intervals of silence are lost.
	MissedHeartbeats int
	// LivenessWriteInterval bounds liveness-only status writes per binding
	// while the replica's Lease vouches for its sessions.
	LivenessWriteInterval time.Duration
	// StatusWriteRate bounds each replica's paced status writes per second.
	StatusWriteRate float64
	// ReplicaLeaseDuration is the replica Lease's duration (renewed every third).
	ReplicaLeaseDuration time.Duration
	// ShutdownDelay is how long a replica told to stop keeps serving while
	// failing its readiness (drain.go).
	ShutdownDelay time.Duration
	// ReplicaName names this replica's Lease (default: from the host name,
	// with a random suffix per process).
	ReplicaName string
	// ArtifactGrace: see workerbinding.Reconciler.ArtifactGrace.
	ArtifactGrace time.Duration
	// TokenOverlap: see workerbinding.Reconciler.TokenOverlap.
	TokenOverlap time.Duration

	// Artifact storage (docs/artifacts.md): ArtifactBackend is "fs" (a
	// directory, the embedded default) or "s3" (a bucket).
	ArtifactBackend string
	ArtifactDir     string
	// ArtifactDirShared declares ArtifactDir one volume every replica mounts
	// (ReadWriteMany); without it the fs backend refuses more than one
	// replica of Deployment (checkFSReplicas).
	ArtifactDirShared bool
	// Deployment is the control plane's own Deployment in Namespace, read
	// for its replica count; empty skips the check (not in a Deployment).
	Deployment string
	S3         S3Options
	// LogCapBytes bounds each archived trainer log (its end is kept).
	LogCapBytes int64
	// TrainerStatus is auto (write the worker's progress into
	// TrainJob.status.trainerStatus unless the trainer reports it) or off.
	TrainerStatus string
	// PresignTTL is how long a presigned artifact URL lives: the read
	// endpoint's and the direct uploads'.
	PresignTTL time.Duration
	// UploadSweepMargin: see uploadsweep.UploadSweeper.Margin.
	UploadSweepMargin time.Duration
	// ArtifactDirectUpload lets sidecars PUT artifact bodies straight to a
	// store that can presign (the s3 backend), the control plane only
	// authorizing and verifying them; false sends every body through it.
	ArtifactDirectUpload bool
	// ArtifactMultipart configures how bodies past its threshold are
	// stored in parts (store.MultipartOptions).
	ArtifactMultipart store.MultipartOptions
	// ArtifactReadRedirect answers an artifact read with a redirect to a
	// presigned URL of a store that can presign (the s3 backend); false
	// streams every object through the control plane, for a store that
	// only the control plane reaches (the in-cluster quick start's, behind
	// its NetworkPolicy, by a name only cluster DNS answers).
	ArtifactReadRedirect bool
	// ArtifactAccessLog logs one line per artifact request (artifact-access).
	ArtifactAccessLog bool
	// ArtifactManifestMemoryRatio is the share of the Go memory limit the
	// manifest PUTs being read and checked may hold at once on a replica
	// (endpoint.ManifestMemory); one namespace may hold an eighth of it.
	ArtifactManifestMemoryRatio float64
	// ReadAPI serves the read endpoint through the kube-apiserver too, as
	// the aggregated API tetherv1.ReadAPIService (readapi.go), for which
	// the install registers the APIService and the RoleBinding to
	// kube-system's extension-apiserver-authentication-reader.
	ReadAPI bool
	// LogSource replaces reading logs through the API server (pods/log):
	// tests without a kubelet use it. Nil in production.
	LogSource logarchive.LogSource

	MetricsAddr string
	// MetricsSecure serves /metrics over HTTPS (a self-signed certificate)
	// to callers the API server authenticates (TokenReview) and authorizes
	// for get on the non-resource URL /metrics (SubjectAccessReview): its
	// series name every tenant's namespaces and TrainJobs. False serves
	// plain HTTP to anyone, for local debugging only.
	MetricsSecure bool
	HealthAddr    string
	LeaderElect   bool

	SidecarImage string
	// SidecarRequests and SidecarLimits override DefaultSidecarResources per
	// resource (--sidecar-requests, --sidecar-limits); a TrainJob may
	// override them again with its annotations.
	SidecarRequests, SidecarLimits map[string]string
	ServerURL                      string

	// sidecarResources are DefaultSidecarResources with SidecarRequests and
	// SidecarLimits over them, merged once, by Validate.
	sidecarResources corev1.ResourceRequirements
}

// DefaultOptions are the values of the flags when none is given.
func DefaultOptions() Options {
	return Options{
		Namespace:             envOr("POD_NAMESPACE", "tether-system"),
		CertMode:              CertModeSelfManaged,
		CertDir:               "/etc/tether/certs",
		CertSecret:            "tether-control-plane-cert",
		ServiceName:           "tether-control-plane",
		WebhookConfig:         "tether-webhook",
		WebhookPort:           9443,
		BindingAddr:           ":8443",
		StatusInterval:        30 * time.Second,
		MissedHeartbeats:      3,
		LivenessWriteInterval: bindingserver.DefaultLivenessWriteInterval,
		StatusWriteRate:       bindingserver.DefaultStatusWriteRate,
		ReplicaLeaseDuration:  replicalease.DefaultDuration,
		ShutdownDelay:         DefaultShutdownDelay,
		ArtifactGrace:         10 * time.Second,
		TokenOverlap:          2 * time.Minute,
		ArtifactBackend:       "fs",
		ArtifactDir:           "/var/lib/tether/artifacts",
		LogCapBytes:           10 << 20,
		TrainerStatus:         "auto",
		PresignTTL:            5 * time.Minute,
		UploadSweepMargin:     uploadsweep.DefaultUploadSweepMargin,
		ArtifactDirectUpload:  true,
		ArtifactMultipart: store.MultipartOptions{Threshold: upload.DefaultMultipartThreshold, PartSize: upload.DefaultPartSize,
			MaxConcurrent: store.DefaultMaxLargeUploads},
		ArtifactReadRedirect: true,
		ArtifactAccessLog:    true,
		// A quarter: 230 MiB of the chart's 1Gi (GOMEMLIMIT 921.6 MiB),
		// beside the 640 MiB of 10,000 bindings and sessions.
		ArtifactManifestMemoryRatio: endpoint.DefaultManifestMemoryRatio,
		MetricsAddr:                 ":8080",
		MetricsSecure:               true,
		HealthAddr:                  ":8081",
		// The tag is the control plane's own version; the shipped manifests
		// set the env (names.EnvSidecarImage), which kustomize's images: rewrites.
		SidecarImage: envOr(names.EnvSidecarImage, version.Image("tether-sidecar")),
		ServerURL:    "https://tether-control-plane.tether-system.svc:8443",
	}
}

// BindFlags registers the options as flags on fs.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "namespace the control plane runs in (default: $POD_NAMESPACE)")
	fs.StringVar(&o.CertMode, "cert-mode", o.CertMode, "serving certificate mode: self-managed (rotate our own CA, patch caBundle) or external (mounted, e.g. by cert-manager)")
	fs.StringVar(&o.CertDir, "cert-dir", o.CertDir, "directory with tls.crt, tls.key and ca.crt")
	fs.StringVar(&o.CertSecret, "cert-secret", o.CertSecret, "Secret (in --namespace) holding the serving certificate in self-managed mode")
	fs.Func("cert-extra-dns-names", "comma-separated extra DNS names for the self-managed serving certificate", func(v string) error {
		for _, n := range strings.Split(v, ",") {
			if n = strings.TrimSpace(n); n != "" {
				o.ExtraDNSNames = append(o.ExtraDNSNames, n)
			}
		}
		return nil
	})
	fs.StringVar(&o.ServiceName, "service-name", o.ServiceName, "Service fronting the webhook and binding server; the certificate's DNS names derive from it")
	fs.StringVar(&o.WebhookConfig, "webhook-config", o.WebhookConfig, "MutatingWebhookConfiguration whose caBundle is patched in self-managed mode")
	fs.StringVar(&o.WebhookHost, "webhook-host", o.WebhookHost, "address the webhook server binds (empty: all interfaces)")
	fs.IntVar(&o.WebhookPort, "webhook-port", o.WebhookPort, "HTTPS port of the admission webhooks")
	fs.StringVar(&o.BindingAddr, "binding-bind-address", o.BindingAddr, "address of the binding server (HTTPS, same certificate as the webhooks)")
	fs.DurationVar(&o.StatusInterval, "status-interval", o.StatusInterval, "at most one WorkerBinding status write per binding per interval for reported progress and uploaded bytes, and for liveness alone while the replica holds no Lease (transitions are written at once)")
	fs.IntVar(&o.MissedHeartbeats, "missed-heartbeats", o.MissedHeartbeats, "heartbeat intervals without a heartbeat before a worker is HeartbeatLost")
	fs.DurationVar(&o.LivenessWriteInterval, "liveness-write-interval", o.LivenessWriteInterval, "at most one liveness-only WorkerBinding status write per binding per interval while the replica's Lease vouches for its sessions (heartbeats stay in the replica's memory meanwhile)")
	fs.Float64Var(&o.StatusWriteRate, "status-write-rate", o.StatusWriteRate, "at most this many paced WorkerBinding status writes (progress, uploaded bytes, liveness; not transitions) per second from each replica while its Lease vouches")
	fs.DurationVar(&o.ReplicaLeaseDuration, "replica-lease-duration", o.ReplicaLeaseDuration, "duration of each replica's Lease (coordination.k8s.io, in --namespace), renewed every third of it; when it expires, the sessions the replica held are HeartbeatLost --missed-heartbeats intervals plus one renewal period after its last renewal (or at expiry if later) unless another replica takes them")
	fs.DurationVar(&o.ShutdownDelay, "shutdown-delay", o.ShutdownDelay, "on SIGTERM, how long the replica keeps serving webhooks, sessions and uploads while its /readyz fails, before it stops: the endpoints that route to it (the API server's view of the Service included) drop it first, so no admission or session is sent to a closed port; keep it under the pod's terminationGracePeriodSeconds with room for the shutdown itself")
	fs.DurationVar(&o.TokenOverlap, "token-overlap", o.TokenOverlap, "after a token Secret is reissued, how long the previous token stays valid: the kubelet updates a running pod's token volume on its next pod sync (its syncFrequency, 1m by default); 0 ends it at once")
	fs.DurationVar(&o.ArtifactGrace, "artifact-grace", o.ArtifactGrace, "after a trainer pod ends, how long to wait for its artifact manifest before the binding fails as ArtifactsIncomplete")
	fs.StringVar(&o.ArtifactBackend, "artifact-backend", o.ArtifactBackend, "where artifacts are stored: fs (a directory; one replica or a shared volume) or s3 (a bucket)")
	fs.StringVar(&o.ArtifactDir, "artifact-dir", o.ArtifactDir, "directory of the fs artifact backend")
	fs.BoolVar(&o.ArtifactDirShared, "artifact-dir-shared", o.ArtifactDirShared, "declare --artifact-dir one volume that every replica mounts (ReadWriteMany); without it the fs backend refuses to start when --deployment has more than one replica")
	fs.StringVar(&o.Deployment, "deployment", o.Deployment, "the control plane's own Deployment (in --namespace), whose replica count the fs backend checks; empty: not checked")
	fs.StringVar(&o.S3.Endpoint, "s3-endpoint", o.S3.Endpoint, "S3 endpoint host[:port] of the s3 artifact backend")
	fs.StringVar(&o.S3.Bucket, "s3-bucket", o.S3.Bucket, "bucket of the s3 artifact backend")
	fs.StringVar(&o.S3.Prefix, "s3-prefix", o.S3.Prefix, "key prefix inside the bucket (e.g. tether/)")
	fs.StringVar(&o.S3.Region, "s3-region", o.S3.Region, "bucket region (empty: ask the server)")
	fs.BoolVar(&o.S3.Insecure, "s3-insecure", o.S3.Insecure, "use plain HTTP to the S3 endpoint (tests only)")
	fs.StringVar(&o.S3.PublicEndpoint, "s3-public-endpoint", o.S3.PublicEndpoint, "S3 endpoint host[:port] as sidecars reach it, if not --s3-endpoint: the presigned URLs of direct uploads name it (needs --s3-region)")
	fs.BoolVar(&o.ArtifactDirectUpload, "artifact-direct-upload", o.ArtifactDirectUpload, "let sidecars PUT artifacts straight to the s3 store through presigned URLs (the control plane authorizes and verifies each one); false: every body goes through the control plane. Sidecars must reach the store's endpoint (--s3-public-endpoint)")
	fs.Int64Var(&o.ArtifactMultipart.Threshold, "artifact-multipart-threshold", o.ArtifactMultipart.Threshold, "bytes from which an artifact is stored as a multipart upload of the s3 store (resumable; the only way past 5 GiB), below it in one PUT")
	fs.Int64Var(&o.ArtifactMultipart.PartSize, "artifact-part-size", o.ArtifactMultipart.PartSize, "bytes of each part of a multipart upload (at least 5 MiB; raised for files too large for 10,000 parts of it)")
	fs.IntVar(&o.ArtifactMultipart.MaxConcurrent, "artifact-max-large-uploads", o.ArtifactMultipart.MaxConcurrent, "multipart uploads one replica streams at once; one more is answered 503 SlowDown with Retry-After and the sidecar retries")
	fs.BoolVar(&o.ArtifactReadRedirect, "artifact-read-redirect", o.ArtifactReadRedirect, "answer artifact reads with a redirect to a presigned URL of the s3 store (readers must reach its endpoint); false: stream every object through the control plane, for a store only the control plane reaches")
	fs.BoolVar(&o.ArtifactAccessLog, "artifact-access-log", o.ArtifactAccessLog, "log one line per artifact request (logger artifact-access: binding, job id, rank, pod, key, operation, status and outcome, body bytes, duration; never the token)")
	fs.Float64Var(&o.ArtifactManifestMemoryRatio, "artifact-manifest-memory-ratio", o.ArtifactManifestMemoryRatio, "share of the Go memory limit (GOMEMLIMIT: 90% of the container's) that manifest uploads being read and checked may hold at once on a replica, each estimated from its Content-Length before its body is read (one of 16 MiB: 25.4 MiB); one namespace may hold an eighth of it, and both at least one such manifest. Past it a manifest upload is answered 503 SlowDown with Retry-After, unread")
	fs.BoolVar(&o.ReadAPI, "read-api", o.ReadAPI, "serve artifact and log reads through the kube-apiserver too, as the aggregated API "+tetherv1.ReadAPIService+" (needs its APIService and a RoleBinding to extension-apiserver-authentication-reader in kube-system: the chart's readAPI.enabled)")
	fs.StringVar(&o.S3.CredentialsDir, "s3-credentials-dir", o.S3.CredentialsDir, "directory holding access-key and secret-key files (a mounted Secret)")
	fs.Int64Var(&o.LogCapBytes, "log-cap-bytes", o.LogCapBytes, "largest trainer log archived per pod; a longer one keeps its end, with a marker")
	fs.StringVar(&o.TrainerStatus, "trainer-status", o.TrainerStatus, "auto: write bound jobs' progress into TrainJob.status.trainerStatus when the trainer does not report it (a TrainJob may opt out with tether.dev/trainer-status=off); off: never")
	fs.DurationVar(&o.PresignTTL, "presign-ttl", o.PresignTTL, "lifetime of the presigned URLs the artifact endpoints hand out: orchestrators' reads and sidecars' direct uploads (S3 backend; at most 1h)")
	fs.DurationVar(&o.UploadSweepMargin, "upload-sweep-margin", o.UploadSweepMargin, "after a binding ends, its job's pending direct uploads are swept until --presign-ttl plus this margin (clock skew between store and control plane, and a body the store accepted just before the URL expired still streaming), then once more")
	fs.StringVar(&o.CABundleFile, "ca-bundle-file", o.CABundleFile, "PEM CA bundle put into token Secrets for the sidecar (default <cert-dir>/ca.crt)")
	fs.StringVar(&o.WebhookClientCA, "webhook-client-ca", o.WebhookClientCA, "PEM CA of the kube-apiserver's admission client certificate (its AdmissionConfiguration); when set, the admission webhooks answer only callers presenting a certificate it signed (default: any caller)")
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", o.MetricsAddr, "address of the Prometheus /metrics endpoint ('0' disables)")
	fs.BoolVar(&o.MetricsSecure, "metrics-secure", o.MetricsSecure, "serve /metrics over HTTPS, only to callers the API server authenticates and authorizes for get on /metrics (the tether-metrics-reader ClusterRole); false: plain HTTP to anyone, for local debugging only")
	fs.StringVar(&o.HealthAddr, "health-probe-bind-address", o.HealthAddr, "address of /healthz and /readyz")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "elect one replica to run the controller (webhooks are served by every replica)")
	fs.StringVar(&o.SidecarImage, "sidecar-image", o.SidecarImage, "image of the injected sidecar (default $"+names.EnvSidecarImage+", else the control plane's own version's; a TrainJob may override it with tether.dev/sidecar-image)")
	for _, r := range []struct {
		flag string
		into *map[string]string
	}{{"sidecar-requests", &o.SidecarRequests}, {"sidecar-limits", &o.SidecarLimits}} {
		fs.Func(r.flag, "the injected sidecar's default "+strings.TrimPrefix(r.flag, "sidecar-")+", e.g. cpu=100m,memory=128Mi (unnamed resources keep the built-in 50m/64Mi requests, 1/128Mi limits)", func(v string) error {
			list, err := jobconfig.ParseResourceList(v)
			if err != nil {
				return fmt.Errorf("--%s=%s: %w", r.flag, v, err)
			}
			*r.into = list
			return nil
		})
	}
	fs.StringVar(&o.ServerURL, "binding-server-url", o.ServerURL, "URL the sidecar uses to reach the binding server")
}

// Validate reports the first option that cannot work, naming the flag.
func (o *Options) Validate() error {
	switch {
	case o.ArtifactMultipart.Threshold < upload.MinPartSize || o.ArtifactMultipart.Threshold > upload.MaxSinglePutSize:
		return fmt.Errorf("--artifact-multipart-threshold=%d: must be between %d (5 MiB) and %d (5 GiB)", o.ArtifactMultipart.Threshold, upload.MinPartSize, upload.MaxSinglePutSize)
	case o.ArtifactMultipart.PartSize < upload.MinPartSize || o.ArtifactMultipart.PartSize > upload.MaxPartSize:
		return fmt.Errorf("--artifact-part-size=%d: must be between %d (5 MiB) and %d (5 GiB)", o.ArtifactMultipart.PartSize, upload.MinPartSize, upload.MaxPartSize)
	case o.ArtifactMultipart.MaxConcurrent < 1:
		return fmt.Errorf("--artifact-max-large-uploads=%d: must be at least 1", o.ArtifactMultipart.MaxConcurrent)
	case o.CertMode != CertModeSelfManaged && o.CertMode != CertModeExternal:
		return fmt.Errorf("--cert-mode=%q: must be %q or %q", o.CertMode, CertModeSelfManaged, CertModeExternal)
	case o.Namespace == "":
		return fmt.Errorf("--namespace is empty and $POD_NAMESPACE is not set")
	case o.SidecarImage == "":
		return fmt.Errorf("--sidecar-image is required")
	case o.ServerURL == "":
		return fmt.Errorf("--binding-server-url is required")
	case o.ArtifactBackend != "fs" && o.ArtifactBackend != "s3":
		return fmt.Errorf("--artifact-backend=%q: must be fs or s3", o.ArtifactBackend)
	case o.ArtifactBackend == "fs" && o.ArtifactDir == "":
		return fmt.Errorf("--artifact-dir is required with --artifact-backend=fs")
	case o.ArtifactBackend == "s3" && (o.S3.Endpoint == "" || o.S3.Bucket == ""):
		return fmt.Errorf("--s3-endpoint and --s3-bucket are required with --artifact-backend=s3")
	case o.StatusInterval < time.Second:
		return fmt.Errorf("--status-interval=%s: must be at least 1s", o.StatusInterval)
	case o.MissedHeartbeats < 1:
		return fmt.Errorf("--missed-heartbeats=%d: must be at least 1", o.MissedHeartbeats)
	case o.LivenessWriteInterval < o.StatusInterval:
		return fmt.Errorf("--liveness-write-interval=%s: must be at least --status-interval (%s)", o.LivenessWriteInterval, o.StatusInterval)
	case o.StatusWriteRate < 1:
		return fmt.Errorf("--status-write-rate=%v: must be at least 1 write per second", o.StatusWriteRate)
	case o.ReplicaLeaseDuration < 3*time.Second || o.ReplicaLeaseDuration > 5*time.Minute:
		return fmt.Errorf("--replica-lease-duration=%s: must be between 3s and 5m", o.ReplicaLeaseDuration)
	case o.TrainerStatus != "auto" && o.TrainerStatus != "off":
		return fmt.Errorf("--trainer-status=%q: must be auto or off", o.TrainerStatus)
	case o.S3.PublicEndpoint != "" && o.S3.Region == "":
		return fmt.Errorf("--s3-public-endpoint needs --s3-region: presigned URLs for it are signed without asking the store for the bucket's region")
	case o.PresignTTL < time.Second || o.PresignTTL > time.Hour:
		return fmt.Errorf("--presign-ttl=%s: must be between 1s and 1h (a read URL should die soon)", o.PresignTTL)
	case o.UploadSweepMargin < 0 || o.UploadSweepMargin > time.Hour:
		return fmt.Errorf("--upload-sweep-margin=%s: must be between 0 and 1h", o.UploadSweepMargin)
	case o.ShutdownDelay < 0 || o.ShutdownDelay > time.Minute:
		return fmt.Errorf("--shutdown-delay=%s: must be between 0 and 1m (within the pod's terminationGracePeriodSeconds)", o.ShutdownDelay)
	case o.ArtifactManifestMemoryRatio <= 0 || o.ArtifactManifestMemoryRatio > 0.5:
		return fmt.Errorf("--artifact-manifest-memory-ratio=%v: must be more than 0 and at most 0.5 (the rest of the memory is the bindings' and sessions')", o.ArtifactManifestMemoryRatio)
	case o.TokenOverlap < 0 || o.TokenOverlap > time.Hour:
		return fmt.Errorf("--token-overlap=%s: must be between 0 and 1h (a replaced token must die soon)", o.TokenOverlap)
	}
	if o.WebhookClientCA != "" {
		if err := checkWebhookClientCA(o.WebhookClientCA); err != nil {
			return err
		}
	}
	// The pod webhook gives this URL to every sidecar, and a sidecar refuses
	// one that is not https (its token would cross the network in clear
	// text): refuse it here, once, rather than in every bound pod.
	if _, err := binding.ParseServerURL(o.ServerURL); err != nil {
		return fmt.Errorf("--binding-server-url: %w", err)
	}
	resources, err := mutate.MergeResources(mutate.DefaultSidecarResources(), o.SidecarRequests, o.SidecarLimits)
	if err != nil {
		return fmt.Errorf("--sidecar-requests/--sidecar-limits (over the built-in 50m/64Mi requests, 1/128Mi limits): %w", err)
	}
	o.sidecarResources = resources
	return nil
}

func (o *Options) caBundleFile() string {
	if o.CABundleFile != "" {
		return o.CABundleFile
	}
	return filepath.Join(o.CertDir, "ca.crt")
}

// sidecarConfig is the sidecar the pod webhook injects; after Validate.
func (o *Options) sidecarConfig() mutate.SidecarConfig {
	return mutate.SidecarConfig{Image: o.SidecarImage, ServerURL: o.ServerURL, Resources: o.sidecarResources}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// S3Options configure the s3 artifact backend.
type S3Options struct {
	Endpoint, Bucket, Prefix, Region string
	Insecure                         bool
	// PublicEndpoint is the endpoint presigned upload URLs name (sidecars
	// reach it over the same scheme as Endpoint); empty: Endpoint.
	PublicEndpoint string
	// CredentialsDir holds files access-key and secret-key.
	CredentialsDir string
}
