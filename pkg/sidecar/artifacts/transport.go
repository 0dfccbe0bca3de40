package artifacts

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/sidecar/credentials"
)

// tokenTransport adds the token, read from its file for every request, the
// pod's UID (names.HeaderArtifactPodUID) when known, and the pod's token
// (names.HeaderPodToken, read from podTokenFile for every request: the
// kubelet rotates it), which proves that UID.
type tokenTransport struct {
	file         string
	podTokenFile string
	pod          *atomic.Pointer[string]
	next         http.RoundTripper
}

func (t *tokenTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	token, err := readToken(t.file)
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	var podToken string
	if t.podTokenFile != "" {
		if podToken, err = credentials.ReadPodToken(t.podTokenFile); err != nil {
			if req.Body != nil {
				req.Body.Close()
			}
			return nil, &tokenError{err: err, permanent: errors.Is(err, credentials.ErrMalformedPodToken)}
		}
	}
	r := req.Clone(req.Context())
	r.Header.Set(names.HeaderArtifactToken, string(token))
	if podToken != "" {
		r.Header.Set(names.HeaderPodToken, podToken)
	}
	if t.pod != nil {
		if uid := t.pod.Load(); uid != nil && *uid != "" {
			r.Header.Set(names.HeaderArtifactPodUID, *uid)
		}
	}
	setResumeHeaders(r)
	if r.Method == http.MethodPut {
		// This sidecar verifies an object stored in parts by its checksum.
		r.Header.Set(names.HeaderMultipart, "1")
	}
	if r.Method == http.MethodPut && r.ContentLength >= expectContinueMin {
		r.Header.Set("Expect", "100-continue")
	}
	resp, err := t.next.RoundTrip(r)
	noteRetryAfter(r, resp)
	return resp, err
}

// readToken reads the token file for one request.
func readToken(file string) (binding.Token, error) {
	token, err := credentials.ReadToken(file)
	if err != nil {
		return "", &tokenError{err: err, permanent: errors.Is(err, credentials.ErrMalformedToken)}
	}
	return token, nil
}

// dialTLS dials with the CA file as it is now (re-read for every new
// connection, parsed again only when it changed).
func (u *Uploader) dialTLS(ctx context.Context, network, addr string) (net.Conn, error) {
	pool, err := u.caPool()
	if err != nil {
		return nil, err
	}
	return dialVerified(ctx, network, addr, pool)
}

// dialVerified dials addr over TLS (HTTP/1.1), verifying it with pool.
func dialVerified(ctx context.Context, network, addr string, pool *x509.CertPool) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	d := &tls.Dialer{
		NetDialer: &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second},
		Config:    &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: host, NextProtos: []string{"http/1.1"}},
	}
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	return d.DialContext(ctx, network, addr)
}

func (u *Uploader) caPool() (*x509.CertPool, error) {
	pool, _, err := u.ca.Pool()
	if errors.Is(err, credentials.ErrNoCertificate) {
		return nil, &localError{err}
	}
	return pool, err
}
