package directupload

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
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/controlplane"
	"github.com/tether-dev/tether/test/framework/s3server"
	"github.com/tether-dev/tether/test/framework/testenv"
)

// startOwnBucketWithReadAPI runs S3 server impl and a control plane
// installed as with its own bucket (overlays/artifacts-s3 and the chart's
// s3 settings: a key prefix, direct uploads and the read redirect at their
// defaults) and the read API component (its RBAC applied from
// manifests/overlays/read-api, --read-api), as its ServiceAccount, on an
// API server that proxies aggregated APIs with a front-proxy certificate.
// The APIService is not registered yet (registerReadAPI).
func startOwnBucketWithReadAPI(t *testing.T, impl s3server.Impl) *suite {
	t.Helper()
	ctx := context.Background()
	s := startStore(t, impl)
	opts := testenv.Options{FrontProxy: true, NoControlPlane: true}
	s.env = testenv.StartForTest(t, opts)
	// Before the control plane starts: it reads the front proxy's CA with
	// the RoleBinding this grants.
	for _, o := range manifestObjects(t, "overlays/read-api/rbac.yaml") {
		if err := s.env.Client.Create(ctx, o); err != nil {
			t.Fatalf("creating %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	cfg, err := s.env.ServiceAccountConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	opts.ControlPlane = s.controlPlane(func(o *controlplane.Options) {
		o.S3.Prefix = "tether/"
		o.ReadAPI = true
	})
	if cp := controlplane.DefaultOptions(); !cp.ArtifactReadRedirect || !cp.ArtifactDirectUpload {
		t.Fatalf("the control plane's defaults changed (read redirect %v, direct upload %v): this test reads an own bucket as installed with them on",
			cp.ArtifactReadRedirect, cp.ArtifactDirectUpload)
	}
	if err := s.env.StartControlPlane(ctx, cfg, opts); err != nil {
		t.Fatal(err)
	}
	return s
}

// manifestObjects are the objects of a YAML file under manifests/.
func manifestObjects(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "manifests", path))
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

// registerReadAPI registers the shipped APIService and waits until the API
// server reports it Available. The API server reaches the control plane's
// webhook listener on loopback through a Service of type ExternalName (the
// aggregator dials its name at the APIService's port; an EndpointSlice may
// not name a loopback address), and skips verifying its certificate: the
// test environment's serving certificate names 127.0.0.1, not the
// Service's DNS name the API server would check.
func registerReadAPI(t *testing.T, env *testenv.Env) {
	t.Helper()
	ctx := context.Background()
	const service = "tether-read-api-loopback"
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "tether-system", Name: service},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: env.Webhook.LocalServingHost}}
	if err := env.Client.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	objs := manifestObjects(t, "overlays/read-api/apiservice.yaml")
	if len(objs) != 1 || objs[0].GetName() != tetherv1.ReadAPIService {
		t.Fatalf("manifests/overlays/read-api/apiservice.yaml holds %d objects, want the APIService %s", len(objs), tetherv1.ReadAPIService)
	}
	apiService := objs[0]
	for field, v := range map[string]any{"name": service, "port": int64(env.Webhook.LocalServingPort)} {
		if err := unstructured.SetNestedField(apiService.Object, v, "spec", "service", field); err != nil {
			t.Fatal(err)
		}
	}
	if err := unstructured.SetNestedField(apiService.Object, true, "spec", "insecureSkipTLSVerify"); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, apiService); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(apiService), apiService); err != nil {
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
	})
	// Available is the availability controller's word; the aggregator
	// proxies the group once its own controller has added the APIService
	// (until then the group's paths are the API server's plain 404).
	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	discovery := strings.TrimSuffix(env.Config.Host, "/") + "/apis/" + tetherv1.ReadAPIGroup + "/" + tetherv1.ReadAPIVersion
	testenv.Eventually(t, 30*time.Second, func() error {
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

// artifactReader creates ServiceAccount name in ns, bound there to the
// shipped ClusterRole tether-artifact-reader, and returns credentials with
// its token (a kubeconfig's, nothing else).
func artifactReader(t *testing.T, env *testenv.Env, ns, name string) *rest.Config {
	t.Helper()
	ctx := context.Background()
	for _, o := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "tether-artifact-reader"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}}},
	} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &rest.Config{Host: env.Config.Host, BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: env.Config.CAData}}
}
