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
// Derive is the controller's whole decision for one reconcile: from the
// binding and one Observation (the pods, the TrainJob's conditions, the
// replicas' Leases, ...) it returns the new status, the Events and the
// actions wanted; the controller gathers before and writes after.
package lifecycle
