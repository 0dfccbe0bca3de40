package certs

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"
)

// TB is the part of testing.TB the helpers use (testing.TB satisfies it).
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// CA is a certificate authority: its own self-signed certificate and key,
// and the certificates it issues.
type CA struct {
	KeyPair
}

// New makes a CA, named "tether test CA" unless CommonName says otherwise.
func New(opts ...Option) (*CA, error) {
	s := newSpec(append([]Option{CommonName("tether test CA")}, opts...))
	kp, err := mint(s, true, nil)
	if err != nil {
		return nil, fmt.Errorf("test CA: %w", err)
	}
	return &CA{KeyPair: *kp}, nil
}

// NewCA is New that fails t on error.
func NewCA(t TB, opts ...Option) *CA {
	t.Helper()
	ca, err := New(opts...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return ca
}

// Load is the CA of a PEM certificate and key (PKCS#1, SEC 1 or PKCS#8),
// such as a CA Secret's ca.crt and ca.key.
func Load(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, errors.New("load CA: no PEM block")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	var key any
	if key, err = x509.ParsePKCS1PrivateKey(kb.Bytes); err != nil {
		if key, err = x509.ParseECPrivateKey(kb.Bytes); err != nil {
			key, err = x509.ParsePKCS8PrivateKey(kb.Bytes)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("load CA key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("load CA key: a %T cannot sign", key)
	}
	return &CA{KeyPair{Certificate: cert, Key: signer, CertPEM: certPEM, KeyPEM: keyPEM}}, nil
}

// Pool is a CertPool holding the CA alone.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Certificate)
	return p
}

// NewKeyPair issues a certificate of opts with a new key.
func (ca *CA) NewKeyPair(opts ...Option) (*KeyPair, error) {
	kp, err := mint(newSpec(opts), false, &ca.KeyPair)
	if err != nil {
		return nil, fmt.Errorf("issue certificate: %w", err)
	}
	return kp, nil
}

// Issue is NewKeyPair that fails t on error.
func (ca *CA) Issue(t TB, opts ...Option) *KeyPair {
	t.Helper()
	kp, err := ca.NewKeyPair(opts...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return kp
}

// Server issues a server certificate for hosts (DNS names or IP
// literals), named after the first.
func (ca *CA) Server(t TB, hosts ...string) *KeyPair {
	t.Helper()
	name := ""
	if len(hosts) > 0 {
		name = hosts[0]
	}
	return ca.Issue(t, CommonName(name), Hosts(hosts...), ExtKeyUsage(x509.ExtKeyUsageServerAuth))
}

// Client issues a client certificate for commonName in the organisations
// org (a Kubernetes user and its groups).
func (ca *CA) Client(t TB, commonName string, org ...string) *KeyPair {
	t.Helper()
	return ca.Issue(t, CommonName(commonName), Organization(org...), ExtKeyUsage(x509.ExtKeyUsageClientAuth))
}

// Reissue signs c's subject, names, usages and public key again, valid
// from an hour ago until notAfter, and returns the certificate's PEM: the
// holder of c's key can serve it as before, with another expiry.
func (ca *CA) Reissue(c *x509.Certificate, notAfter time.Time) ([]byte, error) {
	tmpl := *c
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), notAfter
	tmpl.AuthorityKeyId, tmpl.SubjectKeyId = nil, nil
	_, certPEM, err := sign(&tmpl, ca.Certificate, c.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("reissue certificate: %w", err)
	}
	return certPEM, nil
}
