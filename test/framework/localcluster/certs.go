package localcluster

import (
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tether-dev/tether/test/framework/certs"
)

// caNames are the CA names the other controllers' rotators check.
var caNames = []string{"kueue-ca", "kubeflow-trainer-ca"}

// servingNames are the serving certificate's DNS names: localhost, the
// Service names the other controllers' rotators check before they accept a
// pre-populated certificate instead of making their own, and Tether's
// Service, which the apiserver and the sidecars on the cluster network
// dial by name.
var servingNames = []string{"localhost",
	"kueue-webhook-service.kueue-system.svc",
	"kubeflow-trainer-controller-manager.kubeflow-system.svc",
	"jobset-webhook-service.jobset-system.svc",
	ControlPlaneService + "." + ControlPlaneNamespace + ".svc",
	ControlPlaneService + "." + ControlPlaneNamespace + ".svc." + ClusterDomain,
}

// CA signs the serving certificates of every webhook in the cluster: one CA
// for all loopback webhooks, put into each configuration's caBundle.
type CA struct {
	CertPEM []byte
	KeyPEM  []byte
	ca      *certs.CA
}

// certValidity is how long the cluster's CAs and certificates are valid.
const certValidity = 2 * 365 * 24 * time.Hour

func newCA() (*CA, error) {
	// The cert-controller rotators of Kueue and Trainer v2.0.0 keep a
	// pre-populated CA only if it verifies for their CA names and is
	// valid beyond their 90-day lookahead; RSA keys in PKCS#1 are the only
	// ones they parse.
	ca, err := certs.New(certs.RSA(), certs.CommonName("tether-localcluster-ca"), certs.Hosts(caNames...),
		certs.NotAfter(time.Now().Add(certValidity)))
	if err != nil {
		return nil, err
	}
	return &CA{CertPEM: ca.CertPEM, KeyPEM: ca.KeyPEM, ca: ca}, nil
}

// writeServingCert writes tls.crt, tls.key and ca.crt for 127.0.0.1, the
// cluster network's HostIP if it has one, and servingNames into dir (the
// layout controller-runtime and Tether read).
func (c *Cluster) writeServingCert(dir string) error {
	ips := []net.IP{net.ParseIP("127.0.0.1")}
	if c.Network != nil {
		ips = append(ips, c.Network.HostIP)
	}
	return c.CA.writeCert(dir, "tls", certRequest{commonName: "localhost", dnsNames: servingNames,
		ips: ips, usage: x509.ExtKeyUsageServerAuth})
}

// certRequest is one certificate the CA issues.
type certRequest struct {
	commonName   string
	organization []string
	dnsNames     []string
	ips          []net.IP
	usage        x509.ExtKeyUsage
}

// writeCert issues req and writes <prefix>.crt, <prefix>.key and ca.crt into
// dir (RSA keys in PKCS#1, the one format every component here reads).
func (ca *CA) writeCert(dir, prefix string, req certRequest) error {
	kp, err := ca.ca.NewKeyPair(certs.RSA(), certs.CommonName(req.commonName), certs.Organization(req.organization...),
		certs.Hosts(req.dnsNames...), certs.IPs(req.ips...), certs.ExtKeyUsage(req.usage),
		certs.NotAfter(time.Now().Add(certValidity)))
	if err != nil {
		return err
	}
	if err := kp.WriteFiles(dir, prefix); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "ca.crt"), ca.CertPEM, 0o600)
}

// FrontProxyClientName is the name the apiserver's front-proxy client
// certificate carries (--requestheader-allowed-names).
const FrontProxyClientName = "front-proxy-client"

// configureFrontProxy gives the apiserver what it needs to proxy aggregated
// APIs as a real cluster's does: a client certificate of its own, from a CA
// of its own (not the client CA: the front proxy's certificate must not
// authenticate to the apiserver as a user), and the --requestheader-* flags
// it publishes in kube-system/extension-apiserver-authentication for
// aggregated API servers (Tether's read API) to trust.
func (c *Cluster) configureFrontProxy(apiserver *envtest.APIServer) error {
	ca, err := newCA()
	if err != nil {
		return err
	}
	dir := filepath.Join(c.Dir, "front-proxy")
	if err := ca.writeCert(dir, "client", certRequest{commonName: FrontProxyClientName, usage: x509.ExtKeyUsageClientAuth}); err != nil {
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
