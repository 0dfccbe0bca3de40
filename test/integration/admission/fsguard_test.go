package admission

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/tether-dev/tether/pkg/controlplane"
)

// TestFSBackendRefusesSplitReplicas: with the shipped RBAC (the control
// plane's ServiceAccount may get its own Deployment), the fs backend refuses
// to start when the Deployment runs two replicas, unless the directory is
// declared shared, and starts with one.
func TestFSBackendRefusesSplitReplicas(t *testing.T) {
	ctx := context.Background()
	// The suite installed the shipped Deployment (2 replicas) with the rest of
	// the overlay; nothing runs its pods here.
	d := &appsv1.Deployment{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: "tether-system", Name: "tether-control-plane"}, d); err != nil {
		t.Fatal(err)
	}
	if n := ptr.Deref(d.Spec.Replicas, 1); n != 2 {
		t.Fatalf("shipped Deployment has %d replicas, want 2", n)
	}
	t.Cleanup(func() {
		d.Spec.Replicas = ptr.To[int32](2)
		_ = env.Client.Update(ctx, d)
	})

	opts := func(shared bool) controlplane.Options {
		o := controlplane.DefaultOptions()
		o.Namespace, o.CertMode, o.CertDir = "tether-system", controlplane.CertModeExternal, env.Webhook.LocalServingCertDir
		o.MetricsAddr, o.HealthAddr, o.BindingAddr = "0", "0", "0"
		o.ArtifactBackend, o.ArtifactDir, o.ArtifactDirShared = "fs", t.TempDir(), shared
		o.Deployment = "tether-control-plane"
		return o
	}
	_, err := controlplane.New(env.ControlPlaneConfig(), opts(false))
	if err == nil || !strings.Contains(err.Error(), "at 2 replicas") || !strings.Contains(err.Error(), "--artifact-dir-shared") {
		t.Fatalf("fs backend on 2 replicas: err = %v, want a refusal naming the replicas and the fix", err)
	}
	if _, err := controlplane.New(env.ControlPlaneConfig(), opts(true)); err != nil {
		t.Fatalf("fs backend declared shared on 2 replicas: %v", err)
	}
	d.Spec.Replicas = ptr.To[int32](1)
	if err := env.Client.Update(ctx, d); err != nil {
		t.Fatal(err)
	}
	if _, err := controlplane.New(env.ControlPlaneConfig(), opts(false)); err != nil {
		t.Fatalf("fs backend on 1 replica (the ServiceAccount reads its Deployment under the shipped Role): %v", err)
	}
}
