package certs

import (
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"
)

func TestServerCertificateServesTLS(t *testing.T) {
	ca := NewCA(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Server(t, "localhost", "127.0.0.1").TLS()}}
	srv.StartTLS()
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	other := NewCA(t)
	client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: other.Pool()}}}
	if resp, err := client.Get(srv.URL); err == nil {
		resp.Body.Close()
		t.Fatal("a client trusting another CA accepted the server's certificate")
	}
}

func TestClientCertificateNamesUserAndGroups(t *testing.T) {
	ca := NewCA(t)
	c := ca.Client(t, "alice", "team-a", "team-b")
	if _, err := c.Certificate.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Certificate.Verify(x509.VerifyOptions{Roots: ca.Pool()}); err == nil {
		t.Error("a client certificate verified for server authentication")
	}
	if s := c.Certificate.Subject; s.CommonName != "alice" || len(s.Organization) != 2 || s.Organization[1] != "team-b" {
		t.Errorf("subject %v", s)
	}
	if _, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM); err != nil {
		t.Errorf("PEM forms: %v", err)
	}
}

func TestNotAfterMakesExpiredCertificates(t *testing.T) {
	ca := NewCA(t)
	expired := ca.Issue(t, Hosts("localhost"), NotAfter(time.Now().Add(-time.Minute)))
	if !expired.Certificate.NotBefore.Before(expired.Certificate.NotAfter) {
		t.Fatalf("valid from %v to %v", expired.Certificate.NotBefore, expired.Certificate.NotAfter)
	}
	if _, err := expired.Certificate.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: "localhost"}); err == nil {
		t.Error("an expired certificate verified")
	}
	at := time.Unix(1893456000, 0)
	if got := NewCA(t, NotAfter(at)).Certificate.NotAfter; !got.Equal(at) {
		t.Errorf("CA NotAfter %v, want %v", got, at)
	}
}

func TestRSAKeysArePKCS1(t *testing.T) {
	ca := NewCA(t, RSA(), Hosts("kueue-ca"))
	b, _ := pem.Decode(ca.KeyPEM)
	if b == nil || b.Type != "RSA PRIVATE KEY" {
		t.Fatalf("key PEM %q", ca.KeyPEM)
	}
	if _, err := x509.ParsePKCS1PrivateKey(b.Bytes); err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Certificate.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: "kueue-ca"}); err != nil {
		t.Errorf("the CA does not verify for its own name: %v", err)
	}
	leaf := ca.Issue(t, RSA(), Hosts("127.0.0.1"))
	if _, ok := leaf.Key.(*rsa.PrivateKey); !ok {
		t.Errorf("leaf key %T", leaf.Key)
	}
	dir := t.TempDir()
	if err := leaf.WriteFiles(dir, "tls"); err != nil {
		t.Fatal(err)
	}
	if _, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")); err != nil {
		t.Fatal(err)
	}
}

func TestLoadAndReissue(t *testing.T) {
	orig := NewCA(t, RSA())
	ca, err := Load(orig.CertPEM, orig.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	leaf := orig.Server(t, "svc.ns.svc")
	notAfter := time.Now().Add(72 * time.Hour).Truncate(time.Second)
	certPEM, err := ca.Reissue(leaf.Certificate, notAfter)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, leaf.KeyPEM)
	if err != nil {
		t.Fatalf("the reissued certificate does not go with the old key: %v", err)
	}
	c := pair.Leaf
	if !c.NotAfter.Equal(notAfter) {
		t.Errorf("NotAfter %v, want %v", c.NotAfter, notAfter)
	}
	if _, err := c.Verify(x509.VerifyOptions{Roots: orig.Pool(), DNSName: "svc.ns.svc"}); err != nil {
		t.Error(err)
	}
	if _, err := Load([]byte("no"), orig.KeyPEM); err == nil {
		t.Error("Load took a certificate that is no PEM")
	}
}
