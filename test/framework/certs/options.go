package certs

import (
	"crypto/x509"
	"net"
	"time"
)

// Option sets a field of the certificate (or CA) being made.
type Option func(*spec)

// spec is what one certificate is made of.
type spec struct {
	commonName   string
	organization []string
	dnsNames     []string
	ips          []net.IP
	notBefore    time.Time
	notAfter     time.Time
	usage        []x509.ExtKeyUsage
	rsa          bool
}

// CommonName is the subject's common name.
func CommonName(name string) Option { return func(s *spec) { s.commonName = name } }

// Organization is the subject's organisations (Kubernetes reads them as
// groups).
func Organization(org ...string) Option {
	return func(s *spec) { s.organization = append(s.organization, org...) }
}

// Hosts are the subject alternative names: IP literals become IP
// addresses, everything else a DNS name.
func Hosts(hosts ...string) Option {
	return func(s *spec) {
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				s.ips = append(s.ips, ip)
			} else {
				s.dnsNames = append(s.dnsNames, h)
			}
		}
	}
}

// IPs are subject alternative IP addresses.
func IPs(ips ...net.IP) Option { return func(s *spec) { s.ips = append(s.ips, ips...) } }

// NotBefore is when the certificate becomes valid (default: an hour ago,
// or an hour before NotAfter if that is earlier).
func NotBefore(t time.Time) Option { return func(s *spec) { s.notBefore = t } }

// NotAfter is when the certificate expires (default: a year from now). A
// time in the past makes an expired certificate.
func NotAfter(t time.Time) Option { return func(s *spec) { s.notAfter = t } }

// ExtKeyUsage is the certificate's extended key usages (Server and Client
// set one each; a CA has none unless asked, so it may sign either kind).
func ExtKeyUsage(u ...x509.ExtKeyUsage) Option {
	return func(s *spec) { s.usage = append(s.usage, u...) }
}

// RSA makes an RSA 2048 key, written as PKCS#1 PEM ("RSA PRIVATE KEY").
func RSA() Option { return func(s *spec) { s.rsa = true } }

func newSpec(opts []Option) spec {
	var s spec
	for _, o := range opts {
		o(&s)
	}
	now := time.Now()
	if s.notAfter.IsZero() {
		s.notAfter = now.Add(365 * 24 * time.Hour)
	}
	if s.notBefore.IsZero() {
		s.notBefore = now
		if s.notAfter.Before(now) {
			s.notBefore = s.notAfter
		}
		s.notBefore = s.notBefore.Add(-time.Hour)
	}
	return s
}
