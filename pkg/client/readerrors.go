package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

// The causes of a failed read a caller can act on; a *ReadError wraps one
// (errors.Is) when it is the cause.
var (
	// ErrNoReadAPI: the API server serves no read API (the APIService
	// tetherv1.ReadAPIService is absent).
	ErrNoReadAPI = errors.New("the read API is not installed")
	// ErrReadForbidden: the caller may not read the binding's objects.
	ErrReadForbidden = errors.New("not allowed to read the job's objects")
	// ErrStoreUnavailable: the control plane could not read the artifact
	// store (its 503).
	ErrStoreUnavailable = errors.New("the artifact store is unavailable")
	// ErrReadRedirected: a read through the API server met a redirect to
	// the store, which that path never answers with.
	ErrReadRedirected = errors.New("the read API answered with a redirect")
)

// ReadError is a read refused by the read endpoint, or by the API server in
// front of the read API.
type ReadError struct {
	Status  int
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// Cause is one of the Err* causes above, or nil.
	Cause error
	// viaAPIServer: the read went through the API server's read API.
	viaAPIServer bool
}

func (e *ReadError) Error() string {
	where := "read endpoint (binding Service)"
	if e.viaAPIServer {
		where = "read API (through the API server)"
	}
	return fmt.Sprintf("%s: %d %s: %s", where, e.Status, e.Reason, e.Message)
}

// Unwrap is the cause.
func (e *ReadError) Unwrap() error { return e.Cause }

// readAnswer is a refusal's body: the control plane's (reason, message) or
// the API server's own Status (kind "Status").
type readAnswer struct {
	Kind    string `json:"kind"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// readFailure names the cause of a read of an object of a binding in
// namespace ns that was not answered 200, and what to do about it.
func (c *Client) readFailure(resp *http.Response, ns string) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var answer readAnswer
	if err := json.Unmarshal(raw, &answer); err != nil {
		// The API server answers some refusals in plain text: a group it
		// does not serve ("404 page not found"), a backend's redirect.
		answer = readAnswer{Message: truncate(strings.TrimSpace(string(raw)), 300)}
	}
	re := &ReadError{Status: resp.StatusCode, Reason: answer.Reason, Message: answer.Message, viaAPIServer: c.viaAPIServer}
	if re.Reason == "" {
		re.Reason = http.StatusText(resp.StatusCode)
	}
	fromControlPlane := answer.Kind != "Status" && answer.Reason != ""
	switch {
	case resp.StatusCode == http.StatusTemporaryRedirect:
		re.Reason, re.Cause = "Redirect", ErrReadRedirected
		re.Message = "the control plane answered with a redirect to the store (" + truncate(resp.Header.Get("Location"), 80) +
			"), and reads through the API server are always streamed: the control plane is older than this client or misconfigured " +
			"(the API server passes a redirect on only with --aggregator-reject-forwarding-redirect=false): upgrade Tether, " +
			"or read from inside the cluster through the binding Service (--tether-url, Options.ReadURL)"
	case fromControlPlane:
		c.controlPlaneFailure(re, ns)
	case c.viaAPIServer:
		apiServerFailure(re, ns)
	default:
		re.Message = "the answer is not the control plane's (is --tether-url the binding Service?): " + re.Message
	}
	return re
}

// controlPlaneFailure explains the control plane's own refusals whose
// cause the caller can act on; the others carry the control plane's words.
func (c *Client) controlPlaneFailure(re *ReadError, ns string) {
	switch {
	case re.Status == http.StatusServiceUnavailable && re.Reason == "store":
		re.Cause = ErrStoreUnavailable
		re.Message = "the control plane could not read the object from the artifact store (503 from the control plane): " +
			"the store is down or unreachable from the control plane; retry later, or have the platform team check the store " +
			"(the control plane's log has the store's error)"
	case re.Status == http.StatusForbidden:
		re.Cause = ErrReadForbidden
		if c.viaAPIServer {
			re.Message += ": " + readAPIGrant(ns)
		}
	}
}

// apiServerFailure explains an answer of the API server itself: the read
// did not reach the read API, or the read API's answer was refused.
func apiServerFailure(re *ReadError, ns string) {
	said := ""
	if re.Message != "" {
		said = " (the API server said: " + re.Message + ")"
	}
	switch re.Status {
	case http.StatusNotFound:
		re.Cause = ErrNoReadAPI
		re.Message = "the API server serves no " + tetherv1.ReadAPIGroup + "/" + tetherv1.ReadAPIVersion + ": the read API is not installed " +
			"(the APIService " + tetherv1.ReadAPIService + " is absent). A cluster administrator enables it with the chart value " +
			"readAPI.enabled=true or the kustomize component manifests/overlays/read-api (docs/platform.md, \"Install\"); " +
			"from inside the cluster, the binding Service serves the same reads (--tether-url, Options.ReadURL)" + said
	case http.StatusForbidden:
		re.Cause = ErrReadForbidden
		re.Message = readAPIGrant(ns) + said
	case http.StatusServiceUnavailable:
		re.Message = "the API server cannot reach the read API: the APIService " + tetherv1.ReadAPIService +
			" is registered but not Available (no control-plane replica ready?); kubectl get apiservice " + tetherv1.ReadAPIService +
			" says why" + said
	case http.StatusBadGateway:
		re.Message = "the API server got no usable answer from the read API" + said
		if strings.Contains(re.Message, "redirect") {
			re.Cause = ErrReadRedirected
			re.Message = "the control plane answered with a redirect to the store, which the API server does not pass on: " +
				"the control plane is older than this client (a current one streams every read through the API server): upgrade Tether, " +
				"or read from inside the cluster through the binding Service (--tether-url, Options.ReadURL)" + said
		}
	case http.StatusUnauthorized:
		re.Message = "the API server did not accept the kubeconfig's credentials (expired token?)" + said
	default:
		if said == "" {
			re.Message = "the API server answered with no error body; kubectl get apiservice " + tetherv1.ReadAPIService + " shows whether the read API is Available"
		}
	}
}

// readAPIGrant is the permission a read through the API server needs.
func readAPIGrant(ns string) string {
	return fmt.Sprintf("reading a job's objects through the API server needs the verb get on the resource %s/%s in the API group %s "+
		"in namespace %s: an RBAC Role bound to you there must grant it, e.g. the shipped ClusterRole tether-artifact-reader: "+
		"kubectl create rolebinding artifact-readers -n %s --clusterrole=tether-artifact-reader --user=<you> (or --group, --serviceaccount)",
		tetherv1.ReadAPIResource, tetherv1.ReadAPISubresource, tetherv1.ReadAPIGroup, ns, ns)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
