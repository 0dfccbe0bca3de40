package controlplane

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// testCA is a CA that signs client certificates.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T) testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return testCA{cert: cert, key: key}
}

func (ca testCA) pem() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})
}

// issue is a certificate ca signs for usage.
func (ca testCA) issue(t *testing.T, usage x509.ExtKeyUsage) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{usage}, KeyUsage: x509.KeyUsageDigitalSignature,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestWebhookClientCA: with --webhook-client-ca, an admission path answers
// only a caller presenting a client certificate the CA signed for client
// authentication; no certificate, another CA's, or a server certificate
// get 403.
func TestWebhookClientCA(t *testing.T) {
	ca, other := newTestCA(t), newTestCA(t)
	file := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(file, ca.pem(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := checkWebhookClientCA(file); err != nil {
		t.Fatal(err)
	}
	if err := checkWebhookClientCA(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Fatal("a missing CA file passed the check")
	}
	guard := newWebhookClientCA(file, logr.Discard())
	srv := httptest.NewUnstartedServer(guard.require(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("review"))
	})))
	srv.TLS = &tls.Config{}
	requestClientCerts(srv.TLS)
	srv.StartTLS()
	defer srv.Close()
	post := func(cert *tls.Certificate) int {
		tr := srv.Client().Transport.(*http.Transport).Clone()
		if cert != nil {
			tr.TLSClientConfig.Certificates = []tls.Certificate{*cert}
		}
		resp, err := (&http.Client{Transport: tr}).Post(srv.URL+PodWebhookPath, "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	apiserver, foreign, server := ca.issue(t, x509.ExtKeyUsageClientAuth), other.issue(t, x509.ExtKeyUsageClientAuth), ca.issue(t, x509.ExtKeyUsageServerAuth)
	for name, c := range map[string]struct {
		cert *tls.Certificate
		want int
	}{
		"the API server's": {&apiserver, http.StatusOK},
		"none":             {nil, http.StatusForbidden},
		"another CA's":     {&foreign, http.StatusForbidden},
		"a server's, not for client authentication": {&server, http.StatusForbidden},
	} {
		if got := post(c.cert); got != c.want {
			t.Errorf("certificate %s: %d, want %d", name, got, c.want)
		}
	}
}
