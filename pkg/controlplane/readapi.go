package controlplane

import (
	"crypto/tls"

	"github.com/tether-dev/tether/pkg/artifactreads"
)

// Paths of the aggregated read API on the webhook listener: the
// kube-apiserver proxies tetherv1.ReadAPIService there (the APIService
// names the Service's webhook port), and asks it for discovery and OpenAPI.
var readAPIPaths = []string{"/apis", "/apis/", "/openapi/"}

// readAPI builds the read endpoint served through the kube-apiserver
// (--read-api): the reads of artifactreads.NewAggregated, which trusts only
// the API server's front-proxy certificate, read from
// kube-system/extension-apiserver-authentication as the API server
// rotates it. It is served on the webhook listener, which the API server
// already reaches and trusts (one serving certificate, one caBundle).
func (a *assembly) readAPI() error {
	if !a.opts.ReadAPI {
		return nil
	}
	fp, err := artifactreads.NewFrontProxy(a.clientset)
	if err != nil {
		return err
	}
	if err := a.mgr.Add(everyReplica(fp.Start)); err != nil {
		return err
	}
	opts := a.reads
	opts.OnRefused = func(reason string) { a.binding.Refused("readapi_" + reason) }
	a.aggregatedReads = artifactreads.NewAggregated(opts, fp)
	return nil
}

// requestClientCerts lets the webhook listener see the front proxy's
// client certificate (verified per request by the read API, against a CA
// that rotates) without requiring one: the API server presents none when
// it calls the admission webhooks.
func requestClientCerts(c *tls.Config) { c.ClientAuth = tls.RequestClientCert }
