// Package trainerstatus puts a bound job's progress where Kubeflow's tools
// look for it: the worker's progress (the WorkerBinding's status.progress)
// in TrainJob.status.trainerStatus when the trainer does not report
// natively, and the trainer's own report on the binding when it does.
package trainerstatus
