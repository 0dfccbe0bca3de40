package controlplane

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCertExpiryCollector(t *testing.T) {
	dir := t.TempDir()
	c := &CertExpiryCollector{CertDir: dir}
	if n := testutil.CollectAndCount(c); n != 0 {
		t.Fatalf("no tls.crt: %d series, want none", n)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	notAfter := time.Unix(1893456000, 0) // 2030-01-01
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(1),
		Subject: pkix.Name{CommonName: "t"}, NotBefore: notAfter.Add(-time.Hour), NotAfter: notAfter}, &x509.Certificate{SerialNumber: big.NewInt(1),
		Subject: pkix.Name{CommonName: "t"}}, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
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
