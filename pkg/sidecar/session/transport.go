package session

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/sidecar/credentials"
)

// requestCredentials are what one request authenticates with: the job's token and
// the pod's token (names.HeaderPodToken), both read from their files for
// the request, as the kubelet may have rotated either.
type requestCredentials struct {
	token    binding.Token
	podToken string
}

// readToken reads and checks the token file and the pod token file. An
// unreadable file is a retryable error (the kubelet may be swapping it); a
// malformed token is permanent, as the server would refuse it with 401.
func (c *Client) readToken() (requestCredentials, error) {
	token, err := credentials.ReadToken(c.cfg.TokenFile)
	switch {
	case errors.Is(err, credentials.ErrMalformedToken):
		return requestCredentials{}, &PermanentError{Op: "read token", Response: &binding.ErrorResponse{
			Code:    binding.ErrUnauthorized,
			Message: "token file " + c.cfg.TokenFile + " does not hold a 64-character lowercase hex token",
		}}
	case err != nil:
		return requestCredentials{}, fmt.Errorf("read token: %w", err)
	}
	cr := requestCredentials{token: token}
	if c.cfg.PodTokenFile == "" {
		// The server refuses the request, naming the header.
		return cr, nil
	}
	cr.podToken, err = credentials.ReadPodToken(c.cfg.PodTokenFile)
	switch {
	case errors.Is(err, credentials.ErrMalformedPodToken):
		return requestCredentials{}, &PermanentError{Op: "read pod token", Response: &binding.ErrorResponse{
			Code:    binding.ErrUnauthorized,
			Message: "pod token file " + c.cfg.PodTokenFile + " does not hold a ServiceAccount token",
		}}
	case err != nil:
		return requestCredentials{}, fmt.Errorf("read pod token: %w", err)
	}
	return cr, nil
}

func (c *Client) headers(cr requestCredentials) http.Header {
	h := http.Header{}
	h.Set(binding.HeaderAuthorization, cr.token.BearerHeader())
	if cr.podToken != "" {
		h.Set(names.HeaderPodToken, cr.podToken)
	}
	h.Set(names.HeaderProtocolVersion, binding.ProtocolVersion)
	ua := "tether-sidecar"
	if c.cfg.SidecarVersion != "" {
		ua += "/" + c.cfg.SidecarVersion
	}
	h.Set("User-Agent", ua)
	return h
}

// sessionHeaders are headers plus the identity a session must claim.
func (c *Client) sessionHeaders(cr requestCredentials) http.Header {
	h := c.headers(cr)
	h.Set(names.HeaderJobID, c.cfg.JobID)
	h.Set(names.HeaderWorkerID, c.cfg.WorkerID)
	h.Set(names.HeaderPodNamespace, c.cfg.Pod.Namespace)
	h.Set(names.HeaderPodName, c.cfg.Pod.Name)
	h.Set(names.HeaderPodUID, c.cfg.Pod.UID)
	return h
}

// tlsConfig is a fresh TLS configuration with the CA file as it is now.
func (c *Client) tlsConfig() (*tls.Config, error) {
	pool, changed, err := c.ca.Pool()
	if err != nil {
		return nil, err
	}
	if changed {
		c.log.Info("CA bundle changed; using the new one", "file", c.ca.File())
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}, nil
}

func (c *Client) httpClient() (*http.Client, error) {
	if c.cfg.HTTPClient != nil {
		return c.cfg.HTTPClient, nil
	}
	tc, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	return &http.Client{
		// Registration is rare: no idle connections to keep or leak. No
		// proxy: the binding server is in the cluster.
		Transport: &http.Transport{
			TLSClientConfig:     tc,
			DisableKeepAlives:   true,
			TLSHandshakeTimeout: c.cfg.RequestTimeout,
			DialContext:         (&net.Dialer{Timeout: c.cfg.RequestTimeout, KeepAlive: 30 * time.Second}).DialContext,
		},
		// Never follow a redirect: the answer is the server's or an error.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, nil
}

func (c *Client) dialer() (*websocket.Dialer, error) {
	if c.cfg.Dialer != nil {
		return c.cfg.Dialer, nil
	}
	tc, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	return &websocket.Dialer{
		TLSClientConfig:  tc,
		HandshakeTimeout: c.cfg.RequestTimeout,
		ReadBufferSize:   4 << 10,
		WriteBufferSize:  4 << 10,
	}, nil
}
