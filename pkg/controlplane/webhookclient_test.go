package controlplane

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"

	"github.com/tether-dev/tether/test/framework/certs"
)

// TestWebhookClientCA: with --webhook-client-ca, an admission path answers
// only a caller presenting a client certificate the CA signed for client
// authentication; no certificate, another CA's, or a server certificate
// get 403.
func TestWebhookClientCA(t *testing.T) {
	ca, other := certs.NewCA(t), certs.NewCA(t)
	file := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(file, ca.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := checkWebhookClientCA(file); err != nil {
		t.Fatal(err)
	}
	if err := checkWebhookClientCA(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Fatal("a missing CA file passed the check")
	}
	guard := newWebhookClientCA(file, logr.Discard())
	srv := httptest.NewUnstartedServer(guard.require(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("review"))
	})))
	srv.TLS = &tls.Config{}
	requestClientCerts(srv.TLS)
	srv.StartTLS()
	defer srv.Close()
	post := func(cert *tls.Certificate) int {
		tr := srv.Client().Transport.(*http.Transport).Clone()
		if cert != nil {
			tr.TLSClientConfig.Certificates = []tls.Certificate{*cert}
		}
		resp, err := (&http.Client{Transport: tr}).Post(srv.URL+PodWebhookPath, "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	apiserver, foreign, server := ca.Client(t, "kube-apiserver").TLS(), other.Client(t, "kube-apiserver").TLS(), ca.Server(t, "kube-apiserver").TLS()
	for name, c := range map[string]struct {
		cert *tls.Certificate
		want int
	}{
		"the API server's": {&apiserver, http.StatusOK},
		"none":             {nil, http.StatusForbidden},
		"another CA's":     {&foreign, http.StatusForbidden},
		"a server's, not for client authentication": {&server, http.StatusForbidden},
	} {
		if got := post(c.cert); got != c.want {
			t.Errorf("certificate %s: %d, want %d", name, got, c.want)
		}
	}
}
