// Package client is the Go client for orchestrators: the programs that
// submit bound TrainJobs and collect their results (a training service, a
// queue UI, kubectl tether).
//
// It reads WorkerBindings (Get, List, WaitFor, WaitCondition), lists a
// job's artifacts from every node's manifest (Artifacts) and downloads them
// with their MD5 checked on the way (Download, DownloadFile), reads archived
// trainer logs (Log), and sends flush, drain and cancel commands and waits
// for every node to acknowledge them (Send, WaitCommand).
//
// Artifacts are read through the control plane's read endpoint
// (docs/orchestrator.md) with the caller's own Kubernetes credentials: the
// endpoint checks that the caller may get the WorkerBinding, then redirects
// to a short-lived presigned URL (S3 store) or streams the object (fs
// store). An orchestrator never holds the store's credentials.
package client
