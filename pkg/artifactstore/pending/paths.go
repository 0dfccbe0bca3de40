package pending

import (
	"context"

	"github.com/tether-dev/tether/pkg/artifactstore/verify"
	"github.com/tether-dev/tether/pkg/upload"
)

// VerifiedPaths are the paths the verified manifests list, relative to the
// job's prefix (upload.NodePrefix before another node's): each manifest
// read as promotion reads it, the stored version with the recorded
// SHA-256. The required-outputs check matches its globs against them. A
// manifest no longer stored as verified, or that does not parse, is a
// *NotAsListedError.
func (s *Store) VerifiedPaths(ctx context.Context, jobID string, manifests []VerifiedManifest) ([]string, error) {
	var paths []string
	for _, vm := range manifests {
		buf, _, err := ReadVerifiedManifest(ctx, s.Backend, jobID, vm)
		if err != nil {
			return nil, err
		}
		m, err := verify.Parse(buf, jobID)
		if err != nil {
			return nil, &NotAsListedError{Rank: vm.Rank, Path: upload.ManifestName, Why: "the stored manifest is malformed: " + err.Error()}
		}
		prefix := upload.NodePrefix(vm.Rank)
		for _, f := range m.Files {
			paths = append(paths, prefix+f.Path)
		}
	}
	return paths, nil
}
