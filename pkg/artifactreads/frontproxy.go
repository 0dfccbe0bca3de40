package artifactreads

import (
	"context"
	"errors"
	"net/http"
	"sync"

	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
)

// The ConfigMap the kube-apiserver keeps for aggregated API servers
// (--requestheader-* flags): the CA of its front-proxy client certificate,
// the names that certificate may carry, and the headers that name the user.
// The keys are the kube-apiserver's, as k8s.io/apiserver's delegating
// authentication reads them.
const (
	AuthenticationConfigMapNamespace = "kube-system"
	AuthenticationConfigMap          = "extension-apiserver-authentication"
)

// FrontProxy authenticates what the kube-apiserver proxies to an aggregated
// API: the TLS client certificate must chain to the requestheader CA and
// carry an allowed name; only then are the user, groups and extra read from
// the headers the ConfigMap names. A request without that certificate is
// nobody's, whatever headers it sends. The ConfigMap is followed as the
// kube-apiserver rotates it (k8s.io/apiserver's controllers, the ones
// metrics-server runs).
type FrontProxy struct {
	ca      *dynamiccertificates.ConfigMapCAController
	headers *headerrequest.RequestHeaderAuthRequestController
	// user authenticates a request and its user; proxy only the
	// certificate (discovery, which the aggregator asks as itself).
	user, proxy authenticator.Request
}

// NewFrontProxy follows kube-system/extension-apiserver-authentication
// through cs once Start runs.
func NewFrontProxy(cs kubernetes.Interface) (*FrontProxy, error) {
	ca, err := dynamiccertificates.NewDynamicCAFromConfigMapController("front-proxy-client-ca",
		AuthenticationConfigMapNamespace, AuthenticationConfigMap, "requestheader-client-ca-file", cs)
	if err != nil {
		return nil, err
	}
	headers := headerrequest.NewRequestHeaderAuthRequestController(AuthenticationConfigMap, AuthenticationConfigMapNamespace, cs,
		"requestheader-username-headers", "requestheader-uid-headers", "requestheader-group-headers",
		"requestheader-extra-headers-prefix", "requestheader-allowed-names")
	return newFrontProxy(ca.VerifyOptions, ca, headers), nil
}

func newFrontProxy(verify x509request.VerifyOptionFunc, ca *dynamiccertificates.ConfigMapCAController, headers *headerrequest.RequestHeaderAuthRequestController) *FrontProxy {
	f := &FrontProxy{ca: ca, headers: headers}
	names := headerrequest.StringSliceProviderFunc(headers.AllowedClientNames)
	f.user = headerrequest.NewDynamicVerifyOptionsSecure(verify, names,
		headerrequest.StringSliceProviderFunc(headers.UsernameHeaders), headerrequest.StringSliceProviderFunc(headers.UIDHeaders),
		headerrequest.StringSliceProviderFunc(headers.GroupHeaders), headerrequest.StringSliceProviderFunc(headers.ExtraHeaderPrefixes))
	f.proxy = x509request.NewDynamicCAVerifier(verify, authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) {
		return &authenticator.Response{}, true, nil
	}), names)
	return f
}

// Start follows the ConfigMap until ctx ends (a controller-runtime
// Runnable). A ConfigMap that is missing or unreadable is not fatal: every
// read through the API server is refused, and explained, until it can be
// read (Loaded).
func (f *FrontProxy) Start(ctx context.Context) error {
	_ = f.headers.RunOnce(ctx) // the controller logs a refusal, with its fix
	var wg sync.WaitGroup
	wg.Go(func() { f.ca.Run(ctx, 1) })
	wg.Go(func() { f.headers.Run(ctx, 1) })
	wg.Wait()
	return nil
}

// Loaded reports whether the front proxy's CA has been read.
func (f *FrontProxy) Loaded() bool { return len(f.ca.CurrentCABundleContent()) > 0 }

// errNotProxied is a request that does not come from the API server's
// front proxy.
var errNotProxied = errors.New("not the kube-apiserver's front proxy")

// Authenticate returns the user the API server authenticated, from a
// request it proxied.
func (f *FrontProxy) Authenticate(req *http.Request) (authnv1.UserInfo, error) {
	resp, ok, err := f.user.AuthenticateRequest(req)
	if err != nil {
		return authnv1.UserInfo{}, errors.Join(errNotProxied, err)
	}
	if !ok {
		return authnv1.UserInfo{}, errNotProxied
	}
	u := resp.User
	info := authnv1.UserInfo{Username: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups()}
	if extra := u.GetExtra(); len(extra) > 0 {
		info.Extra = make(map[string]authnv1.ExtraValue, len(extra))
		for k, v := range extra {
			info.Extra[k] = v
		}
	}
	return info, nil
}

// Proxied reports whether req carries the front proxy's certificate,
// whoever the user (the aggregator's own discovery requests).
func (f *FrontProxy) Proxied(req *http.Request) bool {
	_, ok, err := f.proxy.AuthenticateRequest(req)
	return ok && err == nil
}
