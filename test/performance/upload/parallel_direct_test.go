package upload_test

import (
	"github.com/tether-dev/tether/pkg/artifactstore/store"
)

// The direct phase of BenchmarkParallel8x1GiB: the server child offers
// direct uploads (its S3 backend presigns), or forces proxy mode.
func init() {
	configureDirect = func(o *store.Options, enabled bool) {
		o.Direct = store.DirectOptions{Disabled: !enabled}
	}
}
