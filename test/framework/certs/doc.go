// Package certs is the one test CA of Tether's tests and harness: a CA that
// issues server certificates for DNS names and IP addresses and client
// certificates for a common name and organisations, in the forms tests use
// (x509.Certificate, PEM, tls.Certificate, a CertPool).
//
// Keys are ECDSA P-256 (PKCS#8 PEM) unless RSA() asks for RSA 2048 (PKCS#1
// PEM, the one key format the cert-controller rotators of Kueue and Trainer
// parse). Certificates are valid from an hour ago for a year unless
// NotBefore or NotAfter say otherwise: a test that needs an expired or
// soon-expiring certificate says NotAfter.
//
// NewCA, Issue, Server and Client fail the test on error; New and NewKeyPair
// return it, for the harness. The package does not import testing: the
// local cluster, which cmd/tether-demo links, mints its certificates here
// too, and no shipped binary links testing (internal/archtest).
package certs
