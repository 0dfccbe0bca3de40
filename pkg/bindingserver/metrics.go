package bindingserver

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the binding server's Prometheus collectors. Per-job series are
// produced at scrape time from the workers this replica holds, so a job's
// series disappear as soon as its binding ends here; no stale label sets are
// left behind.
type metrics struct {
	registrations  prometheus.Counter
	refusals       *prometheus.CounterVec
	sessionsOpened prometheus.Counter
	sessionsClosed *prometheus.CounterVec
	replaced       prometheus.Counter
	heartbeats     prometheus.Counter
	heartbeatsLost prometheus.Counter
	commands       *prometheus.CounterVec
	pingRTT        prometheus.Histogram
	artifactFiles  prometheus.Counter
	artifactBytes  prometheus.Counter
	artifactDirect prometheus.Counter
	attempts       *prometheus.CounterVec

	jobs *jobCollector
}

func newMetrics(h *hub, now func() time.Time) *metrics {
	return &metrics{
		registrations: prometheus.NewCounter(prometheus.CounterOpts{Name: "tether_binding_registrations_total",
			Help: "Successful worker registrations."}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tether_binding_refusals_total",
			Help: "Requests and sessions the binding server refused or closed, by reason."}, []string{"reason"}),
		sessionsOpened: prometheus.NewCounter(prometheus.CounterOpts{Name: "tether_binding_sessions_opened_total",
			Help: "Heartbeat sessions opened."}),
		sessionsClosed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tether_binding_sessions_closed_total",
			Help: "Heartbeat sessions closed, by close reason."}, []string{"reason"}),
		replaced: prometheus.NewCounter(prometheus.CounterOpts{Name: "tether_binding_sessions_replaced_total",
			Help: "Sessions closed because a newer session of the same worker opened."}),
		heartbeats: prometheus.NewCounter(prometheus.CounterOpts{Name: "tether_binding_heartbeats_total",
			Help: "Heartbeats received."}),
		heartbeatsLost: prometheus.NewCounter(prometheus.CounterOpts{Name: "tether_binding_heartbeats_lost_total",
			Help: "Times a worker's heartbeat was declared lost."}),
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tether_binding_commands_total",
			Help: "Commands pushed to workers and their outcome (sent, acknowledged, failed)."}, []string{"command", "result"}),
		pingRTT: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tether_binding_heartbeat_rtt_seconds",
			Help:    "Round trip of the server's ping to a worker's sidecar and its pong.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}}),
		artifactFiles: prometheus.NewCounter(prometheus.CounterOpts{Name: "tether_artifacts_verified_files_total",
			Help: "Artifact objects stored and verified (ETag equal to the streamed MD5)."}),
		artifactBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "tether_artifacts_verified_bytes_total",
			Help: "Bytes of artifact objects stored and verified."}),
		artifactDirect: prometheus.NewCounter(prometheus.CounterOpts{Name: "tether_artifacts_direct_files_total",
			Help: "Artifact objects uploaded straight to the store through a presigned URL and committed (verified and promoted); also counted in tether_artifacts_verified_files_total."}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tether_binding_attempts_total",
			Help: "Attempts of bound jobs that started at a worker's registration, by what started them (Admission, Readmission, JobSetRestart, PodReplaced)."},
			[]string{"started_by"}),
		jobs: &jobCollector{hub: h, now: now},
	}
}

// Collectors returns everything to register.
func (m *metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.registrations, m.refusals, m.sessionsOpened, m.sessionsClosed, m.replaced,
		m.heartbeats, m.heartbeatsLost, m.commands, m.pingRTT, m.artifactFiles, m.artifactBytes, m.artifactDirect, m.attempts, m.jobs}
}

var (
	jobLabels = []string{"namespace", "trainjob"}
	// nodeLabels add the node's rank: every node of a job has its own worker.
	nodeLabels       = []string{"namespace", "trainjob", "node"}
	descHeartbeatAge = prometheus.NewDesc("tether_job_heartbeat_age_seconds",
		"Seconds since the node's worker last heartbeated (workers held by this replica).", nodeLabels, nil)
	descConnected = prometheus.NewDesc("tether_job_session_connected",
		"1 while the node's worker has an open session on this replica.", nodeLabels, nil)
	descStep = prometheus.NewDesc("tether_job_progress_step",
		"Last training step the job reported.", jobLabels, nil)
	descEpoch = prometheus.NewDesc("tether_job_progress_epoch",
		"Last epoch the job reported.", jobLabels, nil)
	descLoss = prometheus.NewDesc("tether_job_progress_loss",
		"Last loss the job reported.", jobLabels, nil)
	descFraction = prometheus.NewDesc("tether_job_progress_ratio",
		"Last progress fraction (0..1) the job reported.", jobLabels, nil)
	descUploaded = prometheus.NewDesc("tether_job_uploaded_bytes",
		"Bytes of artifacts the node's worker has had verified.", nodeLabels, nil)
)

// jobCollector emits per-job series from the hub at scrape time.
type jobCollector struct {
	hub *hub
	now func() time.Time
}

func (c *jobCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHeartbeatAge, descConnected, descStep, descEpoch, descLoss, descFraction, descUploaded} {
		ch <- d
	}
}

func (c *jobCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.now()
	for _, e := range c.hub.entries(nil) {
		st := e.snapshot()
		ns, tj, node := st.namespace, st.trainJob, strconv.Itoa(int(st.key.rank))
		if !st.lastHeartbeat.IsZero() {
			ch <- prometheus.MustNewConstMetric(descHeartbeatAge, prometheus.GaugeValue, now.Sub(st.lastHeartbeat).Seconds(), ns, tj, node)
		}
		connected := 0.0
		if st.connected {
			connected = 1
		}
		ch <- prometheus.MustNewConstMetric(descConnected, prometheus.GaugeValue, connected, ns, tj, node)
		ch <- prometheus.MustNewConstMetric(descUploaded, prometheus.GaugeValue, float64(st.uploadedBytes), ns, tj, node)
		// Progress is the job's: node 0's.
		if p := st.progress; p != nil && st.key.rank == 0 {
			if p.Step != nil {
				ch <- prometheus.MustNewConstMetric(descStep, prometheus.GaugeValue, float64(*p.Step), ns, tj)
			}
			if p.Epoch != nil {
				ch <- prometheus.MustNewConstMetric(descEpoch, prometheus.GaugeValue, *p.Epoch, ns, tj)
			}
			if p.Loss != nil {
				ch <- prometheus.MustNewConstMetric(descLoss, prometheus.GaugeValue, *p.Loss, ns, tj)
			}
			if p.Fraction != nil {
				ch <- prometheus.MustNewConstMetric(descFraction, prometheus.GaugeValue, *p.Fraction, ns, tj)
			}
		}
	}
}
