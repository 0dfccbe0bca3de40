// Package fsstore is the artifact store's file system backend (FSBackend,
// the embedded default, docs/artifacts.md): objects as plain files under
// one directory, with their MD5 recorded beside them, large ones written
// with direct I/O. It implements upload.Backend and the capabilities in
// pkg/artifactstore/objects a local directory has (Stater, Opener,
// BodyHasher); it cannot presign.
package fsstore
