package s3store_test

import (
	"strings"

	"github.com/tether-dev/tether/pkg/artifactstore/internal/storetest"
)

// Short names for the shared test data, as the suites were written.
var (
	data   = storetest.Data
	md5hex = storetest.MD5Hex
)

func trimQuotes(s string) string { return strings.Trim(s, `"`) }
