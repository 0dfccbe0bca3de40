package controlplane

import (
	"context"
	"os"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/artifactreads"
	"github.com/tether-dev/tether/pkg/artifactstore/objects"
	"github.com/tether-dev/tether/pkg/artifactstore/s3store"
	"github.com/tether-dev/tether/pkg/artifactstore/store"
	"github.com/tether-dev/tether/pkg/bindingserver"
	"github.com/tether-dev/tether/pkg/replicalease"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/pkg/workerauth"
)

// bindingServer builds the binding server (sessions, registration, the
// replica's Lease) and the clientset the parts after it share; servers
// starts it.
func (a *assembly) bindingServer() error {
	opts, mgr := a.opts, a.mgr
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &tetherv1.WorkerBinding{}, workerauth.TokenHashIndex,
		workerauth.IndexTokenHash); err != nil {
		return err
	}
	// The replica's Lease is renewed against the API server, never through
	// the cache (a renewal must not act on a stale copy).
	leaseClient, err := client.New(a.cfg, client.Options{Scheme: a.scheme})
	if err != nil {
		return err
	}
	a.replica = opts.ReplicaName
	if a.replica == "" {
		host, _ := os.Hostname()
		a.replica = replicalease.NewName(host)
	}
	// The clients of the Kubernetes APIs the parts review with
	// (TokenReview of pod tokens and readers' tokens, SubjectAccessReview)
	// and read logs through.
	if a.clientset, err = kubernetes.NewForConfig(a.cfg); err != nil {
		return err
	}
	a.binding = bindingserver.New(bindingserver.Options{
		Addr: opts.BindingAddr, CertDir: opts.CertDir,
		StatusInterval: opts.StatusInterval, MissedHeartbeats: opts.MissedHeartbeats,
		LivenessWriteInterval: opts.LivenessWriteInterval, StatusWriteRate: opts.StatusWriteRate,
		Lease: replicalease.Options{Client: leaseClient, Namespace: opts.Namespace, Name: a.replica, Duration: opts.ReplicaLeaseDuration},
		// Pod tokens are reviewed by the API server (create tokenreviews).
		PodTokens: workerauth.KubePodTokenReviewer{Clientset: a.clientset},
	}, mgr.GetCache(), mgr.GetAPIReader(), mgr.GetClient(), mgr.GetLogger().WithName("binding"), a.recorder)
	return nil
}

// artifacts opens the artifact store and serves it on the binding server:
// the sidecars' job-scoped endpoint, and the orchestrators' reads with their
// own Kubernetes identity (docs/orchestrator.md).
func (a *assembly) artifacts() error {
	backend, err := artifactBackend(a.opts, a.mgr.GetLogger().WithName("artifacts"))
	if err != nil {
		return err
	}
	var probed <-chan struct{}
	if s3, ok := backend.(*s3store.S3Backend); ok {
		// Probed on every replica as it starts, while it serves: a replica
		// restarted during a store outage keeps its workers' sessions
		// (soak: no upload error reached a binding whose replicas were
		// both starting), and nothing touches the store until the probe
		// chose how.
		a.probesStore, probed = true, s3.Probed()
		log := a.mgr.GetLogger().WithName("artifacts")
		if err := a.mgr.Add(everyReplica(func(ctx context.Context) error {
			caps, err := probeStore(ctx, s3, log)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			a.storeCaps.Store(&caps)
			return nil
		})); err != nil {
			return err
		}
	}
	a.backend = backend
	boundManifestMemory(a.opts)
	// The replica's one artifact store: the endpoint below and the
	// controllers (controllers.go) take the same Store, so promotion holds
	// the key locks the endpoint's PUTs hold.
	storeOpts := store.Options{
		Direct:    store.DirectOptions{Disabled: !a.opts.ArtifactDirectUpload, TTL: a.opts.PresignTTL},
		Multipart: a.opts.ArtifactMultipart,
		Ready:     probed,
		Log:       a.mgr.GetLogger().WithName("binding").WithName("artifacts"),
	}
	if a.opts.ArtifactAccessLog {
		storeOpts.OnAccess = accessLog(a.mgr.GetLogger().WithName("artifact-access"))
	}
	a.artifactStore = store.New(backend, storeOpts)
	a.binding.EnableArtifacts(a.artifactStore)
	reads := backend
	if !a.opts.ArtifactReadRedirect {
		if o, ok := backend.(objects.Opener); ok {
			reads = streamed{Backend: backend, Opener: o}
		}
	}
	a.reads = artifactreads.Options{
		Backend: reads, Reviewer: artifactreads.KubeReviewer{Clientset: a.clientset}, Bindings: a.mgr.GetCache(), TTL: a.opts.PresignTTL,
		Log: a.mgr.GetLogger().WithName("binding"),
		// Counted with the binding server's refusals, as "read_<reason>".
		OnRefused: func(reason string) { a.binding.Refused("read_" + reason) },
	}
	a.binding.Mount(tetherv1.ReadPathPrefix, artifactreads.New(a.reads))
	return nil
}

// streamed is a backend for the read endpoint without the store's
// presigning (--artifact-read-redirect=false): the endpoint then streams
// every object itself.
type streamed struct {
	upload.Backend
	objects.Opener
}

// accessLog writes one line per artifact request: the access log an
// auditor, or the soak's checker, reads to see which binding's token
// touched which keys, and how each request ended.
func accessLog(log logr.Logger) func(store.AccessRecord) {
	return func(a store.AccessRecord) {
		log.Info("artifact access", "requestID", a.RequestID, "op", a.Op, "method", a.Method, "key", a.Key,
			"binding", a.Binding, "jobID", a.JobID, "rank", a.Rank, "pod", a.Pod,
			"status", a.Status, "outcome", a.Outcome(), "bodyBytes", a.BodyBytes, "duration", a.Duration.String())
	}
}
