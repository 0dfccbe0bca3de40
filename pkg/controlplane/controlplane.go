package controlplane

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/artifactreads"
	"github.com/tether-dev/tether/pkg/artifactstore/s3store"
	"github.com/tether-dev/tether/pkg/artifactstore/store"
	"github.com/tether-dev/tether/pkg/bindingserver"
	"github.com/tether-dev/tether/pkg/upload"
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
	eventSink  *queuedEventSink
	certsReady chan struct{}
	// serving is closed once the webhooks are registered on the server.
	serving chan struct{}
	// drain keeps the replica serving, unready, for --shutdown-delay once
	// told to stop.
	drain *drain
}

// Ready reports whether the serving certificate is in place and the webhook
// server is listening: the Service then routes admissions only to replicas
// that can answer them.
func (cp *ControlPlane) Ready() error {
	if err := cp.drain.ready(); err != nil {
		return err
	}
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
	events := newEventBroadcaster()
	a := &assembly{cfg: cfg, opts: opts, scheme: NewScheme(), events: events}
	defer func() {
		if err != nil {
			shutdownEvents(events, a.eventSink)
		}
	}()
	// The parts, in the order they depend on each other: each adds one
	// thing to the manager and may use what an earlier one built.
	for _, part := range []func(*assembly) error{
		(*assembly).manager,           // manager.go
		(*assembly).guardFSReplicas,   // fsguard.go
		(*assembly).certs,             // certs.go
		(*assembly).bindingServer,     // bindingserver.go
		(*assembly).artifacts,         // bindingserver.go
		(*assembly).readAPI,           // readapi.go
		(*assembly).metrics,           // metrics.go
		(*assembly).servers,           // servers.go
		(*assembly).injectionReporter, // controllers.go
		(*assembly).bindingController, // controllers.go
		(*assembly).orphanController,  // controllers.go
		(*assembly).uploadSweeper,     // controllers.go
		(*assembly).trainerStatus,     // controllers.go
		(*assembly).probes,            // controlplane.go
	} {
		if err := part(a); err != nil {
			return nil, err
		}
	}
	return a.cp, nil
}

// assembly is what New's parts share while they build the control plane.
type assembly struct {
	cfg    *rest.Config
	opts   Options
	scheme *runtime.Scheme
	events record.EventBroadcaster
	// eventSink sends the broadcaster's Events (startEventRecorder).
	eventSink *queuedEventSink

	mgr      ctrl.Manager
	cp       *ControlPlane
	recorder eventRecorder
	// replica is this replica's Lease name.
	replica string
	binding *bindingserver.Server
	backend upload.Backend
	// artifactStore is the replica's one artifact store, built by
	// artifacts: the binding server's endpoint and the controllers take it.
	artifactStore *store.Store
	// probesStore says the store is S3, probed as the replica starts;
	// storeCaps is what it showed the probe (nil until then).
	probesStore bool
	storeCaps   atomic.Pointer[s3store.Capabilities]
	clientset   *kubernetes.Clientset
	// reads are the read endpoint's dependencies; aggregatedReads its aggregated
	// API's handler (nil without --read-api).
	reads           artifactreads.Options
	aggregatedReads http.Handler
}

// probes adds the health and readiness checks.
func (a *assembly) probes() error {
	if err := a.mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	return a.mgr.AddReadyzCheck("webhook", func(*http.Request) error { return a.cp.Ready() })
}

// everyReplica is a runnable that runs on every replica, leader or not.
type everyReplica func(ctx context.Context) error

func (f everyReplica) Start(ctx context.Context) error { return f(ctx) }
func (everyReplica) NeedLeaderElection() bool          { return false }

// Start runs the control plane until ctx ends and the shutdown delay has
// passed (readiness failing meanwhile), then stops its Event broadcaster.
func (cp *ControlPlane) Start(ctx context.Context) error {
	defer shutdownEvents(cp.events, cp.eventSink)
	ctx, cancel := cp.drain.run(ctx)
	defer cancel()
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
