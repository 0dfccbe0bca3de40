// Package controller holds no code: its folders are the control plane's
// controllers, one per package, each run on the manager by the wiring
// (pkg/controlplane/controllers.go).
//
//   - workerbinding binds TrainJobs (token Secret, WorkerBinding) and keeps
//     their bindings' phases (gather, lifecycle.Derive, write); below it
//     are its parts that are packages of their own: jobidclaim (who holds
//     a job id), replicaleases (which binding-server replica still vouches
//     for a session) and logarchive (trainer logs copied next to the
//     artifacts).
//   - artifactsettle drops what a final binding left pending in the store.
//   - orphan finalizes bindings whose TrainJob is gone.
//   - trainerstatus reports a bound job's progress on its TrainJob.
//   - uploadsweep removes what direct uploads wrote after their job ended
//     and aborts its open multipart uploads.
//   - bindingmetrics reports every binding's phase to Prometheus.
//
// What several of them share sits in internal/ (the job-id index, the
// binding's own-write bookkeeping). No controller imports another.
package controller
