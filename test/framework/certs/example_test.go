package certs_test

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tether-dev/tether/test/framework/certs"
)

// A server on loopback with a certificate of the test CA, and a client
// that trusts that CA alone and presents a client certificate of its own.
func Example() {
	t := &testing.T{} // in a test, the test's own t
	ca := certs.NewCA(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{ca.Server(t, "localhost", "127.0.0.1").TLS()},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca.Pool(),
	}
	srv.StartTLS()
	defer srv.Close()

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs:      ca.Pool(),
		Certificates: []tls.Certificate{ca.Client(t, "alice", "team-a").TLS()},
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
	t := &testing.T{} // in a test, the test's own t
	ca := certs.NewCA(t)
	expired := ca.Issue(t, certs.Hosts("localhost"), certs.NotAfter(time.Now().Add(-time.Minute)))
	fmt.Println(time.Now().After(expired.Certificate.NotAfter), len(expired.CertPEM) > 0)
	// Output: true true
}
