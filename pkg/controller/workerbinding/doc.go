// Package workerbinding reconciles bound TrainJobs into the objects Tether owns
// for them: a token Secret (the job's credential towards the binding server,
// with the CA bundle that lets the sidecar trust it) and a WorkerBinding (the
// durable record of the binding). Both carry an ownerReference to the TrainJob,
// so deleting the job deletes them.
//
// The controller never writes a TrainJob and never lists Secrets: it reads and
// writes its own token Secrets by name.
package workerbinding
