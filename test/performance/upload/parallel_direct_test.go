package upload_test

import (
	"github.com/tether-dev/tether/pkg/artifactstore/endpoint"
	"github.com/tether-dev/tether/pkg/artifactstore/store"
)

// The direct phase of BenchmarkParallel8x1GiB: the server child offers
// direct uploads (its S3 backend presigns), or forces proxy mode.
func init() {
	configureDirect = func(h *endpoint.Handler, enabled bool) {
		h.Store = store.New(h.Store.Backend(), store.Options{Direct: store.DirectOptions{Disabled: !enabled}})
	}
}
