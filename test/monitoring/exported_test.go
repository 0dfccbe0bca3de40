package monitoring

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/bindingserver"
	"github.com/tether-dev/tether/pkg/controller/bindingmetrics"
	"github.com/tether-dev/tether/pkg/controlplane"
	"github.com/tether-dev/tether/pkg/mutate"
)

// collectors are the control plane's collectors, built as pkg/controlplane
// builds them, with one binding in the cache and a serving certificate on
// disk so that the scrape-time collectors have series to report.
func collectors(t *testing.T) []prometheus.Collector {
	t.Helper()
	c := fake.NewClientBuilder().WithScheme(controlplane.NewScheme()).WithObjects(&tetherv1.WorkerBinding{}).Build()
	wb := &tetherv1.WorkerBinding{}
	wb.Name, wb.Namespace, wb.Spec.TrainJobName = "wb", "ml", "llama"
	step := int64(5)
	now := metav1.Now()
	// For the progress, step and checkpoint gauges.
	wb.Status.Progress = &tetherv1.Progress{Step: &step, Fraction: "0.5", LastStepTime: &now}
	wb.Status.LastCheckpoint = &tetherv1.CheckpointStatus{Path: "checkpoint-5/", Step: 5, Time: now, Files: 3, Bytes: 1 << 20}
	if err := c.Create(t.Context(), wb); err != nil {
		t.Fatal(err)
	}
	elected := make(chan struct{})
	close(elected)
	srv := bindingserver.New(bindingserver.Options{}, c, c, c, logr.Discard(), &events.FakeRecorder{})
	dir := t.TempDir()
	writeCert(t, filepath.Join(dir, "tls.crt"), time.Now().Add(90*24*time.Hour))
	all := append(append(mutate.Collectors(), srv.Metrics().Collectors()...),
		&bindingmetrics.PhaseCollector{Cache: c, Elected: elected}, &controlplane.CertExpiryCollector{CertDir: dir}, controlplane.NewEventsDroppedCounter())
	// A vector has no series until a label set is used: give each one.
	for _, col := range all {
		switch v := col.(type) {
		case *prometheus.CounterVec:
			v.WithLabelValues(labelValues(t, v)...).Inc()
		case *prometheus.GaugeVec:
			v.WithLabelValues(labelValues(t, v)...).Set(1)
		case *prometheus.HistogramVec:
			v.WithLabelValues(labelValues(t, v)...).Observe(1)
		case prometheus.Histogram:
			v.Observe(0.01)
		}
	}
	return all
}

var variableLabels = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)

// labelValues is a value per variable label of a vector's one Desc.
func labelValues(t *testing.T, c prometheus.Collector) []string {
	t.Helper()
	ch := make(chan *prometheus.Desc, 1)
	c.Describe(ch)
	m := variableLabels.FindStringSubmatch((<-ch).String())
	if m == nil || m[1] == "" {
		return nil
	}
	n := len(regexp.MustCompile(`,`).FindAllString(m[1], -1)) + 1
	vals := make([]string, n)
	for i := range vals {
		vals[i] = "x"
	}
	return vals
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// descs are the Descs every collector describes.
func descs(t *testing.T, cs []prometheus.Collector) []*prometheus.Desc {
	t.Helper()
	var out []*prometheus.Desc
	for _, c := range cs {
		ch := make(chan *prometheus.Desc, 64)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			out = append(out, d)
		}
	}
	return out
}

func descName(t *testing.T, d *prometheus.Desc) string {
	t.Helper()
	m := fqName.FindStringSubmatch(d.String())
	if m == nil {
		t.Fatalf("no name in %s", d)
	}
	return m[1]
}

// exportedNames are the names every collector describes.
func exportedNames(t *testing.T, cs []prometheus.Collector) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, d := range descs(t, cs) {
		names[descName(t, d)] = true
	}
	if len(names) < 25 {
		t.Fatalf("only %d metric names described: %v", len(names), names)
	}
	return names
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
