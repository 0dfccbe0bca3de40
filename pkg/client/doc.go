// Package client is the Go client for orchestrators: the programs that
// submit bound TrainJobs and collect their results (a training service, a
// queue UI, kubectl tether).
//
// It reads WorkerBindings (Get, List, WaitFor), lists a job's artifacts from
// every node's manifest (Artifacts) and downloads them with their MD5
// checked on the way (Download, DownloadFile), reads archived trainer logs
// (Log), and sends flush, drain and cancel commands and waits for every
// node to acknowledge them (Send, WaitCommand).
//
// Artifacts are read with the caller's own Kubernetes credentials
// (docs/orchestrator.md), never the store's: by default through the API
// server's read API (artifacts.tether.dev), which authorizes the caller and
// whose objects the control plane always streams; with Options.ReadURL from
// the binding Service, which may redirect to a short-lived presigned URL of
// an S3 store. A failed read is a *ReadError naming its cause (ErrNoReadAPI,
// ErrReadForbidden, ErrStoreUnavailable, ErrReadRedirected) and what to do.
package client
