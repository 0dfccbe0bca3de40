package client_test

import (
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/rest"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/client"
	"github.com/tether-dev/tether/pkg/upload"
)

// apiServerAnswer is what the stand-in API server answers for one log.
type apiServerAnswer struct {
	status   int
	body     string
	location string
}

// Without ReadURL, reads go to the kubeconfig's API server, under the
// aggregated read API, with the kubeconfig's credentials, and always ask
// for the object streamed; every failure names its cause and what to do.
// A redirect met on that path is never followed.
func TestReadsThroughTheAPIServerNameTheCause(t *testing.T) {
	var storeHits atomic.Int32
	store := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		storeHits.Add(1)
		_, _ = w.Write([]byte("from the store"))
	}))
	defer store.Close()
	const statusNotFound = `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","code":404}`
	answers := map[string]apiServerAnswer{
		"streamed":     {status: http.StatusOK, body: "checkpoint"},
		"notinstalled": {status: http.StatusNotFound, body: statusNotFound},
		"plain404":     {status: http.StatusNotFound, body: "404 page not found\n"},
		"forbidden": {status: http.StatusForbidden, body: `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"workerbindings.artifacts.tether.dev \"llm\" is forbidden: ` +
			`User \"system:serviceaccount:team-a:tenant\" cannot get resource \"workerbindings/objects\" in API group \"artifacts.tether.dev\" in the namespace \"team-a\"","reason":"Forbidden","code":403}`},
		"store":     {status: http.StatusServiceUnavailable, body: `{"reason":"store","message":"the artifact store failed: retry (the control plane's log has the error)"}`},
		"noreplica": {status: http.StatusServiceUnavailable, body: `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"service unavailable","reason":"ServiceUnavailable","code":503}`},
		// kube-apiserver's own words, in plain text, for an aggregated
		// API's redirect.
		"rejected":   {status: http.StatusBadGateway, body: "the backend attempted to redirect this request, which is not permitted"},
		"redirected": {status: http.StatusTemporaryRedirect, location: store.URL + "/bucket/job-1/x?X-Amz-Signature=x"},
	}
	prefix := tetherv1.ReadAPIPathPrefix + "team-a/workerbindings/llm/objects/" + upload.LogsDir
	var mu sync.Mutex
	var asked []string
	apiserver := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pod := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, prefix), ".log")
		mu.Lock()
		asked = append(asked, pod+" stream="+r.Header.Get("X-Tether-Stream")+" auth="+r.Header.Get("Authorization"))
		mu.Unlock()
		a, ok := answers[pod]
		if !ok || !strings.HasPrefix(r.URL.Path, prefix) {
			t.Errorf("unexpected request %s", r.URL.Path)
			a = answers["notinstalled"]
		}
		if a.location != "" {
			w.Header().Set("Location", a.location)
		}
		if strings.HasPrefix(a.body, "{") {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(a.status)
		_, _ = w.Write([]byte(a.body))
	}))
	defer apiserver.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: apiserver.Certificate().Raw})
	c, err := client.New(&rest.Config{Host: apiserver.URL, BearerToken: "tenant-token", TLSClientConfig: rest.TLSClientConfig{CAData: ca}}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	wb := binding()
	wb.Status.Artifacts = &tetherv1.ArtifactsStatus{}
	for pod := range answers {
		wb.Status.Artifacts.Logs = append(wb.Status.Artifacts.Logs, upload.LogKey("job-1", pod))
	}
	read := func(pod string) error {
		rc, err := c.Log(t.Context(), wb, pod)
		if err != nil {
			return err
		}
		defer rc.Close()
		body, err := io.ReadAll(rc)
		if err == nil && string(body) != "checkpoint" {
			t.Errorf("Log(%s) = %q, want the streamed log", pod, body)
		}
		return err
	}

	if err := read("streamed"); err != nil {
		t.Fatalf("Log(streamed): %v", err)
	}
	for _, tc := range []struct {
		pod   string
		cause error
		says  []string
	}{
		{"notinstalled", client.ErrNoReadAPI, []string{"not installed", "APIService " + tetherv1.ReadAPIService + " is absent", "readAPI.enabled=true", "manifests/overlays/read-api", "docs/platform.md"}},
		{"plain404", client.ErrNoReadAPI, []string{"APIService " + tetherv1.ReadAPIService + " is absent", "readAPI.enabled=true"}},
		{"forbidden", client.ErrReadForbidden, []string{"verb get", "resource workerbindings/objects", "API group artifacts.tether.dev", "namespace team-a", "RBAC Role", "tether-artifact-reader"}},
		{"store", client.ErrStoreUnavailable, []string{"503 from the control plane", "artifact store", "retry later"}},
		{"noreplica", nil, []string{"APIService " + tetherv1.ReadAPIService + " is registered but not Available"}},
		{"rejected", client.ErrReadRedirected, []string{"older than this client", "upgrade Tether"}},
		{"redirected", client.ErrReadRedirected, []string{"307", "older than this client or misconfigured"}},
	} {
		err := read(tc.pod)
		var re *client.ReadError
		if !errors.As(err, &re) || re.Status != answers[tc.pod].status {
			t.Errorf("%s: %v, want a *ReadError with status %d", tc.pod, err, answers[tc.pod].status)
			continue
		}
		if tc.cause != nil && !errors.Is(err, tc.cause) {
			t.Errorf("%s: %v, want errors.Is %v", tc.pod, err, tc.cause)
		}
		for _, s := range append(tc.says, "read API (through the API server)") {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: %q does not say %q", tc.pod, err, s)
			}
		}
		if strings.Contains(err.Error(), "is --tether-url the binding Service") {
			t.Errorf("%s: %q asks about --tether-url, which was not used", tc.pod, err)
		}
	}
	if n := storeHits.Load(); n != 0 {
		t.Errorf("the store was asked %d times: a redirect met through the API server must not be followed", n)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, a := range asked {
		if !strings.HasSuffix(a, " stream=true auth=Bearer tenant-token") {
			t.Errorf("the API server was asked %q: want every read streamed, with the kubeconfig's token", a)
		}
	}
}
