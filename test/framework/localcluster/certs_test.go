package localcluster

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tether-dev/tether/test/framework/certs"
)

// What the cert-controller rotators of Kueue and Trainer check before they
// keep a pre-populated CA and serving certificate instead of making their
// own: the CA verifies for their CA names beyond their 90-day lookahead,
// its key is PKCS#1 RSA, and the serving certificate verifies for their
// Service names under it.
func TestClusterCertificatesSatisfyTheRotators(t *testing.T) {
	ca, err := newCA()
	if err != nil {
		t.Fatal(err)
	}
	lookahead := time.Now().Add(91 * 24 * time.Hour)
	caCert := parsePEMCert(t, ca.CertPEM)
	roots := x509.NewCertPool()
	roots.AddCert(caCert)
	for _, name := range caNames {
		if _, err := caCert.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, CurrentTime: lookahead}); err != nil {
			t.Errorf("CA for %s: %v", name, err)
		}
	}
	if b, _ := pem.Decode(ca.KeyPEM); b == nil || b.Type != "RSA PRIVATE KEY" {
		t.Errorf("CA key is not PKCS#1 PEM: %q", ca.KeyPEM)
	} else if _, err := x509.ParsePKCS1PrivateKey(b.Bytes); err != nil {
		t.Errorf("CA key: %v", err)
	}

	c := &Cluster{CA: ca}
	dir := t.TempDir()
	if err := c.writeServingCert(dir); err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	if written, err := os.ReadFile(filepath.Join(dir, "ca.crt")); err != nil || string(written) != string(ca.CertPEM) {
		t.Errorf("ca.crt is not the CA (%v)", err)
	}
	for _, name := range append([]string{"127.0.0.1"}, servingNames...) {
		if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, CurrentTime: lookahead}); err != nil {
			t.Errorf("serving certificate for %s: %v", name, err)
		}
	}
}

// The Secret Trainer v2.0.0's rotator keeps: its CA verifies for the CA
// name with a PKCS#1 key, the serving certificate for the Service under
// ca.crt, and ca.crt also carries the caller's CA.
func TestTrainerV20SecretSatisfiesTheRotator(t *testing.T) {
	caller := certs.NewCA(t, certs.CommonName("caller"))
	data, err := trainerV20SecretData(caller.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(data["ca.crt"]) {
		t.Fatalf("ca.crt: %q", data["ca.crt"])
	}
	lookahead := time.Now().Add(91 * 24 * time.Hour)
	ca := parsePEMCert(t, data["ca.crt"])
	if _, err := ca.Verify(x509.VerifyOptions{Roots: roots, DNSName: trainerV20CAName, CurrentTime: lookahead}); err != nil {
		t.Errorf("CA for %s: %v", trainerV20CAName, err)
	}
	if b, _ := pem.Decode(data["ca.key"]); b == nil {
		t.Error("ca.key: no PEM")
	} else if _, err := x509.ParsePKCS1PrivateKey(b.Bytes); err != nil {
		t.Errorf("ca.key: %v", err)
	}
	pair, err := tls.X509KeyPair(data["tls.crt"], data["tls.key"])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(trainerV20NSFile); err == nil {
		t.Skipf("%s exists: the Service's namespace is the pod's", trainerV20NSFile)
	}
	dns := fmt.Sprintf("%s.%s.svc", trainerV20ServiceName, trainerV20Namespace)
	if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: dns, CurrentTime: lookahead}); err != nil {
		t.Errorf("serving certificate for %s: %v", dns, err)
	}
	callerLeaf := caller.Server(t, "localhost")
	if _, err := callerLeaf.Certificate.Verify(x509.VerifyOptions{Roots: roots, DNSName: "localhost"}); err != nil {
		t.Errorf("ca.crt does not carry the caller's CA: %v", err)
	}
}

func parsePEMCert(t *testing.T, b []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("no PEM block in %q", b)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
