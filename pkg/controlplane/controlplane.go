package controlplane

import (
	"context"
	"fmt"
	"net/http"
	"os"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/controller"
	"github.com/tether-dev/tether/pkg/jobconfig"
	"github.com/tether-dev/tether/pkg/mutate"
)

// Webhook paths; manifests/ points the MutatingWebhookConfiguration at them.
const (
	TrainJobWebhookPath = "/mutate-trainjob"
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

// New builds the control plane's manager with everything registered on it.
// Start it with mgr.Start.
func New(cfg *rest.Config, opts Options) (ctrl.Manager, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	scheme := NewScheme()
	// Only trainer pods are cached: the controller needs nothing of any other pod.
	trainerPods, err := labels.NewRequirement(jobconfig.ReplicatedJobNameLabel, selection.Equals, []string{jobconfig.TrainerReplicatedJob})
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: opts.MetricsAddr},
		HealthProbeBindAddress:  opts.HealthAddr,
		LeaderElection:          opts.LeaderElect,
		LeaderElectionID:        "tether-control-plane.tether.dev",
		LeaderElectionNamespace: opts.Namespace,
		// Webhooks stop accepting only after in-flight admissions finish.
		LeaderElectionReleaseOnCancel: true,
		WebhookServer:                 webhook.NewServer(webhook.Options{Host: opts.WebhookHost, Port: opts.WebhookPort, CertDir: opts.CertDir}),
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: {Label: labels.NewSelector().Add(*trainerPods)},
		}},
		// Token Secrets are read by name from the API server, never cached:
		// caching would need list/watch on every Secret in the cluster.
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}

	certsReady := make(chan struct{})
	if err := setupCerts(mgr, opts, certsReady); err != nil {
		return nil, err
	}

	recorder := mgr.GetEventRecorder("tether")
	hookServer := mgr.GetWebhookServer()
	hookServer.Register(TrainJobWebhookPath, &webhook.Admission{Handler: &mutate.TrainJobHandler{}})
	hookServer.Register(PodWebhookPath, &webhook.Admission{Handler: &mutate.PodHandler{
		Injector:  mutate.PodInjector{Sidecar: opts.sidecarConfig()},
		TrainJobs: mgr.GetClient(),
		Recorder:  recorder,
	}})

	caFile := opts.caBundleFile()
	if err := (&controller.BindingReconciler{
		Client:   mgr.GetClient(),
		Secrets:  mgr.GetAPIReader(),
		Scheme:   scheme,
		CABundle: func() ([]byte, error) { return os.ReadFile(caFile) },
		Events:   recorder,
	}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the binding controller: %w", err)
	}

	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	// Ready once certificates are in place and the webhook server listens:
	// the Service then routes admissions only to replicas that can answer.
	if err := mgr.AddReadyzCheck("certs", func(*http.Request) error {
		select {
		case <-certsReady:
			return nil
		default:
			return fmt.Errorf("serving certificate not ready")
		}
	}); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("webhook", hookServer.StartedChecker()); err != nil {
		return nil, err
	}
	return mgr, nil
}

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
		ExtraDNSNames:  []string{svc + ".cluster.local", opts.ServiceName + "." + opts.Namespace, opts.ServiceName},
		IsReady:        ready,
		Webhooks:       []rotator.WebhookInfo{{Name: opts.WebhookConfig, Type: rotator.Mutating}},
		// Every replica serves webhooks, so every replica keeps the
		// certificate fresh; writes to the Secret are conflict-checked.
		RequireLeaderElection: false,
		FieldOwner:            "tether",
	})
}

// Run builds and starts the control plane until ctx ends.
func Run(ctx context.Context, cfg *rest.Config, opts Options) error {
	mgr, err := New(cfg, opts)
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
}
