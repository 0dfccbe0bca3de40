package artifactreads

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/kube-openapi/pkg/handler3"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/artifactstore/fsstore"
	"github.com/tether-dev/tether/test/framework/certs"
)

// recordingReviewer allows what allowed says and records every question.
type recordingReviewer struct {
	mu      sync.Mutex
	asked   []authzv1.ResourceAttributes
	users   []authnv1.UserInfo
	allowed func(authnv1.UserInfo, authzv1.ResourceAttributes) bool
}

func (r *recordingReviewer) Authenticate(context.Context, string) (authnv1.UserInfo, error) {
	panic("the aggregated API never reviews a token")
}

func (r *recordingReviewer) Authorize(_ context.Context, u authnv1.UserInfo, a authzv1.ResourceAttributes) (bool, string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked, r.users = append(r.asked, a), append(r.users, u)
	return r.allowed(u, a), "no RBAC rule", nil
}

func (r *recordingReviewer) questions() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.asked)
}

func authenticationConfigMap(caPEM []byte) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: AuthenticationConfigMapNamespace, Name: AuthenticationConfigMap},
		Data: map[string]string{
			"requestheader-client-ca-file":       string(caPEM),
			"requestheader-allowed-names":        `["front-proxy-client"]`,
			"requestheader-username-headers":     `["X-Remote-User"]`,
			"requestheader-group-headers":        `["X-Remote-Group"]`,
			"requestheader-extra-headers-prefix": `["X-Remote-Extra-"]`,
		},
	}
}

