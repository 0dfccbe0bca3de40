package fsstore

import "github.com/tether-dev/tether/pkg/artifactstore/internal/storetest"

// Short names for the shared suite and test data, as the tests were written.
var (
	runBackendSuite = storetest.BackendSuite
	data            = storetest.Data
	md5hex          = storetest.MD5Hex
)
