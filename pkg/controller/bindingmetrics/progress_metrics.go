package bindingmetrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/lifecycle"
)

var (
	descProgressFraction = prometheus.NewDesc("tether_job_progress_fraction",
		"How far the job is (status.progress.fraction, 0 to 1): the worker's report, or the trainer's native trainerStatus.progressPercentage.",
		[]string{"namespace", "trainjob"}, nil)
	descProgressStatusStep = prometheus.NewDesc("tether_job_progress_status_step",
		"The job's step as its WorkerBinding shows it (status.progress.step): the worker's report, or the trainer's native trainerStatus metric \"step\".",
		[]string{"namespace", "trainjob"}, nil)
	descStalled = prometheus.NewDesc("tether_job_stalled",
		"1 while the job's trainer is stalled: heartbeats go on but its step has not advanced for the stall window (condition Progressing=False, reason TrainerStalled); 0 otherwise.",
		[]string{"namespace", "trainjob"}, nil)
	descLastStep = prometheus.NewDesc("tether_job_last_step_timestamp_seconds",
		"When the job's step last advanced (status.progress.lastStepTime), in Unix seconds; absent until a step is reported.",
		[]string{"namespace", "trainjob"}, nil)
	descLastCheckpoint = prometheus.NewDesc("tether_job_last_checkpoint_timestamp_seconds",
		"When the job's newest checkpoint with every file verified was complete (status.lastCheckpoint.time), in Unix seconds; absent until one is.",
		[]string{"namespace", "trainjob"}, nil)
)

// progressDescs are the descriptions progressMetrics emits.
var progressDescs = []*prometheus.Desc{descProgressFraction, descProgressStatusStep, descStalled, descLastStep, descLastCheckpoint}

// progressMetrics are a binding's status.progress as gauges, whoever
// reported it: so a trainer that reports only natively (Trainer's status
// server) still has its progress in Tether's metrics. PhaseCollector emits
// them in its one pass over the bindings.
func progressMetrics(ch chan<- prometheus.Metric, wb *tetherv1.WorkerBinding) {
	stalled := 0.0
	if lifecycle.Stalled(&wb.Status) {
		stalled = 1
	}
	ch <- prometheus.MustNewConstMetric(descStalled, prometheus.GaugeValue, stalled, wb.Namespace, wb.Spec.TrainJobName)
	if c := wb.Status.LastCheckpoint; c != nil {
		ch <- prometheus.MustNewConstMetric(descLastCheckpoint, prometheus.GaugeValue, float64(c.Time.Unix()), wb.Namespace, wb.Spec.TrainJobName)
	}
	p := wb.Status.Progress
	if p == nil {
		return
	}
	if p.LastStepTime != nil {
		ch <- prometheus.MustNewConstMetric(descLastStep, prometheus.GaugeValue, float64(p.LastStepTime.Unix()), wb.Namespace, wb.Spec.TrainJobName)
	}
	if f, err := strconv.ParseFloat(p.Fraction, 64); err == nil {
		ch <- prometheus.MustNewConstMetric(descProgressFraction, prometheus.GaugeValue, f, wb.Namespace, wb.Spec.TrainJobName)
	}
	if p.Step != nil {
		ch <- prometheus.MustNewConstMetric(descProgressStatusStep, prometheus.GaugeValue, float64(*p.Step), wb.Namespace, wb.Spec.TrainJobName)
	}
}
