package controlplane

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"
)

var descCertExpiry = prometheus.NewDesc("tether_certificate_expiry_timestamp_seconds",
	"Unix time at which the serving certificate the webhooks and the binding server use (tls.crt in --cert-dir) expires; absent while no certificate is mounted.",
	nil, nil)

// CertExpiryCollector reports the serving certificate's NotAfter at scrape
// time, read from the mounted file: it is the certificate the servers load,
// whichever mode (self-managed rotation or cert-manager) wrote it.
type CertExpiryCollector struct {
	CertDir string
}

// Describe implements prometheus.Collector.
func (c *CertExpiryCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descCertExpiry }

// Collect implements prometheus.Collector.
func (c *CertExpiryCollector) Collect(ch chan<- prometheus.Metric) {
	b, err := os.ReadFile(filepath.Join(c.CertDir, "tls.crt"))
	if err != nil {
		return // not written yet (first rotation) or not mounted: no series, not a wrong one
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(descCertExpiry, prometheus.GaugeValue, float64(cert.NotAfter.Unix()))
}
