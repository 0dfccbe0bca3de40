package endpoint

import "strings"

// refusalReason is the metric label of a refused request without a reason
// of its own: its S3 error code in snake case ("AccessDenied" is
// "access_denied").
func refusalReason(code string) string {
	var b strings.Builder
	for i, r := range code {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// errorCodes are the S3 error codes the endpoint answers a refusal with,
// its own and objects.CheckKey's (TestErrorCodesListed keeps the list whole).
var errorCodes = []string{
	"AccessDenied", "BadDigest", "EntityTooLarge", "IncompleteBody", "InternalError", "InvalidArgument",
	"InvalidDigest", "InvalidPart", "InvalidRequest", "InvalidUpload", "KeyConflict", "KeyTooLongError", "MalformedJSON", "MalformedManifest",
	"MethodNotAllowed", "MissingContentLength", "NoSuchBucket", "NoSuchKey", "NoSuchUpload", "NotImplemented",
	"ServiceUnavailable", "SlowDown", "XAmzContentSHA256Mismatch",
}

// reasonStoreNotProbed is the refusal of a request that came before the
// store could be used (store.Store.WaitReady).
const reasonStoreNotProbed = "store_not_probed"

// ownReasons are the reasons the endpoint gives a refusal instead of its
// code's (request.reason).
var ownReasons = []string{"key_changed", "rate_limited", "manifest_rate_limited", reasonStoreNotProbed, reasonLargeUploads}

// RefusalReasons are the reasons OnRefused can be given for the endpoint's
// own refusals: its error codes' and its own reasons. A counter by reason starts each of them at zero: the
// first refusal of a kind must be an increase, and Prometheus's increase()
// sees none in a series that first appears at 1. An Authorizer's own
// reasons (AuthError.Reason) are its to list.
func RefusalReasons() []string {
	out := make([]string, 0, len(errorCodes)+len(ownReasons))
	for _, c := range errorCodes {
		out = append(out, refusalReason(c))
	}
	return append(out, ownReasons...)
}
