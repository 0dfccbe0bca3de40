package certs_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/tether-dev/tether/test/framework/certs"
)

// A server on loopback with a certificate of the test CA, and a client
// that trusts that CA alone and presents a client certificate of its own.
// (In a test, certs.NewCA(t), ca.Server(t, ...) and ca.Client(t, ...) fail
// the test instead of returning an error.)
func Example() {
	ca, err := certs.New()
	if err != nil {
		fmt.Println(err)
		return
	}
	server, err := ca.NewKeyPair(certs.Hosts("localhost", "127.0.0.1"))
	if err != nil {
		fmt.Println(err)
		return
	}
	alice, err := ca.NewKeyPair(certs.CommonName("alice"), certs.Organization("team-a"), certs.ExtKeyUsage(x509.ExtKeyUsageClientAuth))
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{server.TLS()},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca.Pool(),
	}
	srv.StartTLS()
	defer srv.Close()

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs:      ca.Pool(),
		Certificates: []tls.Certificate{alice.TLS()},
	}}}
	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Println(string(b))
	// Output: hello alice
}

// A certificate that expired a minute ago, in PEM, for a test of what
// reads certificate files.
func ExampleNotAfter() {
	ca, err := certs.New()
	if err != nil {
		fmt.Println(err)
		return
	}
	expired, err := ca.NewKeyPair(certs.Hosts("localhost"), certs.NotAfter(time.Now().Add(-time.Minute)))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(time.Now().After(expired.Certificate.NotAfter), len(expired.CertPEM) > 0)
	// Output: true true
}
