// Package artifacts is the sidecar's artifact side: the Scanner walks the
// artifact directory safely, the Uploader puts one file as one verified PUT
// (ETag equal to the MD5 streamed), the watcher (watch_linux.go) reports the
// files the trainer closes or renames into place (inotify), and the Syncer
// uploads each such file at once (events.go), runs the periodic rounds whose
// settle rule takes the files never closed (and every file when events are
// unavailable), and the final flush that ends with the manifest
// (docs/artifacts.md). Every upload shares one bound of Workers.
//
// It speaks the contract of pkg/upload and must stay free of Kubernetes
// client code: the sidecar's dependency set is kept small.
package artifacts
