package controlplane

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tether-dev/tether/pkg/artifactstore/s3store"
)

// probeTimeout bounds one start-up probe of the artifact store (a dozen
// small requests).
const probeTimeout = time.Minute

// probeStore runs the start-up probe on an S3 store (docs/artifacts.md,
// "What the store can do") until it succeeds or ctx ends: it logs what
// the store showed, makes the backend verify as the store allows, and
// fails, naming the cause and the fix, only when no trustworthy
// verification is left. The replica serves meanwhile (the backend awaits
// the probe: s3store.S3Options.AwaitProbe).
func probeStore(ctx context.Context, b *s3store.S3Backend, log logr.Logger) (s3store.Capabilities, error) {
	client := &http.Client{Transport: b.Transport(), Timeout: 30 * time.Second}
	// A store that cannot be reached or answers errors is asked again, for
	// as long as it takes: a replica starting during a store outage serves
	// its sessions meanwhile, and its uploads once the store is back.
	var caps s3store.Capabilities
	for wait := time.Second; ; wait = min(2*wait, 10*time.Second) {
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		var err error
		caps, err = b.Probe(pctx, client)
		cancel()
		if err == nil {
			break
		}
		log.Info("the artifact store's start-up probe failed; trying again (check --s3-endpoint, --s3-bucket and the credentials if it goes on)",
			"error", err.Error(), "in", wait.String())
		select {
		case <-ctx.Done():
			return caps, fmt.Errorf("the artifact store's start-up probe: %w (check --s3-endpoint, --s3-bucket and the credentials)", err)
		case <-time.After(wait):
		}
	}
	log.Info("artifact store probed", caps.KeyValues()...)
	choice, err := caps.Choose()
	if err != nil {
		return caps, fmt.Errorf("the artifact store (--s3-endpoint, --s3-bucket): %w", err)
	}
	b.Use(choice)
	verify := "md5"
	if choice.Verification.ByChecksum {
		verify = "crc64nvme"
	}
	log.Info("artifact verification chosen", "verify", verify, "why", choice.Why, "directUploads", choice.Direct,
		"conditionalPut", choice.ConditionalPut, "conditionalCopy", choice.ConditionalCopy, "multipart", choice.Multipart)
	if !choice.Direct {
		log.Info("direct uploads are off: the store cannot verify a presigned PUT (every file goes through the control plane)",
			"presignedPut", caps.PresignedPut, "etagMD5", caps.ETagMD5, "defaultChecksum", caps.DefaultChecksum)
	}
	return caps, nil
}

// capabilityCollector exports the probe's findings, once there are some:
// tether_artifact_store_capability{capability} 1 or 0.
type capabilityCollector struct {
	caps *atomic.Pointer[s3store.Capabilities]
	desc *prometheus.Desc
}

func newCapabilityCollector(caps *atomic.Pointer[s3store.Capabilities]) *capabilityCollector {
	return &capabilityCollector{caps: caps, desc: prometheus.NewDesc("tether_artifact_store_capability",
		"What the artifact store showed the control plane's start-up probe (1: it does it): etag_md5, checksum_crc64nvme, presigned_put, copy, put_if_none_match, multipart_checksum, ...",
		[]string{"capability"}, nil)}
}

func (c *capabilityCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *capabilityCollector) Collect(ch chan<- prometheus.Metric) {
	caps := c.caps.Load()
	if caps == nil {
		return
	}
	for _, e := range caps.Each() {
		v := 0.0
		if e.On {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, e.Name)
	}
}
