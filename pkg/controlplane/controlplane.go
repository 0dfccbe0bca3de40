package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	bindingserver "github.com/tether-dev/tether/pkg/binding/server"
	"github.com/tether-dev/tether/pkg/controller"
	"github.com/tether-dev/tether/pkg/mutate"
	"github.com/tether-dev/tether/pkg/trainjob"
	"github.com/tether-dev/tether/pkg/upload/store"
)

// Webhook paths; manifests/ points the MutatingWebhookConfiguration at them.
const (
	TrainJobWebhookPath = "/mutate-trainjob"
	JobSetWebhookPath   = "/mutate-jobset"
	PodWebhookPath      = "/mutate-pod"
)

// NewScheme returns the scheme the control plane speaks.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := tetherv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// ControlPlane is a configured manager and what it takes to be ready.
type ControlPlane struct {
	ctrl.Manager
	events     record.EventBroadcaster
	certsReady chan struct{}
	// serving is closed once the webhooks are registered on the server.
	serving chan struct{}
}

// Ready reports whether the serving certificate is in place and the webhook
// server is listening: the Service then routes admissions only to replicas
// that can answer them.
func (cp *ControlPlane) Ready() error {
	select {
	case <-cp.serving:
	default:
		return fmt.Errorf("serving certificate not ready, webhooks not registered")
	}
	return cp.GetWebhookServer().StartedChecker()(nil)
}

