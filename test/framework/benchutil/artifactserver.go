package benchutil

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/tether-dev/tether/pkg/artifactstore/endpoint"
	"github.com/tether-dev/tether/pkg/artifactstore/fsstore"
	"github.com/tether-dev/tether/pkg/artifactstore/store"
	"github.com/tether-dev/tether/pkg/binding"
)

// ArtifactServer is the binding server's artifact endpoint as it serves it
// (pkg/bindingserver): endpoint.Handler over a store.Store on the fs backend
// opened as the control plane opens it (--artifact-backend fs),
// endpoint.Route in front, its own TCP listener on 127.0.0.1 wrapped by
// tls.NewListener (a fresh self-signed certificate, TLS 1.2+, HTTP/1.1) and
// an http.Server with the binding server's timeouts. Its Authorizer accepts exactly one token for
// one writable job: a stand-in for the binding server's token ->
// WorkerBinding cache lookup, which the benchmarks do not measure.
type ArtifactServer struct {
	URL          string // https://127.0.0.1:port
	Token, JobID string
	// TokenFile holds Token as the kubelet projects a Secret key (no
	// newline); CAFile the certificate, which CertPEM is too.
	TokenFile, CAFile string
	CertPEM           []byte
	Backend           fsstore.FSBackend
	// PodUID is node 0's recorded pod (BenchPodUID).
	PodUID string
}

// BenchPodUID is the pod the benchmarks' bindings record as node 0's: the
// endpoint takes a write only from its node's recorded pod, so every
// uploader, sidecar and floor request of a benchmark names it
// (names.HeaderArtifactPodUID), as an injected sidecar names its own.
const BenchPodUID = "uid-bench"

// ArtifactServerOptions shape an ArtifactServer; the zero value is the plain
// endpoint.
type ArtifactServerOptions struct {
	// StoreParent is the directory the store's root is made in (e.g.
	// /dev/shm); "" is the test's temporary directory.
	StoreParent string
	// JobIDBytes is the random part of the job id, in bytes (default 8).
	JobIDBytes int
	// Others serves what is not an artifact request (endpoint.Route's next);
	// nil answers 404.
	Others http.Handler
	// WrapHandler wraps the routed handler; WrapListener the TCP listener,
	// under TLS.
	WrapHandler  func(http.Handler) http.Handler
	WrapListener func(net.Listener) net.Listener
}

// RandHex is n random bytes in hex.
func RandHex(b testing.TB, n int) string {
	buf := make([]byte, n)
	if _, err := rand.Read(buf); err != nil {
		b.Fatal(err)
	}
	return hex.EncodeToString(buf)
}

// StartArtifactServer starts an ArtifactServer, stopped at the end of b.
func StartArtifactServer(b testing.TB, o ArtifactServerOptions) *ArtifactServer {
	b.Helper()
	dir := b.TempDir()
	storeRoot := filepath.Join(dir, "store")
	if o.StoreParent != "" {
		d, err := os.MkdirTemp(o.StoreParent, "tether-bench-store-")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = os.RemoveAll(d) })
		storeRoot = d
	}
	backend, err := fsstore.NewFSBackend(storeRoot)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = backend.Close() })
	if o.JobIDBytes == 0 {
		o.JobIDBytes = 8
	}
	s := &ArtifactServer{Token: RandHex(b, 32), JobID: "bench-" + RandHex(b, o.JobIDBytes), Backend: backend, PodUID: BenchPodUID}
	certPEM, keyPEM := SelfSignedCert(b)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		b.Fatal(err)
	}
	s.CertPEM = certPEM
	s.TokenFile, s.CAFile = filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(s.TokenFile, []byte(s.Token), 0o600); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(s.CAFile, certPEM, 0o600); err != nil {
		b.Fatal(err)
	}
	h := &endpoint.Handler{
		Store: store.New(backend, store.Options{}),
		Authorize: func(_ context.Context, token binding.Token) (endpoint.Job, error) {
			if string(token) != s.Token {
				return endpoint.Job{}, endpoint.Unauthorized("no binding holds this token")
			}
			return endpoint.Job{Namespace: "tether-bench", Name: "bench-worker-0", JobID: s.JobID, Writable: true,
				Nodes: 1, Pods: map[int]string{0: s.PodUID}}, nil
		},
		Log: logr.Discard(),
	}
	others := o.Others
	if others == nil {
		others = http.NotFoundHandler()
	}
	handler := endpoint.Route(h, others)
	if o.WrapHandler != nil {
		handler = o.WrapHandler(handler)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	if o.WrapListener != nil {
		ln = o.WrapListener(ln)
	}
	tlsLn := tls.NewListener(ln, &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}})
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(tlsLn)
	}()
	b.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	s.URL = "https://" + addr
	return s
}
