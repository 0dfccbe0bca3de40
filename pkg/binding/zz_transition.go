package binding

import "github.com/tether-dev/tether/api/names"

// Old names, kept while the controller packages move; removed right after.
const (
	TokenSecretType = names.TokenSecretType
	TokenKey        = names.TokenKey
	CABundleKey     = names.CABundleKey
)
