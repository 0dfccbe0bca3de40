package monitoring

import (
	"os"
	"testing"
	"time"

	"github.com/tether-dev/tether/test/framework/certs"
)

// writeCert writes a self-signed certificate expiring at notAfter.
func writeCert(t *testing.T, path string, notAfter time.Time) {
	t.Helper()
	ca := certs.NewCA(t, certs.CommonName("tether"), certs.NotAfter(notAfter))
	if err := os.WriteFile(path, ca.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
}
