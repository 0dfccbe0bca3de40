package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

// ManifestObjects are the objects of a YAML file under manifests/, as
// shipped (a test applies what a platform team applies).
func ManifestObjects(t TB, path string) []*unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(RepoRoot(), "manifests", path))
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatalf("manifests/%s: %v", path, err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

// RegisterReadAPI registers the shipped APIService of the read API and
// waits until the aggregator proxies its group. The API server reaches
// the control plane's webhook listener on loopback through a Service of
// type ExternalName (the aggregator dials its name at the APIService's
// port; an EndpointSlice may not name a loopback address), and skips
// verifying its certificate: the test environment's serving certificate
// names 127.0.0.1, not the Service's DNS name the API server would check.
// The API server must proxy as a real one does (Options.FrontProxy).
func (e *Env) RegisterReadAPI(t TB) {
	t.Helper()
	ctx := context.Background()
	const service = "tether-read-api-loopback"
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "tether-system", Name: service},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: e.Webhook.LocalServingHost}}
	if err := e.Client.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	objs := ManifestObjects(t, "overlays/read-api/apiservice.yaml")
	if len(objs) != 1 || objs[0].GetName() != tetherv1.ReadAPIService {
		t.Fatalf("manifests/overlays/read-api/apiservice.yaml holds %d objects, want the APIService %s", len(objs), tetherv1.ReadAPIService)
	}
	apiService := objs[0]
	for field, v := range map[string]any{"name": service, "port": int64(e.Webhook.LocalServingPort)} {
		if err := unstructured.SetNestedField(apiService.Object, v, "spec", "service", field); err != nil {
			t.Fatal(err)
		}
	}
	if err := unstructured.SetNestedField(apiService.Object, true, "spec", "insecureSkipTLSVerify"); err != nil {
		t.Fatal(err)
	}
	if err := e.Client.Create(ctx, apiService); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 60*time.Second, func() error { return available(ctx, e.Client, apiService) })
	// Available is the availability controller's word; the aggregator
	// proxies the group once its own controller has added the APIService
	// (until then the group's paths are the API server's plain 404).
	hc, err := rest.HTTPClientFor(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	discovery := strings.TrimSuffix(e.Config.Host, "/") + "/apis/" + tetherv1.ReadAPIGroup + "/" + tetherv1.ReadAPIVersion
	Eventually(t, 60*time.Second, func() error {
		resp, err := hc.Get(discovery)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %d %s", discovery, resp.StatusCode, body)
		}
		return nil
	})
}

// available reports why the APIService is not Available yet (nil: it is).
func available(ctx context.Context, c client.Client, apiService *unstructured.Unstructured) error {
	if err := c.Get(ctx, client.ObjectKeyFromObject(apiService), apiService); err != nil {
		return err
	}
	conds, _, _ := unstructured.NestedSlice(apiService.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == "Available" {
			if m["status"] == "True" {
				return nil
			}
			return fmt.Errorf("APIService %s Available=%v: %v %v", tetherv1.ReadAPIService, m["status"], m["reason"], m["message"])
		}
	}
	return fmt.Errorf("APIService %s has no Available condition yet", tetherv1.ReadAPIService)
}
