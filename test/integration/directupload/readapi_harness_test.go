package directupload

import (
	"context"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
// The APIService is not registered yet (Env.RegisterReadAPI).
func startOwnBucketWithReadAPI(t *testing.T, impl s3server.Impl) *suite {
	t.Helper()
	ctx := context.Background()
	s := startStore(t, impl)
	opts := testenv.Options{FrontProxy: true, NoControlPlane: true}
	s.env = testenv.StartForTest(t, opts)
	// Before the control plane starts: it reads the front proxy's CA with
	// the RoleBinding this grants.
	for _, o := range testenv.ManifestObjects(t, "overlays/read-api/rbac.yaml") {
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
