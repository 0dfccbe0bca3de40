package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

// Options configure New.
type Options struct {
	// ReadURL is the base URL of the control plane's read endpoint (the
	// binding Service, e.g. https://tether-control-plane.tether-system.svc:8443),
	// for callers inside the cluster. Empty: reads go through the
	// kube-apiserver of cfg, with cfg's credentials, to the aggregated read
	// API (tetherv1.ReadAPIService; the chart's readAPI.enabled).
	ReadURL string
	// ReadCA is the PEM bundle that signs the read endpoint's certificate
	// (the control plane's CA); empty uses the system roots.
	ReadCA []byte
	// ReadServerName is the name the read endpoint's certificate must
	// carry when ReadURL reaches it by another (a pod IP, a port-forward's
	// localhost): the Service's DNS name, which the control plane's
	// certificate names, e.g. tether-control-plane.tether-system.svc.
	// Empty: ReadURL's host.
	ReadServerName string
	// StoreTransport fetches the presigned URLs the binding Service
	// redirects to (ReadURL set) from the store (default: a
	// plain transport with the system roots). It never carries the
	// caller's Kubernetes credentials.
	StoreTransport http.RoundTripper
}

// Client reads and commands bound jobs.
type Client struct {
	kube crclient.WithWatch
	// read is the read endpoint's base URL and readPrefix the path reads
	// start with: the binding Service's tetherv1.ReadPathPrefix, or the
	// API server's tetherv1.ReadAPIPathPrefix (viaAPIServer).
	read         *url.URL
	readPrefix   string
	viaAPIServer bool
	http         *http.Client
	store        *http.Client
}

// Scheme is what the client speaks: Kubernetes' built-in types and Tether's.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = tetherv1.AddToScheme(s)
	return s
}

// New returns a Client for cfg. Reads go through cfg's API server (the
// aggregated read API) unless opts.ReadURL names the binding Service; that
// endpoint authenticates cfg's bearer token only (token, token file or exec
// plugin), so a kubeconfig with a client certificate only reads through
// the API server.
func New(cfg *rest.Config, opts Options) (*Client, error) {
	kube, err := crclient.NewWithWatch(cfg, crclient.Options{Scheme: Scheme()})
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	c := &Client{kube: kube}
	st := opts.StoreTransport
	if st == nil {
		st = &http.Transport{Proxy: http.ProxyFromEnvironment, ResponseHeaderTimeout: 30 * time.Second}
	}
	c.store = &http.Client{Transport: st, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if opts.ReadURL == "" {
		return c, c.throughAPIServer(cfg)
	}
	if c.read, err = url.Parse(strings.TrimSuffix(opts.ReadURL, "/")); err != nil || c.read.Scheme != "https" || c.read.Host == "" {
		return nil, fmt.Errorf("read URL %q: want https://host[:port] of the control plane's binding Service", opts.ReadURL)
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: opts.ReadServerName}
	if len(opts.ReadCA) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(opts.ReadCA) {
			return nil, errors.New("read CA: no PEM certificate found")
		}
		tlsConfig.RootCAs = pool
	}
	base := &http.Transport{TLSClientConfig: tlsConfig, Proxy: http.ProxyFromEnvironment, ResponseHeaderTimeout: 30 * time.Second}
	// Only the bearer token of cfg, never its client certificate (the
	// read endpoint has no use for it): HTTPWrappersForConfig adds the
	// token, a rotating token file or an exec plugin's token.
	rt, err := rest.HTTPWrappersForConfig(cfg, base)
	if err != nil {
		return nil, err
	}
	hasToken := cfg.BearerToken != "" || cfg.BearerTokenFile != "" || cfg.ExecProvider != nil || cfg.AuthProvider != nil
	if !hasToken {
		rt = noToken{}
	}
	// Redirects are followed by hand: the presigned URL must be fetched
	// without the caller's Kubernetes token.
	c.http = &http.Client{Transport: rt, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	c.readPrefix = tetherv1.ReadPathPrefix
	return c, nil
}

// throughAPIServer sends reads to the aggregated read API on cfg's API
// server, with every credential cfg has (token, client certificate, exec
// plugin): the API server authenticates and authorizes the caller.
func (c *Client) throughAPIServer(cfg *rest.Config) error {
	base, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return fmt.Errorf("the kubeconfig's server: %w", err)
	}
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return err
	}
	c.read = base
	c.readPrefix = strings.TrimSuffix(base.Path, "/") + tetherv1.ReadAPIPathPrefix
	c.viaAPIServer = true
	// No redirect is followed: reads through the API server are streamed,
	// and a redirect met there is an error naming its cause (open).
	c.http = &http.Client{Transport: rt, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return nil
}

// noToken refuses reads when the kubeconfig carries no bearer token.
type noToken struct{}

func (noToken) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, errors.New("the kubeconfig has no bearer token, and the read endpoint authenticates Kubernetes bearer tokens: " +
		"use a kubeconfig user with a token (kubectl create token <serviceaccount>) or pass --token")
}

// Kube is the underlying Kubernetes client.
func (c *Client) Kube() crclient.WithWatch { return c.kube }

// Get returns the WorkerBinding of TrainJob namespace/name (a binding has
// its TrainJob's name).
func (c *Client) Get(ctx context.Context, namespace, name string) (*tetherv1.WorkerBinding, error) {
	wb := &tetherv1.WorkerBinding{}
	if err := c.kube.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, wb); err != nil {
		return nil, err
	}
	return wb, nil
}

// List returns the WorkerBindings of namespace ("" for every namespace).
func (c *Client) List(ctx context.Context, namespace string) ([]tetherv1.WorkerBinding, error) {
	var list tetherv1.WorkerBindingList
	var opts []crclient.ListOption
	if namespace != "" {
		opts = append(opts, crclient.InNamespace(namespace))
	}
	if err := c.kube.List(ctx, &list, opts...); err != nil {
		return nil, err
	}
	return list.Items, nil
}
