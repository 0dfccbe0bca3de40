package controlplane

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/tether-dev/tether/pkg/artifactstore/endpoint"
	"github.com/tether-dev/tether/pkg/controller/bindingmetrics"
	"github.com/tether-dev/tether/pkg/mutate"
)

// metrics registers the control plane's collectors while it runs, so a
// control plane restarted in the same process (tests) exports its own.
func (a *assembly) metrics() error {
	collectors := append(append(mutate.Collectors(), a.binding.Metrics().Collectors()...), &bindingmetrics.PhaseCollector{Cache: a.mgr.GetCache(), Elected: a.mgr.Elected()},
		&CertExpiryCollector{CertDir: a.opts.CertDir}, a.eventSink.dropped)
	if a.probesStore {
		collectors = append(collectors, newCapabilityCollector(&a.storeCaps))
	}
	collectors = append(collectors, manifestMemoryCollector{endpoint.ManifestMemory})
	return a.mgr.Add(everyReplica(func(ctx context.Context) error {
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
	}))
}
