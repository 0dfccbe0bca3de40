package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
)

// KeyPair is a certificate and its private key.
type KeyPair struct {
	Certificate *x509.Certificate
	Key         crypto.Signer
	CertPEM     []byte
	KeyPEM      []byte
}

// TLS is the pair as a tls.Certificate, for a tls.Config's Certificates.
func (kp *KeyPair) TLS() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{kp.Certificate.Raw}, PrivateKey: kp.Key, Leaf: kp.Certificate}
}

// WriteFiles writes <name>.crt and <name>.key into dir (made if missing),
// readable by the owner only.
func (kp *KeyPair) WriteFiles(dir, name string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".crt"), kp.CertPEM, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".key"), kp.KeyPEM, 0o600)
}

// mint makes a key and a certificate for s, signed by parent's key, or
// self-signed when parent is nil.
func mint(s spec, isCA bool, parent *KeyPair) (*KeyPair, error) {
	key, keyPEM, err := newKey(s.rsa)
	if err != nil {
		return nil, err
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: s.commonName, Organization: s.organization},
		DNSNames:     s.dnsNames,
		IPAddresses:  s.ips,
		NotBefore:    s.notBefore,
		NotAfter:     s.notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  s.usage,
	}
	if s.rsa {
		tmpl.KeyUsage |= x509.KeyUsageKeyEncipherment
	}
	if isCA {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	}
	signer, signerKey := tmpl, key
	if parent != nil {
		signer, signerKey = parent.Certificate, parent.Key
	}
	cert, certPEM, err := sign(tmpl, signer, key.Public(), signerKey)
	if err != nil {
		return nil, err
	}
	return &KeyPair{Certificate: cert, Key: key, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// sign makes the certificate of tmpl for pub, signed by parent's key.
func sign(tmpl, parent *x509.Certificate, pub crypto.PublicKey, parentKey crypto.Signer) (*x509.Certificate, []byte, error) {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, parentKey)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// newKey is an RSA 2048 key in PKCS#1 PEM or an ECDSA P-256 key in PKCS#8
// PEM.
func newKey(useRSA bool) (crypto.Signer, []byte, error) {
	if useRSA {
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return nil, nil, err
		}
		return key, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// serialNumber is a random serial: certificates of one CA never share one.
func serialNumber() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
}
