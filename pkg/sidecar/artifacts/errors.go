package artifacts

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/tether-dev/tether/api/names"
)

var (
	errETagMismatch = errors.New("ETag mismatch")
	errChanged      = errors.New("the file changed while it was read")
	errStalled      = errors.New("no upload progress")
)

// localError is a problem with the local file: retrying will not help.
type localError struct{ err error }

func (e *localError) Error() string { return e.err.Error() }
func (e *localError) Unwrap() error { return e.err }

// tokenError is a problem with the token file. An unreadable file is
// transient (the kubelet may be swapping it); a malformed token is
// permanent, as the server would refuse it. It never holds the token.
type tokenError struct {
	err       error
	permanent bool
}

func (e *tokenError) Error() string { return "token: " + e.err.Error() }
func (e *tokenError) Unwrap() error { return e.err }

// classify reports whether err is worth another attempt, and a hint.
func classify(err error, stall time.Duration) (transient bool, hint string) {
	var le *localError
	var te *tokenError
	var er minio.ErrorResponse
	var ue x509.UnknownAuthorityError
	var he x509.HostnameError
	var ce x509.CertificateInvalidError
	var tl TooLargeError
	var se *storeError
	switch {
	case errors.As(err, &se):
		return true, "the artifact store refused the presigned PUT of a direct upload (the next attempt authorizes it again); " +
			"if this persists, check the clocks (a presigned URL lives minutes) and the store's logs"
	case errors.As(err, &tl):
		return false, tl.hint()
	case errors.As(err, &le):
		if errors.Is(err, fs.ErrPermission) {
			return false, "the sidecar cannot read it: have the trainer write it readable by others (umask 022), or by a group the sidecar is in (the pod's securityContext.fsGroup, with umask 027)"
		}
		return false, ""
	case errors.As(err, &te):
		if te.permanent {
			return false, "fix the token file; the sidecar re-reads it on every request"
		}
		return true, "the token file could not be read"
	case errors.As(err, &ue), errors.As(err, &he), errors.As(err, &ce):
		return false, "the server's certificate is not trusted by the CA file (TETHER_CA_FILE) or does not name the server; the CA file is re-read for every new connection"
	case errors.Is(err, errETagMismatch):
		return true, "the store's ETag or checksum is not that of the bytes sent: corrupted in transit, or a store whose ETags are not MD5s (SSE-KMS, SSE-C) that the control plane's start-up probe did not see (see its log)"
	case errors.Is(err, errChanged):
		return true, "the trainer is still writing it"
	case errors.Is(err, errStalled):
		return true, fmt.Sprintf("nothing was sent for %s", stall)
	case errors.As(err, &er) && er.StatusCode != 0:
		switch er.Code {
		case "SlowDown":
			return true, "the artifact storage behind the binding server asked it to slow down (S3 503 SlowDown: the bucket is over its request rate); " +
				"the sidecar waits as long as the server's Retry-After says. A platform team can raise the bucket's request limits " +
				"or spread jobs over more S3 prefixes"
		case "ServiceUnavailable":
			return true, "the binding server could not reach its artifact storage or the API server; check the control plane's logs and the storage's health"
		case "InternalError", "RequestTimeout", "RequestTimeTooSkewed":
			return true, ""
		case "EntityTooLarge":
			return false, fmt.Sprintf("the binding server cannot store a file this large (its message says why): exclude the file with the %s annotation", names.ExcludeAnnotation)
		case "InvalidUpload":
			// A resumed PUT whose stored parts changed since it asked (another
			// upload of the key): the next attempt asks again.
			return true, "the upload it resumed was replaced; the next attempt starts from what is stored"
		case "BadDigest":
			// The body's Content-MD5 or checksum (sent with every PUT) did
			// not match what arrived: corrupted in transit, or changed
			// while it was read. The next attempt reads the file again.
			return true, "the server received other bytes than were sent (corrupted in transit)"
		}
		switch {
		case er.StatusCode >= 500, er.StatusCode == http.StatusRequestTimeout, er.StatusCode == http.StatusTooManyRequests:
			return true, ""
		case er.StatusCode == http.StatusUnauthorized:
			return false, "the binding server did not accept the token (X-Tether-Token): check the token file; the sidecar re-reads it on every request"
		case er.StatusCode == http.StatusForbidden:
			return false, "the binding server refused the key: it is outside this job's prefix, or the binding has finished"
		}
		return false, "the binding server refused the request"
	}
	// Network errors: connection refused or reset, timeouts, a truncated
	// answer, TLS handshake failures other than an untrusted certificate.
	return true, ""
}

func statusOf(err error) int {
	var er minio.ErrorResponse
	if errors.As(err, &er) {
		return er.StatusCode
	}
	return 0
}
