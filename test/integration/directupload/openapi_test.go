package directupload

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/kube-openapi/pkg/handler3"
	"k8s.io/kube-openapi/pkg/spec3"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/artifactreads"
	"github.com/tether-dev/tether/pkg/client"
	"github.com/tether-dev/tether/test/framework/s3server"
	"github.com/tether-dev/tether/test/framework/testenv"
)

// TestReadAPIOpenAPI: the kube-apiserver publishes the read API's OpenAPI
// v3 document, fetched from the control plane by its aggregator, at
// /openapi/v3/apis/artifacts.tether.dev/v1alpha1, and that document
// describes every request the Go client makes through the API server: its
// path (recorded as the client sends it, so a new path the client calls
// fails here until it is documented), its method, and every Tether header
// it sends.
func TestReadAPIOpenAPI(t *testing.T) {
	ctx := context.Background()
	s := startOwnBucketWithReadAPI(t, s3server.VersityGW)
	const ns = "team-a"
	j := s.newJob(t, ns)
	j.register(t)
	for rel, body := range map[string]string{"ckpt/step-1.pt": "weights", "metrics.json": `{"loss":1}`} {
		p := filepath.Join(j.artifactDir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	j.flush(t)
	j.succeed(t)
	wb := j.binding(t)
	s.env.RegisterReadAPI(t)

	doc := publishedOpenAPI(t, s.env.Config)
	if doc.Info == nil || !strings.Contains(doc.Info.Title, tetherv1.ReadAPIService) || !strings.HasPrefix(doc.Version, "3.0.") {
		t.Fatalf("the published document is not the read API's OpenAPI 3.0 document: openapi %q, info %+v", doc.Version, doc.Info)
	}

	// Every request the Go client sends, as it leaves it.
	var mu sync.Mutex
	var sent []*http.Request
	cfg := artifactReader(t, s.env, ns, "reader")
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			mu.Lock()
			sent = append(sent, req.Clone(req.Context()))
			mu.Unlock()
			return rt.RoundTrip(req)
		})
	}
	reader, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	list, err := reader.Artifacts(ctx, wb)
	if err != nil || len(list) != 2 {
		t.Fatalf("listing through the read API: %v %+v, want the 2 files written", err, list)
	}
	for _, a := range list {
		if _, err := reader.Download(ctx, wb, a.Path, io.Discard); err != nil {
			t.Fatalf("downloading %s: %v", a.Path, err)
		}
	}
	for _, pod := range client.LogPods(wb) {
		if body, err := reader.Log(ctx, wb, pod); err == nil {
			_ = body.Close()
		}
	}

	var reads int
	for _, req := range sent {
		if !strings.HasPrefix(req.URL.Path, "/"+artifactreads.OpenAPIGroupVersion+"/") {
			continue // the WorkerBinding CRD's own API, which the API server documents
		}
		reads++
		op, template := describedOperation(doc, req)
		if op == nil {
			t.Errorf("the client's %s %s is not described in the published document (paths: %v)", req.Method, req.URL.Path, pathTemplates(doc))
			continue
		}
		for name := range req.Header {
			if strings.HasPrefix(strings.ToLower(name), "x-tether-") && !declaresHeader(op, name) {
				t.Errorf("the client sends the header %s on %s, which the document's %s %s does not declare", name, req.URL.Path, req.Method, template)
			}
		}
	}
	// The manifest, then each file: a client that read nothing would
	// prove nothing.
	if want := 1 + len(list); reads < want {
		t.Fatalf("recorded %d reads through the API server, want at least %d", reads, want)
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// publishedOpenAPI reads the API server's OpenAPI v3 discovery until it
// names the read API (the aggregator fetches a new APIService's document a
// second after adding it), then the document at the URL it gives.
func publishedOpenAPI(t *testing.T, cfg *rest.Config) *spec3.OpenAPI {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	host := strings.TrimSuffix(cfg.Host, "/")
	var url string
	testenv.Eventually(t, 90*time.Second, func() error {
		var discovery handler3.OpenAPIV3Discovery
		if err := getJSON(hc, host+"/openapi/v3", &discovery); err != nil {
			return err
		}
		gv, ok := discovery.Paths[artifactreads.OpenAPIGroupVersion]
		if !ok {
			return fmt.Errorf("the API server's /openapi/v3 names no %s yet", artifactreads.OpenAPIGroupVersion)
		}
		url = gv.ServerRelativeURL
		return nil
	})
	if !strings.HasPrefix(url, "/openapi/v3/"+artifactreads.OpenAPIGroupVersion+"?hash=") {
		t.Errorf("serverRelativeURL %q, want /openapi/v3/%s?hash=...", url, artifactreads.OpenAPIGroupVersion)
	}
	doc := &spec3.OpenAPI{}
	if err := getJSON(hc, host+url, doc); err != nil {
		t.Fatalf("the published document: %v", err)
	}
	return doc
}

func getJSON(hc *http.Client, url string, into any) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d %.300s", url, resp.StatusCode, body)
	}
	return json.Unmarshal(body, into)
}

func pathTemplates(doc *spec3.OpenAPI) []string {
	var out []string
	if doc.Paths != nil {
		for p := range doc.Paths.Paths {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// describedOperation is the operation of the document's path template that
// req's path fills in ({path} takes slashes, as in the API server's own
// documents; the other parameters one segment), for req's method.
func describedOperation(doc *spec3.OpenAPI, req *http.Request) (*spec3.Operation, string) {
	for _, template := range pathTemplates(doc) {
		pattern := regexp.QuoteMeta(template)
		pattern = strings.ReplaceAll(pattern, regexp.QuoteMeta("{path}"), ".+")
		pattern = regexp.MustCompile(`\\\{[^}]*\\\}`).ReplaceAllString(pattern, "[^/]+")
		if !regexp.MustCompile("^" + pattern + "$").MatchString(req.URL.Path) {
			continue
		}
		p := doc.Paths.Paths[template]
		op := map[string]*spec3.Operation{http.MethodGet: p.Get, http.MethodHead: p.Head, http.MethodPost: p.Post,
			http.MethodPut: p.Put, http.MethodDelete: p.Delete, http.MethodPatch: p.Patch}[req.Method]
		if op != nil {
			return op, template
		}
	}
	return nil, ""
}

func declaresHeader(op *spec3.Operation, name string) bool {
	for _, p := range op.Parameters {
		if p.In == "header" && strings.EqualFold(p.Name, name) {
			return true
		}
	}
	return false
}
