package controlplane

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestCheckFSReplicas(t *testing.T) {
	deployment := func(n int32) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "tether-system", Name: "tether-control-plane"},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To(n)}}
	}
	base := Options{Namespace: "tether-system", ArtifactBackend: "fs", ArtifactDir: "/var/lib/tether/artifacts", Deployment: "tether-control-plane"}
	for _, tc := range []struct {
		name    string
		opts    func(*Options)
		objs    []*appsv1.Deployment
		wantErr string
	}{
		{name: "fs, 2 replicas", objs: []*appsv1.Deployment{deployment(2)}, wantErr: "at 2 replicas"},
		{name: "fs, 1 replica", objs: []*appsv1.Deployment{deployment(1)}},
		{name: "fs, 2 replicas, shared", opts: func(o *Options) { o.ArtifactDirShared = true }, objs: []*appsv1.Deployment{deployment(2)}},
		{name: "s3, 2 replicas", opts: func(o *Options) { o.ArtifactBackend = "s3" }, objs: []*appsv1.Deployment{deployment(2)}},
		{name: "fs, no Deployment named", opts: func(o *Options) { o.Deployment = "" }},
		{name: "fs, Deployment missing", wantErr: "reading Deployment tether-system/tether-control-plane"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := base
			if tc.opts != nil {
				tc.opts(&opts)
			}
			b := fake.NewClientBuilder().WithScheme(NewScheme())
			for _, d := range tc.objs {
				b = b.WithObjects(d)
			}
			err := checkFSReplicas(context.Background(), b.Build(), opts)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "--artifact-dir-shared") {
				t.Errorf("the error does not say how to fix it: %v", err)
			}
		})
	}
}
