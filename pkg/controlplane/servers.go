package controlplane

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/tether-dev/tether/pkg/mutate"
	"github.com/tether-dev/tether/pkg/namespaceid"
	"github.com/tether-dev/tether/pkg/trainjob"
)

// Webhook paths; manifests/ points the MutatingWebhookConfiguration at them.
const (
	TrainJobWebhookPath = "/mutate-trainjob"
	JobSetWebhookPath   = "/mutate-jobset"
	PodWebhookPath      = "/mutate-pod"
)

// servers starts the webhook and binding servers on every replica. They
// read their certificate when they start: only once the rotator has written
// one (at once in external mode).
func (a *assembly) servers() error {
	return a.mgr.Add(everyReplica(func(ctx context.Context) error {
		select {
		case <-a.cp.certsReady:
		case <-ctx.Done():
			return nil
		}
		// Ready means able to answer: the pod webhook reads TrainJobs'
		// metadata from the cache, whose informer would otherwise start
		// on the first admission and could time it out (seen in the e2e
		// rolling restart as a denied pod and a FailedCreate).
		if err := syncCaches(ctx, a.mgr.GetCache()); err != nil {
			return err
		}
		a.registerWebhooks()
		close(a.cp.serving)
		if a.opts.BindingAddr == "0" {
			return nil
		}
		return a.binding.Start(ctx)
	}))
}

// registerWebhooks registers the three admission webhooks on the manager's
// webhook server.
func (a *assembly) registerWebhooks() {
	mgr := a.mgr
	hookServer := a.webhookServer()
	hookServer.Register(TrainJobWebhookPath, &webhook.Admission{Handler: &mutate.TrainJobHandler{
		Shapes: &mutate.CRDShapes{Reader: mgr.GetAPIReader()},
		// Worker ids are MACed with the serving key: every replica mounts the same one.
		Mutator: mutate.TrainJobMutator{Key: lastGoodFile(filepath.Join(a.opts.CertDir, "tls.key")),
			NamespaceUID: namespaceUIDReader(mgr.GetAPIReader())},
	}})
	hookServer.Register(JobSetWebhookPath, &webhook.Admission{Handler: &mutate.JobSetHandler{}})
	if a.aggregatedReads != nil {
		for _, p := range readAPIPaths {
			hookServer.Register(p, a.aggregatedReads)
		}
	}
	// The pod webhook, called for every pod of every bound job, serves
	// its reviews itself (mutate.PodHandler.ServeHTTP: cheaper decoding).
	hookServer.Register(PodWebhookPath, &mutate.PodHandler{
		Injector:  mutate.PodInjector{Sidecar: a.opts.sidecarConfig()},
		TrainJobs: mgr.GetClient(),
		Live:      mgr.GetAPIReader(),
		Recorder:  a.recorder,
	})
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

// namespaceUIDReader reads a namespace's UID for the tag of the scoped job
// ids the TrainJob webhook generates and checks: from the API server, and
// remembered for namespaceUIDTTL (namespaceid.Recent: the controller reads
// it live again before it binds, so a remembered UID of a namespace made
// again meanwhile binds nothing). Bounded well within the webhook's
// timeout: past it, the webhook generates a claimed id instead, or leaves
// a given id to the controller.
func namespaceUIDReader(live client.Reader) func(context.Context, string) (string, error) {
	recent := &namespaceid.Recent{Live: live, TTL: namespaceUIDTTL}
	return func(ctx context.Context, ns string) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, namespaceReadTimeout)
		defer cancel()
		uid, err := recent.UID(ctx, ns)
		return string(uid), err
	}
}

const (
	// namespaceReadTimeout bounds the TrainJob webhook's namespace read
	// (the webhook's own timeout is 5 s).
	namespaceReadTimeout = 2 * time.Second
	// namespaceUIDTTL is how long the webhook remembers a namespace's UID.
	namespaceUIDTTL = 30 * time.Second
)
