package controlplane

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tether-dev/tether/pkg/artifactstore/endpoint"
	"github.com/tether-dev/tether/pkg/artifactstore/fsstore"
	"github.com/tether-dev/tether/pkg/artifactstore/s3store"
	"github.com/tether-dev/tether/pkg/upload"
)

// staleTempAge is how old a temporary file of the fs backend must be to count
// as a crashed writer's leftover: a PUT in progress writes to its file at
// least once per upload stall timeout (a minute), so it is never this old.
const staleTempAge = time.Hour

// artifactBackend builds the configured artifact store.
func artifactBackend(opts Options, log logr.Logger) (upload.Backend, error) {
	if opts.ArtifactBackend == "fs" {
		if err := os.MkdirAll(opts.ArtifactDir, 0o750); err != nil {
			return nil, fmt.Errorf("--artifact-dir: %w", err)
		}
		b, err := fsstore.NewFSBackend(opts.ArtifactDir)
		if err != nil {
			return nil, fmt.Errorf("--artifact-dir: %w", err)
		}
		// Not fatal: leftovers only take space, and the next start tries again.
		if err := b.RemoveStaleTemp(staleTempAge); err != nil {
			log.Error(err, "removing stale temporary files", "dir", opts.ArtifactDir)
		}
		return b, nil
	}
	var access, secret string
	if dir := opts.S3.CredentialsDir; dir != "" {
		a, err := os.ReadFile(filepath.Join(dir, "access-key"))
		if err != nil {
			return nil, fmt.Errorf("--s3-credentials-dir: %w", err)
		}
		s, err := os.ReadFile(filepath.Join(dir, "secret-key"))
		if err != nil {
			return nil, fmt.Errorf("--s3-credentials-dir: %w", err)
		}
		access, secret = strings.TrimSpace(string(a)), strings.TrimSpace(string(s))
	}
	return s3store.NewS3Backend(s3store.S3Options{Endpoint: opts.S3.Endpoint, Secure: !opts.S3.Insecure, AccessKey: access, SecretKey: secret,
		Region: opts.S3.Region, Bucket: opts.S3.Bucket, Prefix: opts.S3.Prefix,
		PublicEndpoint: opts.S3.PublicEndpoint, PublicInsecure: opts.S3.Insecure,
		// Probed in the background (storeprobe.go): nothing is done before.
		AwaitProbe: true})
}

// boundManifestMemory bounds what manifest PUTs hold on this replica (the
// process's endpoint.ManifestMemory) to --artifact-manifest-memory-ratio of
// the Go memory limit.
func boundManifestMemory(opts Options) {
	endpoint.ManifestMemory.SetRatio(opts.ArtifactManifestMemoryRatio)
}

var (
	descManifestMemory = prometheus.NewDesc("tether_artifacts_manifest_memory_bytes",
		"Bytes reserved by the manifest uploads this replica is reading and checking (each estimated from its Content-Length before its body is read).", nil, nil)
	descManifestMemoryNS = prometheus.NewDesc("tether_artifacts_manifest_memory_namespace_bytes",
		"Bytes reserved by one namespace's manifest uploads on this replica (namespaces holding some).", []string{"namespace"}, nil)
	descManifestMemoryLimit = prometheus.NewDesc("tether_artifacts_manifest_memory_limit_bytes",
		"What manifest uploads may hold on this replica (scope replica: --artifact-manifest-memory-ratio of the Go memory limit) and one namespace's share of it (scope namespace).",
		[]string{"scope"}, nil)
	descManifestMemoryRefusals = prometheus.NewDesc("tether_artifacts_manifest_memory_refusals_total",
		"Manifest uploads answered 503 SlowDown before their body was read because the replica's bound (scope replica) or their namespace's share (scope namespace) was full; also counted in tether_binding_refusals_total{reason=\"artifact_manifest_rate_limited\"}.",
		[]string{"scope"}, nil)
)

// manifestMemoryCollector reads a budget at scrape time: the limits follow
// the Go memory limit, and a namespace's series goes when it holds nothing.
type manifestMemoryCollector struct{ budget *endpoint.MemoryBudget }

func (c manifestMemoryCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descManifestMemory, descManifestMemoryNS, descManifestMemoryLimit, descManifestMemoryRefusals} {
		ch <- d
	}
}

func (c manifestMemoryCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.budget.Stats()
	ch <- prometheus.MustNewConstMetric(descManifestMemory, prometheus.GaugeValue, float64(s.Held))
	for ns, n := range s.ByNamespace {
		ch <- prometheus.MustNewConstMetric(descManifestMemoryNS, prometheus.GaugeValue, float64(n), ns)
	}
	ch <- prometheus.MustNewConstMetric(descManifestMemoryLimit, prometheus.GaugeValue, float64(s.Limit), "replica")
	ch <- prometheus.MustNewConstMetric(descManifestMemoryLimit, prometheus.GaugeValue, float64(s.NamespaceLimit), "namespace")
	ch <- prometheus.MustNewConstMetric(descManifestMemoryRefusals, prometheus.CounterValue, float64(s.Refused), "replica")
	ch <- prometheus.MustNewConstMetric(descManifestMemoryRefusals, prometheus.CounterValue, float64(s.RefusedNamespace), "namespace")
}
