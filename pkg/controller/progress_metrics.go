package controller

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

// ProgressCollector reports every binding's status.progress at scrape time,
// whoever reported it: so a trainer that reports only natively (Trainer's
// status server) still has its progress in Tether's metrics. The elected
// replica reports.
type ProgressCollector struct {
	Cache   client.Reader
	Elected <-chan struct{}
}

// Describe implements prometheus.Collector.
func (c *ProgressCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descProgressFraction
	ch <- descProgressStatusStep
}

// Collect implements prometheus.Collector.
func (c *ProgressCollector) Collect(ch chan<- prometheus.Metric) {
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
		p := wb.Status.Progress
		if p == nil {
			continue
		}
		if f, err := strconv.ParseFloat(p.Fraction, 64); err == nil {
			ch <- prometheus.MustNewConstMetric(descProgressFraction, prometheus.GaugeValue, f, wb.Namespace, wb.Spec.TrainJobName)
		}
		if p.Step != nil {
			ch <- prometheus.MustNewConstMetric(descProgressStatusStep, prometheus.GaugeValue, float64(*p.Step), wb.Namespace, wb.Spec.TrainJobName)
		}
	}
}
