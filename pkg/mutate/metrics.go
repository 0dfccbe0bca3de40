package mutate

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Admission latency is already published per webhook path by controller-runtime
// (controller_runtime_webhook_latency_seconds); these count decisions.
var (
	podAdmissions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tether_pod_admissions_total",
		Help: "Trainer pods seen by the pod webhook, by outcome (patched: the sidecar patch was returned, the pod may still be refused by a later admission step; skipped; denied) and reason.",
	}, []string{"outcome", "reason"})

	trainJobAdmissions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tether_trainjob_admissions_total",
		Help: "TrainJobs seen by the TrainJob webhook, by outcome (stamped, unchanged, denied).",
	}, []string{"outcome"})

	podsInjected = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tether_pods_injected_total",
		Help: "Trainer pods created with the Tether sidecar, counted by the leader when its pod informer first sees them.",
	})

	jobSetAdmissions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tether_jobset_admissions_total",
		Help: "Bound jobs' JobSets seen by the JobSet webhook, by outcome (labeled: the trainer pod template got tether.dev/bind; unchanged; denied).",
	}, []string{"outcome"})
)

// deniedReasons are the pod webhook's denial reasons (outcome.go).
var deniedReasons = []Reason{DenyMissingIdentity, DenyInvalidSettings, DenyNoTrainerContainer, DenyArtifactMount,
	DenyNameConflict, DenyStaleInjection, DenyTrainJobLookup, DenyUndecodable, DenyNodeRank, DenyNoServiceAccount,
	DenySidecarDeclaration, DenySidecarResources}

// The denied series exist at 0 from the start: Prometheus's increase() of a
// series that first appears at 1 is 0, so without them a replica's first
// denial (a TrainJob refused once) would never raise TetherAdmissionDenied
// (test/install's TestPrometheusScrapesAndAlerts).
func init() {
	trainJobAdmissions.WithLabelValues("denied")
	jobSetAdmissions.WithLabelValues("denied")
	for _, r := range deniedReasons {
		podAdmissions.WithLabelValues(string(OutcomeDenied), string(r))
	}
}

// Collectors returns the webhooks' collectors, for the control plane to
// register (as it registers the binding server's and the controller's).
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{podAdmissions, trainJobAdmissions, jobSetAdmissions, podsInjected}
}
