// Package lifecycle is the WorkerBinding state machine: the phases a bound
// job goes through and which event may move it where. It is pure (no I/O), so
// the binding server, which hears from the sidecar, and the controller, which
// reads the TrainJob and the trainer's pod, apply the same rules to the same
// durable record and never regress each other's writes.
//
//	Pending → Registered → Running → Finishing → Succeeded | Failed
//
// Succeeded and Failed are final. Suspension (Kueue eviction) ends the
// current attempt: the binding goes back to Pending with reason Preempted and
// the next registration starts a new attempt; within an attempt the phase
// never moves backwards.
//
// A cancel (cancel.go) is the orchestrator's cancel command followed by its
// own stop of the job (Kueue Workload deactivated, TrainJob suspended or
// deleted): Finishing/Cancelling once the command is answered while trainer
// pods remain, Failed/Cancelled once the controller lists none, never
// assumed from the acknowledgement. A suspension without a cancel is
// Preempted. Failed/Cancelled is the one final verdict that can be left: a
// stopped job can be resumed, and a pod of it the binding has not seen (the
// controller's list, or its sidecar's registration) starts the next attempt
// (Readmission), so the token stays valid, the upload sweep's record is
// dropped and the next end is swept again.
//
// Derive is the controller's whole decision for one reconcile: from the
// binding and one Observation (the pods, the TrainJob's conditions, the
// replicas' Leases, ...) it returns the new status, the Events and the
// actions wanted; the controller gathers before and writes after.
package lifecycle
