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
// Cancel stops the trainer: it checks (a server-side dry run) that the
// caller may stop the job, sends the cancel command (every node runs a
// final flush) and waits for its acknowledgement, then stops the job with
// the caller's own credentials: the Kueue Workload of a job Kueue manages
// is deactivated (spec.active=false; Kueue evicts it and frees its quota),
// any other TrainJob suspended (spec.suspend=true), or, with
// CancelOptions.Delete, the TrainJob deleted. The control plane itself
// never writes TrainJobs. A failed or timed-out flush still stops the job,
// and the error names the files not verified.
//
// Artifacts are read with the caller's own Kubernetes credentials
// (docs/orchestrator.md), never the store's: by default through the API
// server's read API (artifacts.tether.dev), which authorizes the caller and
// whose objects the control plane always streams; with Options.ReadURL from
// the binding Service, which may redirect to a short-lived presigned URL of
// an S3 store. A failed read is a *ReadError naming its cause (ErrNoReadAPI,
// ErrReadForbidden, ErrStoreUnavailable, ErrReadRedirected) and what to do.
package client
