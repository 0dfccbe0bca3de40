package controlplane

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tether-dev/tether/test/framework/certs"
)

func TestCertExpiryCollector(t *testing.T) {
	dir := t.TempDir()
	c := &CertExpiryCollector{CertDir: dir}
	if n := testutil.CollectAndCount(c); n != 0 {
		t.Fatalf("no tls.crt: %d series, want none", n)
	}
	notAfter := time.Unix(1893456000, 0) // 2030-01-01
	cert := certs.NewCA(t).Issue(t, certs.CommonName("t"), certs.NotAfter(notAfter))
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), cert.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP tether_certificate_expiry_timestamp_seconds Unix time at which the serving certificate the webhooks and the binding server use (tls.crt in --cert-dir) expires; absent while no certificate is mounted.
# TYPE tether_certificate_expiry_timestamp_seconds gauge
tether_certificate_expiry_timestamp_seconds 1.893456e+09
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
