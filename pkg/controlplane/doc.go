// Package controlplane assembles Tether's control plane, the one binary in
// cmd/tether-control-plane: the three admission webhooks (TrainJob, JobSet,
// Pod), the controllers, the binding server, the serving certificate
// (self-managed rotation or external, e.g. cert-manager) and the metrics and
// health endpoints, on one controller-runtime manager. New reads as the list of
// these parts, one function each.
//
// It is a library so that the binary, the demo and the integration tests all
// run exactly the same wiring.
package controlplane
