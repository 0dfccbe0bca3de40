package controlplane

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// The admission webhooks listen on the Service's port 443, which every
// sidecar (every trainer pod) reaches, and an AdmissionReview names any
// namespace: without a client certificate, the webhook cannot tell the API
// server from anyone else. With --webhook-client-ca, the admission paths
// answer only a caller whose TLS client certificate that CA signed, for
// client authentication: the kube-apiserver, configured to present one
// (docs/platform.md, "Who may call the webhooks").
//
// Per path, not on the listener (controller-runtime's ClientCAName): the
// listener also serves the read API to the API server's front proxy,
// whose certificate another CA signs (readapi.go). The listener requests
// certificates and verifies none; each admission path verifies here.

// webhookClientCA verifies admission callers' client certificates against
// the PEM file it reads (reread as it rotates: lastGoodFile).
type webhookClientCA struct {
	read func() ([]byte, error)
	log  logr.Logger

	mu   sync.Mutex
	pem  []byte
	pool *x509.CertPool
}

func newWebhookClientCA(path string, log logr.Logger) *webhookClientCA {
	return &webhookClientCA{read: lastGoodFile(path), log: log}
}

// roots is the CA pool of the file's current content.
func (c *webhookClientCA) roots() (*x509.CertPool, error) {
	b, err := c.read()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pool != nil && bytes.Equal(b, c.pem) {
		return c.pool, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, errors.New("no PEM certificate in it")
	}
	c.pem, c.pool = b, pool
	return pool, nil
}

// verify says why r's client certificate is not one the CA signed for
// client authentication; nil when it is.
func (c *webhookClientCA) verify(r *http.Request) error {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return errors.New("no client certificate")
	}
	roots, err := c.roots()
	if err != nil {
		return fmt.Errorf("the webhook client CA cannot be read: %w", err)
	}
	certs := r.TLS.PeerCertificates
	inter := x509.NewCertPool()
	for _, ic := range certs[1:] {
		inter.AddCert(ic)
	}
	_, err = certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	return err
}

// require serves next only to callers whose certificate verifies; others
// get 403 and nothing of the webhook (the API server, if misconfigured,
// fails the admission closed, as for any webhook error).
func (c *webhookClientCA) require(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := c.verify(r); err != nil {
			c.log.V(1).Info("refused an admission request without a client certificate the webhook client CA signed",
				"path", r.URL.Path, "remote", r.RemoteAddr, "error", err.Error())
			http.Error(w, "this webhook answers only the kube-apiserver: present a client certificate signed by the CA of --webhook-client-ca", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// admissionPaths are the paths webhookClientCA guards: the admission
// webhooks', not the read API's (its own check, readapi.go).
var admissionPaths = map[string]bool{TrainJobWebhookPath: true, JobSetWebhookPath: true, PodWebhookPath: true}

// clientCertServer registers the admission paths behind the client
// certificate check; every other path as it is.
type clientCertServer struct {
	webhook.Server
	ca *webhookClientCA
}

func (s clientCertServer) Register(path string, h http.Handler) {
	if admissionPaths[path] {
		h = s.ca.require(h)
	}
	s.Server.Register(path, h)
}

// webhookServer is the server registerWebhooks registers on: with
// --webhook-client-ca, one that guards the admission paths.
func (a *assembly) webhookServer() webhook.Server {
	s := a.mgr.GetWebhookServer()
	if a.opts.WebhookClientCA == "" {
		return s
	}
	return clientCertServer{Server: s, ca: newWebhookClientCA(a.opts.WebhookClientCA, a.mgr.GetLogger().WithName("webhook"))}
}

// checkWebhookClientCA reads the CA file once, so that a replica with an
// unreadable one refuses to start rather than refusing every admission.
func checkWebhookClientCA(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--webhook-client-ca: %w", err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(b) {
		return fmt.Errorf("--webhook-client-ca=%s: no PEM certificate in it", path)
	}
	return nil
}
