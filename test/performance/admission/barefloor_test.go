package admission_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/tether-dev/tether/test/framework/benchutil"
)

// bareFloorPath is the bare floor's one path, on its own server.
const bareFloorPath = "/bare-floor"

// serveBareFloor serves the bare floor on 127.0.0.1 and returns its URL: a
// plain net/http server with the TLS settings controller-runtime's webhook
// server uses (tls.Listen, NextProtos h2 only, the same certificate, Go's
// default TLS versions and suites) and its http.Server limits, whose one
// handler decodes the AdmissionReview and its pod with encoding/json and
// answers allowed with no patch. No controller-runtime, informer, metric or
// logger: what any pod webhook pays before it does anything of its own.
func serveBareFloor(b *testing.B, ctx context.Context, certPEM, keyPEM []byte) string {
	b.Helper()
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		b.Fatal(err)
	}
	cfg := &tls.Config{
		NextProtos:     []string{"h2"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil },
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc(bareFloorPath, benchutil.BareFloor)
	srv := &http.Server{
		BaseContext:       func(net.Listener) context.Context { return ctx },
		Handler:           mux,
		MaxHeaderBytes:    1 << 20,
		IdleTimeout:       90 * time.Second,
		ReadHeaderTimeout: 32 * time.Second,
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	b.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			b.Error("bare floor server:", err)
		}
	})
	return fmt.Sprintf("https://%s%s", ln.Addr(), bareFloorPath)
}
