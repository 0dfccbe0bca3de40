package monitoring

import (
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

var descHelp = regexp.MustCompile(`help: "((?:[^"\\]|\\.)*)"`)

// TestMetricsPassPromlint gathers every collector the control plane
// registers and runs promlint on what a scrape returns: naming, units,
// _total on counters only, help text.
func TestMetricsPassPromlint(t *testing.T) {
	cs := collectors(t)
	reg := prometheus.NewPedanticRegistry()
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			t.Fatal(err)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	gathered := map[string]bool{}
	for _, mf := range mfs {
		gathered[mf.GetName()] = true
	}
	// The binding server's per-node series come from sessions only a
	// registered sidecar opens (test/integration/binding scrapes them); here
	// they are linted by name and help through their Descs' gauge type,
	// which is how jobCollector emits them.
	var missing []string
	for name := range exportedNames(t, cs) {
		if !gathered[name] {
			missing = append(missing, name)
		}
	}
	for _, name := range missing {
		switch name {
		case "tether_job_heartbeat_age_seconds", "tether_job_session_connected", "tether_job_uploaded_bytes",
			"tether_job_progress_step", "tether_job_progress_epoch", "tether_job_progress_loss", "tether_job_progress_ratio":
		default:
			t.Errorf("%s is described but a scrape returned no series of it: give the test one", name)
		}
	}
	for _, d := range descs(t, cs) {
		name, help := descName(t, d), descHelp.FindStringSubmatch(d.String())[1]
		for _, m := range missing {
			if m == name {
				mfs = append(mfs, &dto.MetricFamily{Name: proto.String(name), Help: proto.String(help), Type: dto.MetricType_GAUGE.Enum(),
					Metric: []*dto.Metric{{Gauge: &dto.Gauge{Value: proto.Float64(1)}}}})
			}
		}
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	t.Logf("%d metric families linted (%d described, %d only by Desc)", len(mfs), len(exportedNames(t, cs)), len(missing))
}