// New builds the control plane's manager with everything registered on it.
// Start it with Start.
func New(cfg *rest.Config, opts Options) (_ *ControlPlane, err error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	scheme := NewScheme()
	events := newEventBroadcaster()
	defer func() {
		if err != nil {
			events.Shutdown()
		}
	}()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		// Tether's correlator options (events.go); the field is deprecated
		// only because the manager does not stop a broadcaster it is given,
		// and Start does.
		EventBroadcaster:        events, //nolint:staticcheck // see above
		Scheme:                  scheme,
		Metrics:                 metricsOptions(opts),
		HealthProbeBindAddress:  opts.HealthAddr,
		LeaderElection:          opts.LeaderElect,
		LeaderElectionID:        "tether-control-plane.tether.dev",
		LeaderElectionNamespace: opts.Namespace,
		// A replica that stops hands the lease over at once.
		LeaderElectionReleaseOnCancel: true,
		// The webhook server is added to the manager on first use
		// (GetWebhookServer), which waits for the certificate.
		WebhookServer: webhook.NewServer(webhook.Options{Host: opts.WebhookHost, Port: opts.WebhookPort, CertDir: opts.CertDir}),
		Cache: cache.Options{
			ByObject: map[client.Object]cache.ByObject{
				// Only trainer pods are cached: the controller needs nothing of any other pod.
				&corev1.Pod{}: {Label: trainjob.TrainerPodSelector()},
				// Only the binding-server replicas' Leases, in our namespace.
				&coordinationv1.Lease{}: {Namespaces: map[string]cache.Config{opts.Namespace: {}},
					Label: labels.SelectorFromSet(labels.Set{bindingserver.ReplicaLeaseLabel: "true"})},
			},
			// Only what is read from the cache is kept (cachetransform.go).
			DefaultTransform: cacheTransform(),
		},
		// Controller names must be unique per process; a control plane
		// restarted in-process (tests) registers the same names again.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		// Token Secrets are read by name from the API server, never cached:
		// caching would need list/watch on every Secret in the cluster.
		// Unstructured reads are served from the cache too: the binding
		// controller's TrainJob (watched unstructured, For) would otherwise
		// be a live GET per reconcile, one of its costliest calls in a burst
		// (bench/controller). Every other unstructured read (JobSets, CRDs)
		// goes through the API reader on purpose: through this client it
		// would start an informer, and need list/watch, for its kind.
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}, Unstructured: true}},
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	guardCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err = checkFSReplicas(guardCtx, mgr.GetAPIReader(), opts)
	cancel()
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{Manager: mgr, events: events, certsReady: make(chan struct{}), serving: make(chan struct{})}
	if err := setupCerts(mgr, opts, cp.certsReady); err != nil {
		return nil, err
	}

	//nolint:staticcheck // the core/v1 recorder on purpose: see eventRecorder
	recorder := eventRecorder{mgr.GetEventRecorderFor("tether")}
	registerWebhooks := func() {
		hookServer := mgr.GetWebhookServer()
		hookServer.Register(TrainJobWebhookPath, &webhook.Admission{Handler: &mutate.TrainJobHandler{
			Shapes: &mutate.CRDShapes{Reader: mgr.GetAPIReader()},
			// Worker ids are MACed with the serving key: every replica mounts the same one.
			Mutator: mutate.TrainJobMutator{Key: lastGoodFile(filepath.Join(opts.CertDir, "tls.key"))},
		}})
		hookServer.Register(JobSetWebhookPath, &webhook.Admission{Handler: &mutate.JobSetHandler{}})
		// The pod webhook, called for every pod of every bound job, serves
		// its reviews itself (mutate.PodHandler.ServeHTTP: cheaper decoding).
		hookServer.Register(PodWebhookPath, &mutate.PodHandler{
			Injector:  mutate.PodInjector{Sidecar: opts.sidecarConfig()},
			TrainJobs: mgr.GetClient(),
			Live:      mgr.GetAPIReader(),
			Recorder:  recorder,
		})
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &tetherv1.WorkerBinding{}, bindingserver.TokenHashIndex,
		bindingserver.IndexTokenHash); err != nil {
		return nil, err
	}
	// The replica's Lease is renewed against the API server, never through
	// the cache (a renewal must not act on a stale copy).
	leaseClient, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	replica := opts.ReplicaName
	if replica == "" {
		host, _ := os.Hostname()
		replica = bindingserver.ReplicaLeaseName(host)
	}
	bindingServer := bindingserver.New(bindingserver.Options{
		Addr: opts.BindingAddr, CertDir: opts.CertDir,
		StatusInterval: opts.StatusInterval, MissedHeartbeats: opts.MissedHeartbeats,
		LivenessWriteInterval: opts.LivenessWriteInterval, StatusWriteRate: opts.StatusWriteRate,
		Lease: bindingserver.LeaseOptions{Client: leaseClient, Namespace: opts.Namespace, Name: replica, Duration: opts.ReplicaLeaseDuration},
	}, mgr.GetCache(), mgr.GetAPIReader(), mgr.GetClient(), mgr.GetLogger().WithName("binding"), recorder)
	backend, err := artifactBackend(opts, mgr.GetLogger().WithName("artifacts"))
	if err != nil {
		return nil, err
	}
	artifacts := bindingServer.EnableArtifacts(backend, store.DirectOptions{Disabled: !opts.ArtifactDirectUpload})
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	// Orchestrators read artifacts with their own Kubernetes identity (docs/orchestrator.md).
	bindingServer.EnableArtifactReads(backend, bindingserver.KubeReviewer{Clientset: clientset}, opts.PresignTTL)
	logSource := opts.LogSource
	if logSource == nil {
		logSource = controller.KubeletLogs(clientset)
	}

	// Metrics are registered while the control plane runs, so a control
	// plane restarted in the same process (tests) exports its own.
	collectors := append(append(mutate.Collectors(), bindingServer.Metrics().Collectors()...), &controller.PhaseCollector{Cache: mgr.GetCache(), Elected: mgr.Elected()},
		&CertExpiryCollector{CertDir: opts.CertDir})
	if err := mgr.Add(everyReplica(func(ctx context.Context) error {
		var registered []prometheus.Collector
		for _, c := range collectors {
			err := metrics.Registry.Register(c)
			var already prometheus.AlreadyRegisteredError
			switch {
			case errors.As(err, &already):
				// A second control plane in this process (a test): the
				// first one's series are exported.
			case err != nil:
				return fmt.Errorf("registering metrics: %w", err)
			default:
				registered = append(registered, c)
			}
		}
		<-ctx.Done()
		for _, c := range registered {
			metrics.Registry.Unregister(c)
		}
		return nil
	})); err != nil {
		return nil, err
	}

	// The webhook and binding servers read their certificate when they start:
	// start them only once the rotator has written one (at once in external mode).
	if err := mgr.Add(everyReplica(func(ctx context.Context) error {
		select {
		case <-cp.certsReady:
		case <-ctx.Done():
			return nil
		}
		// Ready means able to answer: the pod webhook reads TrainJobs'
		// metadata from the cache, whose informer would otherwise start
		// on the first admission and could time it out (seen in the e2e
		// rolling restart as a denied pod and a FailedCreate).
		if err := syncCaches(ctx, mgr.GetCache()); err != nil {
			return err
		}
		registerWebhooks()
		close(cp.serving)
		if opts.BindingAddr == "0" {
			return nil
		}
		return bindingServer.Start(ctx)
	})); err != nil {
		return nil, err
	}

	if err := mgr.Add(&mutate.InjectionReporter{Cache: mgr.GetCache(), TrainJobs: mgr.GetClient(), Recorder: recorder}); err != nil {
		return nil, err
	}

	caFile := opts.caBundleFile()
	if err := (&controller.BindingReconciler{
		Client:   mgr.GetClient(),
		Secrets:  mgr.GetAPIReader(),
		Live:     mgr.GetAPIReader(),
		Scheme:   scheme,
		CABundle: lastGoodFile(caFile),
		Events:   recorder,

		StatusInterval:   opts.StatusInterval,
		MissedHeartbeats: opts.MissedHeartbeats,
		Leases: &controller.ReplicaLeases{Client: mgr.GetClient(), Namespace: opts.Namespace,
			Selector: client.MatchingLabels{bindingserver.ReplicaLeaseLabel: "true"}, Self: replica},
		ArtifactGrace: opts.ArtifactGrace,
		TokenOverlap:  opts.TokenOverlap,
		Pending:       artifacts,
		Manifests:     artifacts,
		Logs:          &controller.LogArchiver{Source: logSource, Store: backend, MaxBytes: opts.LogCapBytes},
		Claims:        &controller.JobIDClaims{Namespace: opts.Namespace, Reader: mgr.GetAPIReader(), Writer: mgr.GetClient()},
	}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the binding controller: %w", err)
	}
	if err := (&controller.OrphanReconciler{Client: mgr.GetClient(), Live: mgr.GetAPIReader(), Events: recorder, Pending: artifacts}).
		SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the orphaned-binding controller: %w", err)
	}

	if err := (&controller.TrainerStatusReconciler{Client: mgr.GetClient(), Live: mgr.GetAPIReader(), Off: opts.TrainerStatus == "off"}).
		SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the trainer-status controller: %w", err)
	}

	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("webhook", func(*http.Request) error { return cp.Ready() }); err != nil {
		return nil, err
	}
	return cp, nil
}

