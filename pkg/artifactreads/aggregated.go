package artifactreads

import (
	"encoding/json"
	"net/http"
	"strings"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kube-openapi/pkg/handler3"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

// NewAggregated returns the read endpoint as an aggregated API
// (tetherv1.ReadAPIService): the kube-apiserver has authenticated the caller
// and authorized get on workerbindings/objects in tetherv1.ReadAPIGroup
// before it proxies the read here; the handler trusts only requests with
// the API server's front-proxy certificate (fp), asks again for the same
// permission (SubjectAccessReview: delegated authorization, as any
// aggregated API server does), and answers the discovery documents and
// the OpenAPI v3 document (openapi.go) the aggregator asks for. Objects are streamed, never redirected to the
// store, whatever --artifact-read-redirect says: the API server refuses an
// aggregated API's redirects. Mount it on "/apis/" of a listener that
// requests client certificates (tls.RequestClientCert).
func NewAggregated(opts Options, fp *FrontProxy) http.Handler {
	h := newHandler(opts)
	h.route = route{
		prefix: tetherv1.ReadAPIPathPrefix,
		identify: func(w http.ResponseWriter, req *http.Request) (authnv1.UserInfo, bool) {
			user, err := fp.Authenticate(req)
			if err != nil {
				h.notProxied(w, fp)
				return authnv1.UserInfo{}, false
			}
			return user, h.allow(w)
		},
		attributes: func(ns, name string) authzv1.ResourceAttributes {
			return authzv1.ResourceAttributes{Namespace: ns, Verb: "get", Group: tetherv1.ReadAPIGroup,
				Resource: tetherv1.ReadAPIResource, Subresource: tetherv1.ReadAPISubresource, Name: name}
		},
		forbidden:  "grant get on workerbindings/objects in API group " + tetherv1.ReadAPIGroup + " (ClusterRole tether-artifact-reader, bound in the namespace)",
		streamOnly: true,
	}
	return &aggregated{reads: h, fp: fp, openapi: newOpenAPIService()}
}

type aggregated struct {
	reads   *Handler
	fp      *FrontProxy
	openapi *handler3.OpenAPIService
}

// notProxied refuses a request without the front proxy's certificate.
func (h *Handler) notProxied(w http.ResponseWriter, fp *FrontProxy) {
	if !fp.Loaded() {
		h.fail(w, http.StatusServiceUnavailable, "no_front_proxy_ca",
			"the control plane has not read %s/%s (the kube-apiserver's --requestheader-client-ca-file), so it cannot tell the API server's proxied requests from others: "+
				"check that the kube-apiserver runs with --requestheader-* flags and that the control plane's ServiceAccount is bound to the Role extension-apiserver-authentication-reader in %s",
			AuthenticationConfigMapNamespace, AuthenticationConfigMap, AuthenticationConfigMapNamespace)
		return
	}
	h.fail(w, http.StatusUnauthorized, "not_proxied",
		"this API is served through the kube-apiserver only: request %s<namespace>/workerbindings/<name>/objects/<path> from the API server with your kubeconfig", tetherv1.ReadAPIPathPrefix)
}

var (
	groupVersion = metav1.GroupVersionForDiscovery{GroupVersion: tetherv1.ReadAPIGroup + "/" + tetherv1.ReadAPIVersion, Version: tetherv1.ReadAPIVersion}
	apiGroup     = metav1.APIGroup{
		TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"},
		Name:     tetherv1.ReadAPIGroup, Versions: []metav1.GroupVersionForDiscovery{groupVersion}, PreferredVersion: groupVersion,
	}
	// discovery is what the aggregator and kubectl read: the group, and
	// one subresource with get (nothing to list, create or delete, so
	// nothing for the garbage collector or the namespace controller).
	discovery = map[string]any{
		"/apis":                          metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{apiGroup}},
		"/apis/" + tetherv1.ReadAPIGroup: apiGroup,
		"/apis/" + groupVersion.GroupVersion: metav1.APIResourceList{
			TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
			GroupVersion: groupVersion.GroupVersion,
			APIResources: []metav1.APIResource{{
				Name: tetherv1.ReadAPIResource + "/" + tetherv1.ReadAPISubresource, Namespaced: true,
				Kind: "WorkerBindingObject", Verbs: metav1.Verbs{"get"},
			}},
		},
	}
)

func (a *aggregated) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if strings.HasPrefix(req.URL.Path, tetherv1.ReadAPIPathPrefix) {
		a.reads.ServeHTTP(w, req)
		return
	}
	p := strings.TrimSuffix(req.URL.Path, "/")
	doc, ok := discovery[p]
	switch {
	case !a.fp.Proxied(req):
		a.reads.notProxied(w, a.fp)
	case req.Method == http.MethodGet && p == "/openapi/v3":
		a.openapi.HandleDiscovery(w, req)
	case req.Method == http.MethodGet && p == "/openapi/v3/"+OpenAPIGroupVersion:
		a.openapi.HandleGroupVersion(w, req)
	case !ok:
		// /openapi/v2 included: the aggregator takes its 404 as "no v2
		// spec" and publishes the v3 document only.
		a.reads.fail(w, http.StatusNotFound, "not_found", "%q is not served: reads are under %s", truncate(req.URL.Path, 200), tetherv1.ReadAPIPathPrefix)
	case req.Method != http.MethodGet:
		w.Header().Set("Allow", http.MethodGet)
		a.reads.fail(w, http.StatusMethodNotAllowed, "method", "%s is not served: discovery answers GET only", req.Method)
	default:
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(doc)
	}
}
