// Package v1alpha1 holds the tether.dev/v1alpha1 API: the WorkerBinding, the
// durable record of one TrainJob bound to Tether.
//
// A WorkerBinding is created and owned by the control plane's controller; users
// read it (`kubectl get workerbindings`) and never write it. It carries the
// job's identity and the SHA-256 of its token, never the token itself.
// Orchestrators also write its command annotation and read its artifacts
// through the control plane's read endpoint: those names are here too
// (orchestrator.go), the one home of the orchestrator's contract.
//
// +kubebuilder:object:generate=true
// +groupName=tether.dev
package v1alpha1
