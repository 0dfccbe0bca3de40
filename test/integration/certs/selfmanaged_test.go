package certs

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/controlplane"
	"github.com/tether-dev/tether/test/framework/testenv"
	"github.com/tether-dev/tether/test/framework/testobj"
)

// mountSecret does what the kubelet does for a Secret volume, which this
// environment has no kubelet for: it copies the Secret's keys into dir as
// files, and keeps them current, until ctx ends.
func mountSecret(ctx context.Context, env *testenv.Env, key types.NamespacedName, dir string) {
	go func() {
		for ctx.Err() == nil {
			var s corev1.Secret
			if err := env.Client.Get(ctx, key, &s); err == nil {
				for k, v := range s.Data {
					path := filepath.Join(dir, k)
					if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, v) {
						continue
					}
					tmp := path + ".tmp"
					if err := os.WriteFile(tmp, v, 0o600); err == nil {
						_ = os.Rename(tmp, path)
					}
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
}

func TestSelfManagedCertificateServesAdmission(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The rotator's certificate carries DNS names only, so the API server
	// calls the webhook as "localhost".
	env := testenv.StartForTest(t, testenv.Options{NoControlPlane: true, WebhookHostName: "localhost"})

	saConfig, err := env.ServiceAccountConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	certDir := t.TempDir()
	secretKey := types.NamespacedName{Namespace: "tether-system", Name: "tether-control-plane-cert"}
	mountSecret(ctx, env, secretKey, certDir)

	err = env.StartControlPlane(ctx, saConfig, testenv.Options{ControlPlane: func(o *controlplane.Options) {
		o.CertMode = controlplane.CertModeSelfManaged
		o.CertDir = certDir
		o.CABundleFile = ""
		o.ExtraDNSNames = []string{"localhost"}
	}})
	if err != nil {
		t.Fatal(err)
	}

	var secret corev1.Secret
	if err := env.Client.Get(ctx, secretKey, &secret); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"ca.crt", "tls.crt", "tls.key"} {
		if len(secret.Data[k]) == 0 {
			t.Fatalf("rotator did not fill %s in Secret %s", k, secretKey)
		}
	}
	var hooks admissionregistrationv1.MutatingWebhookConfiguration
	if err := env.Client.Get(ctx, types.NamespacedName{Name: "tether-webhook"}, &hooks); err != nil {
		t.Fatal(err)
	}
	for _, h := range hooks.Webhooks {
		if !bytes.Equal(h.ClientConfig.CABundle, secret.Data["ca.crt"]) {
			t.Errorf("webhook %s caBundle was not patched to the rotator's CA", h.Name)
		}
	}

	// The API server reaches the webhook through the patched caBundle: a
	// labeled TrainJob is stamped.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "certs"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	tj := testobj.MakeTrainJob("tj", ns.Name).Bound().Obj()
	if err := env.Client.Create(ctx, tj); err != nil {
		t.Fatalf("creating a labeled TrainJob through the self-managed webhook: %v", err)
	}
	if tj.Annotations[names.JobIDAnnotation] == "" {
		t.Fatal("TrainJob was not stamped")
	}

	// Token Secrets carry the rotator's CA, the one the binding server's
	// certificate chains to.
	deadline := time.Now().Add(15 * time.Second)
	for {
		var token corev1.Secret
		err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns.Name, Name: binding.TokenSecretName("tj")}, &token)
		if err == nil {
			if !bytes.Equal(token.Data["ca.crt"], secret.Data["ca.crt"]) {
				t.Fatal("token Secret ca.crt is not the rotator's CA")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no token Secret: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