// everyReplica is a runnable that runs on every replica, leader or not.
type everyReplica func(ctx context.Context) error

func (f everyReplica) Start(ctx context.Context) error { return f(ctx) }
func (everyReplica) NeedLeaderElection() bool          { return false }

// setupCerts arranges the serving certificate and closes ready when it is in place.
func setupCerts(mgr ctrl.Manager, opts Options, ready chan struct{}) error {
	if opts.CertMode == CertModeExternal {
		close(ready)
		return nil
	}
	svc := opts.ServiceName + "." + opts.Namespace + ".svc"
	return rotator.AddRotator(mgr, &rotator.CertRotator{
		SecretKey:      types.NamespacedName{Namespace: opts.Namespace, Name: opts.CertSecret},
		CertDir:        opts.CertDir,
		CAName:         "tether-ca",
		CAOrganization: "tether",
		DNSName:        svc,
		ExtraDNSNames:  append([]string{svc + ".cluster.local", opts.ServiceName + "." + opts.Namespace, opts.ServiceName}, opts.ExtraDNSNames...),
		IsReady:        ready,
		Webhooks:       []rotator.WebhookInfo{{Name: opts.WebhookConfig, Type: rotator.Mutating}},
		// Every replica serves webhooks, so every replica keeps the
		// certificate fresh; writes to the Secret are conflict-checked.
		RequireLeaderElection: false,
		FieldOwner:            "tether",
	})
}

// Start runs the control plane until ctx ends, then stops its Event
// broadcaster.
func (cp *ControlPlane) Start(ctx context.Context) error {
	defer shutdownEvents(cp.events)
	return cp.Manager.Start(ctx)
}

// Run builds and starts the control plane until ctx ends.
func Run(ctx context.Context, cfg *rest.Config, opts Options) error {
	cp, err := New(cfg, opts)
	if err != nil {
		return err
	}
	return cp.Start(ctx)
}

// syncCaches starts the informers the webhooks read (TrainJob metadata) and
// waits until every informer of the cache has synced. A cancelled ctx (the
// replica stopping) is not an error.
func syncCaches(ctx context.Context, c cache.Cache) error {
	tj := &metav1.PartialObjectMetadata{}
	tj.SetGroupVersionKind(trainjob.GVK)
	if _, err := c.GetInformer(ctx, tj); err != nil && ctx.Err() == nil {
		return fmt.Errorf("starting the TrainJob metadata informer: %w", err)
	}
	if !c.WaitForCacheSync(ctx) && ctx.Err() == nil {
		return errors.New("the control plane's caches did not sync")
	}
	return nil
}

// metricsOptions serves /metrics as Kubebuilder-scaffolded operators do:
// HTTPS, and only to a caller the API server authenticates and authorizes
// for get on /metrics (controller-runtime's filter: a TokenReview and a
// SubjectAccessReview per new token, cached for a minute).
func metricsOptions(opts Options) metricsserver.Options {
	o := metricsserver.Options{BindAddress: opts.MetricsAddr}
	if opts.MetricsSecure {
		o.SecureServing = true
		o.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	return o
}