// TestAggregatedReads: the read API answers only what the API server's
// front proxy sends, as the user the proxy names, after asking for get on
// workerbindings/objects; everything else is refused before any review.
func TestAggregatedReads(t *testing.T) {
	proxyCA, rogueCA := certs.NewCA(t, certs.CommonName("front-proxy-ca")), certs.NewCA(t, certs.CommonName("rogue-ca"))
	kube := kubefake.NewClientset()
	fp, err := NewFrontProxy(kube)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = fp.Start(ctx) }()

	fs, err := fsstore.NewFSBackend(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// A store that presigns, as an own bucket does: the read endpoint
	// would redirect, which the API server does not pass on.
	backend := presigningStore{fs}
	checkpoint := bytes.Repeat([]byte("step-100 "), 1000)
	if _, err := backend.Put(ctx, "job-a/ckpt/step-100.pt", bytes.NewReader(checkpoint), int64(len(checkpoint))); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	_ = tetherv1.AddToScheme(scheme)
	bindings := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		&tetherv1.WorkerBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "llm"}, Spec: tetherv1.WorkerBindingSpec{JobID: "job-a"}},
	).Build()
	reviewer := &recordingReviewer{allowed: func(u authnv1.UserInfo, a authzv1.ResourceAttributes) bool {
		return u.Username == "alice" && a.Namespace == "team-a"
	}}
	var refused []string
	var mu sync.Mutex
	h := NewAggregated(Options{Backend: backend, Reviewer: reviewer, Bindings: bindings, Log: logr.Discard(),
		OnRefused: func(r string) { mu.Lock(); refused = append(refused, r); mu.Unlock() }}, fp)
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	srv.StartTLS()
	defer srv.Close()

	clientWith := func(certs ...tls.Certificate) *http.Client {
		tr := srv.Client().Transport.(*http.Transport).Clone()
		tr.TLSClientConfig.Certificates = certs
		// A redirect is an answer to check, never a request to send.
		return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	proxy := clientWith(proxyCA.Client(t, "front-proxy-client").TLS())
	get := func(c *http.Client, path string, headers map[string]string) (int, string, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var re ReadError
		_ = json.Unmarshal(body, &re)
		return resp.StatusCode, re.Reason, body
	}
	read := tetherv1.ReadAPIPathPrefix + "team-a/workerbindings/llm/objects/ckpt/step-100.pt"
	alice := map[string]string{"X-Remote-User": "alice", "X-Remote-Group": "team-a-readers", "X-Remote-Extra-Scopes": "x"}

	// Before the ConfigMap is there, nothing is trusted, and the refusal
	// says what is missing.
	if code, reason, _ := get(proxy, read, alice); code != http.StatusServiceUnavailable || reason != "no_front_proxy_ca" {
		t.Fatalf("before the ConfigMap: %d %s, want 503 no_front_proxy_ca", code, reason)
	}
	if _, err := kube.CoreV1().ConfigMaps(AuthenticationConfigMapNamespace).Create(ctx, authenticationConfigMap(proxyCA.CertPEM), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !fp.Loaded() || len(fpNames(fp)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the front proxy's CA and names were not loaded from the ConfigMap")
		}
		time.Sleep(20 * time.Millisecond)
	}

	code, _, body := get(proxy, read, alice)
	if code != http.StatusOK || !bytes.Equal(body, checkpoint) {
		t.Fatalf("proxied read as alice from a store that presigns: %d, %d bytes, want 200 and the stored %d bytes streamed (never a redirect)",
			code, len(body), len(checkpoint))
	}
	want := authzv1.ResourceAttributes{Namespace: "team-a", Verb: "get", Group: tetherv1.ReadAPIGroup,
		Resource: "workerbindings", Subresource: "objects", Name: "llm"}
	if reviewer.asked[0] != want {
		t.Errorf("asked %+v, want %+v", reviewer.asked[0], want)
	}
	if u := reviewer.users[0]; u.Username != "alice" || !slices.Equal(u.Groups, []string{"team-a-readers"}) || len(u.Extra["scopes"]) != 1 {
		t.Errorf("reviewed user %+v, want alice in team-a-readers with extra scopes", u)
	}

	// Attacks: each refused before any review.
	before := reviewer.questions()
	for _, a := range []struct {
		name   string
		client *http.Client
		path   string
		want   string
	}{
		{"forged headers, no certificate", clientWith(), read, "not_proxied"},
		{"forged headers, a certificate of another CA", clientWith(rogueCA.Client(t, "front-proxy-client").TLS()), read, "not_proxied"},
		{"the proxy's CA, a name it does not allow", clientWith(proxyCA.Client(t, "alice").TLS()), read, "not_proxied"},
		{"discovery without the certificate", clientWith(), "/apis/" + tetherv1.ReadAPIGroup + "/" + tetherv1.ReadAPIVersion, "not_proxied"},
	} {
		if code, reason, _ := get(a.client, a.path, alice); code != http.StatusUnauthorized || reason != a.want {
			t.Errorf("%s: %d %s, want 401 %s", a.name, code, reason, a.want)
		}
	}
	// The front proxy without a user is nobody.
	if code, reason, _ := get(proxy, read, nil); code != http.StatusUnauthorized || reason != "not_proxied" {
		t.Errorf("proxied without X-Remote-User: %d %s, want 401", code, reason)
	}
	if n := reviewer.questions(); n != before {
		t.Errorf("%d reviews for refused requests, want none", n-before)
	}

	// Another namespace's job: the API server would have refused it
	// already; the control plane refuses it too.
	code, reason, body := get(proxy, tetherv1.ReadAPIPathPrefix+"team-b/workerbindings/llm/objects/ckpt/step-100.pt", alice)
	if code != http.StatusForbidden || reason != "forbidden" || !strings.Contains(string(body), "workerbindings/objects in API group "+tetherv1.ReadAPIGroup) {
		t.Errorf("alice reading team-b: %d %s %s, want 403 naming the permission to grant", code, reason, body)
	}

	// Discovery, asked as the aggregator asks it (no user).
	code, _, body = get(proxy, "/apis/"+tetherv1.ReadAPIGroup+"/"+tetherv1.ReadAPIVersion, nil)
	var list metav1.APIResourceList
	if err := json.Unmarshal(body, &list); code != http.StatusOK || err != nil || len(list.APIResources) != 1 ||
		list.APIResources[0].Name != "workerbindings/objects" || !slices.Equal(list.APIResources[0].Verbs, metav1.Verbs{"get"}) {
		t.Errorf("discovery: %d %s", code, body)
	}
	if code, _, _ := get(proxy, "/openapi/v2", nil); code != http.StatusNotFound {
		t.Errorf("/openapi/v2: %d, want 404 (no v2 spec: the aggregator publishes the v3 one)", code)
	}
	// OpenAPI v3 as the aggregator asks it: the discovery document names
	// the group version's document, which the URL it gives serves.
	code, _, body = get(proxy, "/openapi/v3", nil)
	var v3 handler3.OpenAPIV3Discovery
	if err := json.Unmarshal(body, &v3); code != http.StatusOK || err != nil || v3.Paths[OpenAPIGroupVersion].ServerRelativeURL == "" {
		t.Fatalf("/openapi/v3: %d %s, want a discovery document naming %s", code, body, OpenAPIGroupVersion)
	}
	code, _, body = get(proxy, v3.Paths[OpenAPIGroupVersion].ServerRelativeURL, nil)
	if code != http.StatusOK || !strings.Contains(string(body), `"`+ObjectsPathTemplate+`"`) {
		t.Errorf("%s: %d %.300s, want the document with %s", v3.Paths[OpenAPIGroupVersion].ServerRelativeURL, code, body, ObjectsPathTemplate)
	}
	if code, reason, _ := get(clientWith(), "/openapi/v3", nil); code != http.StatusUnauthorized || reason != "not_proxied" {
		t.Errorf("/openapi/v3 without the front proxy's certificate: %d %s, want 401 not_proxied", code, reason)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(refused, "not_proxied") || !slices.Contains(refused, "forbidden") {
		t.Errorf("refusals counted %v, want not_proxied and forbidden among them", refused)
	}
}

// fpNames reads the allowed names the front proxy has loaded.
func fpNames(fp *FrontProxy) []string { return fp.headers.AllowedClientNames() }

// presigningStore is an fs store that also presigns reads, as an S3 store
// does (the URLs name a reserved .invalid host; the test's client never
// follows a redirect).
type presigningStore struct{ fsstore.FSBackend }

func (presigningStore) PresignGet(_ context.Context, key string, _ time.Duration) (*url.URL, error) {
	return url.Parse("https://store.invalid/bucket/" + key + "?X-Amz-Signature=test")
}
