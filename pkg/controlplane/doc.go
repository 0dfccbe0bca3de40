// Package controlplane assembles Tether's control plane, the one binary in
// cmd/webhook: both admission webhooks, the binding controller, the serving
// certificate (self-managed rotation or external, e.g. cert-manager) and the
// metrics and health endpoints, on one controller-runtime manager.
//
// It is a library so that the binary, the demo and the integration tests all
// run exactly the same wiring.
package controlplane
