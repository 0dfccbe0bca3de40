package controlplane

import (
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/controlplane/internal/tuning"
	"github.com/tether-dev/tether/pkg/trainjob"
)

// LeaderElectionID names the Lease (in the control plane's namespace) whose
// holder runs the controllers; every replica serves the webhooks and the
// binding server.
const LeaderElectionID = "tether-control-plane.tether.dev"

// manager creates the controller-runtime manager every other part is added
// to, and the ControlPlane around it.
func (a *assembly) manager() error {
	opts := a.opts
	mgr, err := ctrl.NewManager(a.cfg, ctrl.Options{
		Scheme:                  a.scheme,
		Metrics:                 metricsOptions(opts),
		HealthProbeBindAddress:  opts.HealthAddr,
		LeaderElection:          opts.LeaderElect,
		LeaderElectionID:        LeaderElectionID,
		LeaderElectionNamespace: opts.Namespace,
		// A replica that stops hands the lease over at once.
		LeaderElectionReleaseOnCancel: true,
		// The webhook server is added to the manager on first use
		// (GetWebhookServer), which waits for the certificate.
		WebhookServer: webhook.NewServer(webhookOptions(opts)),
		Cache: cache.Options{
			ByObject: map[client.Object]cache.ByObject{
				// Only trainer pods are cached: the controller needs nothing of any other pod.
				&corev1.Pod{}: {Label: trainjob.TrainerPodSelector()},
				// Only the binding-server replicas' Leases, in our namespace.
				&coordinationv1.Lease{}: {Namespaces: map[string]cache.Config{opts.Namespace: {}},
					Label: labels.SelectorFromSet(labels.Set{names.ReplicaLeaseLabel: "true"})},
			},
			// Only what is read from the cache is kept.
			DefaultTransform: tuning.CacheTransform(),
		},
		// Controller names must be unique per process; a control plane
		// restarted in-process (tests) registers the same names again.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		// Token Secrets are read by name from the API server, never cached:
		// caching would need list/watch on every Secret in the cluster.
		// Unstructured reads are served from the cache too: the binding
		// controller's TrainJob (watched unstructured, For) would otherwise
		// be a live GET per reconcile, one of its costliest calls in a burst
		// (test/performance/controller). Every other unstructured read (JobSets, CRDs)
		// goes through the API reader on purpose: through this client it
		// would start an informer, and need list/watch, for its kind.
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}, Unstructured: true}},
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	a.mgr = mgr
	a.cp = &ControlPlane{Manager: mgr, events: a.events, certsReady: make(chan struct{}), serving: make(chan struct{}),
		drain: &drain{delay: a.opts.ShutdownDelay}}
	// Tether's own broadcaster, not the manager's (startEventRecorder).
	a.recorder, a.eventSink, err = startEventRecorder(a.events, a.cfg, mgr.GetHTTPClient(), a.scheme, mgr.GetLogger().WithName("events"))
	a.cp.eventSink = a.eventSink
	return err
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

// webhookOptions are the webhook listener's; with the read API or a
// webhook client CA it also requests (not requires) client certificates,
// verified per path (readapi.go, webhookclient.go).
func webhookOptions(opts Options) webhook.Options {
	o := webhook.Options{Host: opts.WebhookHost, Port: opts.WebhookPort, CertDir: opts.CertDir}
	if opts.ReadAPI || opts.WebhookClientCA != "" {
		o.TLSOpts = append(o.TLSOpts, requestClientCerts)
	}
	return o
}
