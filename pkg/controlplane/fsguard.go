package controlplane

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// checkFSReplicas refuses the fs artifact backend when the control plane's
// Deployment runs more than one replica and the directory is not declared
// shared: a sidecar's connections land on whichever replica the Service
// picks, so one job's files would be split between stores that do not see
// each other, and each replica's files go with it.
func checkFSReplicas(ctx context.Context, r client.Reader, opts Options) error {
	if opts.ArtifactBackend != "fs" || opts.ArtifactDirShared || opts.Deployment == "" {
		return nil
	}
	var d appsv1.Deployment
	if err := r.Get(ctx, types.NamespacedName{Namespace: opts.Namespace, Name: opts.Deployment}, &d); err != nil {
		return fmt.Errorf("--artifact-backend=fs: reading Deployment %s/%s (--deployment) to count its replicas: %w; "+
			"pass --artifact-dir-shared if --artifact-dir is one volume every replica mounts", opts.Namespace, opts.Deployment, err)
	}
	if n := ptr.Deref(d.Spec.Replicas, 1); n > 1 {
		return fmt.Errorf("--artifact-backend=fs with Deployment %s/%s at %d replicas: each replica would keep its own %s, "+
			"so a job's artifacts would be split between replicas and lost with a replica. Use --artifact-backend=s3 "+
			"(manifests/overlays/quick-start or manifests/overlays/production), or run 1 replica with strategy Recreate, "+
			"or, if %s is one ReadWriteMany volume every replica mounts, pass --artifact-dir-shared",
			opts.Namespace, opts.Deployment, n, opts.ArtifactDir, opts.ArtifactDir)
	}
	return nil
}

// guardFSReplicas runs checkFSReplicas against the API server, for at most
// 30 seconds.
func (a *assembly) guardFSReplicas() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return checkFSReplicas(ctx, a.mgr.GetAPIReader(), a.opts)
}
