// Package verify is the artifact store's verification policy for manifests
// (docs/artifacts.md): Decode reads a manifest as it streams in and refuses
// what the server cannot rely on (its version and job, every entry's key,
// size and MD5, duplicates, more than upload.MaxManifestEntries entries);
// Manifest checks every entry in the backend, its pending object first;
// Stored does both for a manifest already in the store, whose verdict was
// never recorded. The ManifestResult is what the binding records.
//
// The endpoint verifies a manifest as it is PUT; the controller re-checks
// stored ones and promotes what verified manifests list (pkg/artifactstore/pending).
package verify
