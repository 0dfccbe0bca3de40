package localcluster

import (
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tether-dev/tether/test/framework/testenv"
)

// configureAPIServer makes kube-apiserver a member of the cluster network:
// it listens on the network's HostIP only (the host's veth end; the harness reaches
// it there too), advertises that address, so the `kubernetes` Service's
// endpoints (its own lease reconciler) point where the nodes reach it,
// allocates Service IPs from its ServiceCIDR, dials a webhook Service's
// endpoint rather than its ClusterIP (the host has routes to pods, not
// kube-proxy), and admits pods with their ServiceAccount's token mounted.
// Its serving certificate, from the cluster CA, names the ClusterIP and the
// Service's DNS names, so in-cluster config verifies it.
func (nw *ClusterNetwork) configureAPIServer(apiserver *envtest.APIServer) error {
	c := nw.c
	addr, err := testenv.FreeAddr()
	if err != nil {
		return err
	}
	apiserver.SecureServing.Address = nw.HostIP.String()
	apiserver.SecureServing.Port = portOf(addr)
	// envtest makes a serving certificate only when the directory has none,
	// and then trusts its own CA; this one is the cluster CA's.
	apiserver.CertDir = filepath.Join(c.Dir, "apiserver-certs")
	apiserver.SecureServing.CA = c.CA.CertPEM
	names := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc." + ClusterDomain}
	if err := c.CA.writeCert(apiserver.CertDir, "apiserver", certRequest{commonName: "kube-apiserver", dnsNames: names,
		ips: []net.IP{nw.HostIP, nw.KubernetesServiceIP, net.ParseIP("127.0.0.1")}, usage: x509.ExtKeyUsageServerAuth}); err != nil {
		return err
	}
	// The ServiceAccount token signer (envtest writes these with its own
	// certificate; the names are envtest's).
	if err := c.CA.writeCert(apiserver.CertDir, "sa-signer", certRequest{commonName: "service-accounts", usage: x509.ExtKeyUsageServerAuth}); err != nil {
		return err
	}
	// Its log (envtest keeps none).
	logf, err := os.OpenFile(filepath.Join(c.logDir(), "kube-apiserver.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	apiserver.Out, apiserver.Err = logf, logf
	// kube-apiserver may drain connections for up to its request timeout
	// (60s) when it stops; envtest's default 20s would SIGKILL it.
	c.env.ControlPlaneStopTimeout = 70 * time.Second
	apiserver.Configure().
		Set("advertise-address", nw.HostIP.String()).
		Set("endpoint-reconciler-type", "lease").
		Set("service-cluster-ip-range", nw.ServiceCIDR.String()).
		Set("enable-aggregator-routing", "true").
		Disable("disable-admission-plugins")
	return nil
}

// controllerManager adds the controllers the network needs: EndpointSlices
// for kube-proxy and CoreDNS, the kube-root-ca.crt ConfigMap every
// ServiceAccount token volume mounts (the cluster CA, which signed the
// apiserver's certificate), Deployments for CoreDNS and the installed
// control plane, and the status of PodDisruptionBudgets (without it the
// eviction API refuses every pod a budget covers, and `kubectl drain`
// waits forever).
func (nw *ClusterNetwork) controllerManager(controllers string, args []string) (string, []string) {
	controllers += ",endpointslice-controller,root-ca-certificate-publisher-controller,deployment-controller,replicaset-controller,disruption-controller"
	return controllers, append(args, "--root-ca-file="+filepath.Join(nw.c.CertDir, "ca.crt"))
}
