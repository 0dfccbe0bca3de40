package bindingmetrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

var (
	phases    = []tetherv1.WorkerBindingPhase{tetherv1.PhasePending, tetherv1.PhaseRegistered, tetherv1.PhaseRunning, tetherv1.PhaseFinishing, tetherv1.PhaseSucceeded, tetherv1.PhaseFailed}
	descPhase = prometheus.NewDesc("tether_job_phase",
		"1 for the phase the job's WorkerBinding is in (one series per phase), reported by the elected replica.",
		[]string{"namespace", "trainjob", "phase"}, nil)
	descAttempt = prometheus.NewDesc("tether_job_attempt",
		"The job's current attempt (status.attempt): each Kueue re-admission, JobSet restart, replacement pod and in-place trainer restart starts the next.",
		[]string{"namespace", "trainjob"}, nil)
	descTrainerExits = prometheus.NewDesc("tether_job_trainer_exits",
		"Trainer container exits seen on every node of the job (status.trainerExits).",
		[]string{"namespace", "trainjob"}, nil)
	descNodes = prometheus.NewDesc("tether_job_nodes",
		"Nodes of the job that are bound (status.nodeCount; 0 until known).",
		[]string{"namespace", "trainjob"}, nil)
)

// PhaseCollector reports every binding's phase (and attempt, exits, nodes
// and progress, progress_metrics.go) at scrape time, in one pass over the
// cache, so a deleted binding's series disappear with it. Only the elected
// replica reports, so Prometheus sees each binding once.
type PhaseCollector struct {
	Cache   client.Reader
	Elected <-chan struct{}
}

// Describe implements prometheus.Collector.
func (c *PhaseCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range append([]*prometheus.Desc{descPhase, descAttempt, descTrainerExits, descNodes}, progressDescs...) {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *PhaseCollector) Collect(ch chan<- prometheus.Metric) {
	select {
	case <-c.Elected:
	default:
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var list tetherv1.WorkerBindingList
	if err := c.Cache.List(ctx, &list); err != nil {
		return
	}
	for i := range list.Items {
		wb := &list.Items[i]
		for _, p := range phases {
			v := 0.0
			if wb.Status.Phase == p {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descPhase, prometheus.GaugeValue, v, wb.Namespace, wb.Spec.TrainJobName, string(p))
		}
		ch <- prometheus.MustNewConstMetric(descAttempt, prometheus.GaugeValue, float64(wb.Status.Attempt), wb.Namespace, wb.Spec.TrainJobName)
		ch <- prometheus.MustNewConstMetric(descTrainerExits, prometheus.GaugeValue, float64(wb.Status.TrainerExits), wb.Namespace, wb.Spec.TrainJobName)
		ch <- prometheus.MustNewConstMetric(descNodes, prometheus.GaugeValue, float64(wb.Status.NodeCount), wb.Namespace, wb.Spec.TrainJobName)
		progressMetrics(ch, wb)
	}
}
