package testenv

import (
	"crypto/x509"
	"os"
	"path/filepath"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tether-dev/tether/test/framework/certs"
)

// FrontProxyClientName is the name the API server's front-proxy client
// certificate carries (--requestheader-allowed-names).
const FrontProxyClientName = "front-proxy-client"

// configureFrontProxy gives the API server what a real cluster's has for
// aggregated APIs (Options.FrontProxy): a client certificate from a CA of
// its own (not the client CA: the front proxy must not authenticate to the
// API server as a user), and the --requestheader-* flags it publishes in
// kube-system/extension-apiserver-authentication for aggregated API
// servers (Tether's read API) to trust. The files go under dir.
func configureFrontProxy(apiserver *envtest.APIServer, dir string) error {
	ca, err := certs.New(certs.CommonName("front-proxy-ca"))
	if err != nil {
		return err
	}
	client, err := ca.NewKeyPair(certs.CommonName(FrontProxyClientName), certs.ExtKeyUsage(x509.ExtKeyUsageClientAuth))
	if err != nil {
		return err
	}
	if err := client.WriteFiles(dir, "client"); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca.CertPEM, 0o600); err != nil {
		return err
	}
	apiserver.Configure().
		Set("requestheader-client-ca-file", filepath.Join(dir, "ca.crt")).
		Set("requestheader-allowed-names", FrontProxyClientName).
		Set("requestheader-username-headers", "X-Remote-User").
		Set("requestheader-group-headers", "X-Remote-Group").
		Set("requestheader-extra-headers-prefix", "X-Remote-Extra-").
		Set("proxy-client-cert-file", filepath.Join(dir, "client.crt")).
		Set("proxy-client-key-file", filepath.Join(dir, "client.key"))
	return nil
}
