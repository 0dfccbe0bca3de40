// Package monitoring checks what Tether gives Prometheus and Grafana: every
// metric the control plane exports passes promlint; the alerts in
// manifests/overlays/prometheus (and charts/tether, the same file) pass
// `promtool test rules`; every query of the Grafana dashboard parses
// (`promtool check rules`) and names only metrics Tether exports or that
// Prometheus and controller-runtime provide.
package monitoring
