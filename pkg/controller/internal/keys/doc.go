// Package keys holds what several controllers agree on to find
// WorkerBindings: the job-id index the binding controller registers and the
// upload sweeper queries, and the mapping from an object to the binding of
// the same name (a WorkerBinding is named after its TrainJob).
package keys
