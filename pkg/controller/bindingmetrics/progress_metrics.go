package bindingmetrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

var (
	descProgressFraction = prometheus.NewDesc("tether_job_progress_fraction",
		"How far the job is (status.progress.fraction, 0 to 1): the worker's report, or the trainer's native trainerStatus.progressPercentage.",
		[]string{"namespace", "trainjob"}, nil)
	descProgressStatusStep = prometheus.NewDesc("tether_job_progress_status_step",
		"The job's step as its WorkerBinding shows it (status.progress.step): the worker's report, or the trainer's native trainerStatus metric \"step\".",
		[]string{"namespace", "trainjob"}, nil)
)

// progressMetrics are a binding's status.progress as gauges, whoever
// reported it: so a trainer that reports only natively (Trainer's status
// server) still has its progress in Tether's metrics. PhaseCollector emits
// them in its one pass over the bindings.
func progressMetrics(ch chan<- prometheus.Metric, wb *tetherv1.WorkerBinding) {
	p := wb.Status.Progress
	if p == nil {
		return
	}
	if f, err := strconv.ParseFloat(p.Fraction, 64); err == nil {
		ch <- prometheus.MustNewConstMetric(descProgressFraction, prometheus.GaugeValue, f, wb.Namespace, wb.Spec.TrainJobName)
	}
	if p.Step != nil {
		ch <- prometheus.MustNewConstMetric(descProgressStatusStep, prometheus.GaugeValue, float64(*p.Step), wb.Namespace, wb.Spec.TrainJobName)
	}
}
