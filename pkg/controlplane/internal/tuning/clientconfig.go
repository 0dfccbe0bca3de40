package tuning

import "k8s.io/client-go/rest"

// ClientSettings returns a copy of cfg with the client settings the control
// plane runs with: client-side rate limiting off (QPS -1, as
// controller-runtime's GetConfig sets it), so the API server's priority and
// fairness is the only limit. client-go's default of 5 QPS would otherwise
// queue the binding server's writes when hundreds of sidecars reconnect at
// once. cmd/tether-control-plane and the test environment both use it, so
// tests see the production client.
func ClientSettings(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = -1, 0
	return c
}
