package objects

import (
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/tether-dev/tether/pkg/upload"
)

// pendingInfix is what a pending key adds between the job id and the path.
const pendingInfix = upload.PendingDir

// PendingKey is where a PUT to key is stored while an object with a different
// ETag already holds key. key must be a valid client key.
func PendingKey(key string) string {
	job, rest, _ := strings.Cut(key, "/")
	return job + "/" + pendingInfix + rest
}

// PendingPrefix is the prefix of every pending key of a job.
func PendingPrefix(jobID string) string { return jobID + "/" + pendingInfix }

// CheckKey checks a client's object key against the contract: <job-id>/<path>
// with forward slashes, no empty, "." or ".." segment, valid UTF-8 without
// NUL, at most upload.MaxKeyLength bytes, and not under <job-id>/.tether/. It returns
// the job id (the first segment) and the path.
func CheckKey(key string) (jobID, path string, e *KeyError) {
	switch {
	case key == "":
		return "", "", &KeyError{http.StatusBadRequest, "InvalidRequest",
			"the request names no object key: use /" + upload.Bucket + "/<job-id>/<path>"}
	case len(key) > upload.MaxKeyLength:
		return "", "", &KeyError{http.StatusBadRequest, "KeyTooLongError",
			fmt.Sprintf("the key is %d bytes long; keys are at most %d bytes (S3's 1024 minus room for %q): shorten the artifact's path", len(key), upload.MaxKeyLength, pendingInfix)}
	case !utf8.ValidString(key):
		return "", "", &KeyError{http.StatusBadRequest, "InvalidArgument",
			"the key is not valid UTF-8: artifact paths must be UTF-8 file names"}
	case strings.IndexByte(key, 0) >= 0:
		return "", "", &KeyError{http.StatusBadRequest, "InvalidArgument",
			"the key contains a NUL byte"}
	}
	if msg := CheckSegments(key); msg != "" {
		return "", "", &KeyError{http.StatusBadRequest, "InvalidArgument", msg}
	}
	jobID, path, ok := strings.Cut(key, "/")
	if !ok {
		return "", "", &KeyError{http.StatusBadRequest, "InvalidArgument",
			"the key has no path after the job id: use <job-id>/<path relative to the artifact directory>"}
	}
	if first, _, _ := strings.Cut(path, "/"); first == upload.ReservedDir {
		return "", "", &KeyError{http.StatusForbidden, "AccessDenied",
			"keys under <job-id>/" + upload.ReservedDir + "/ are reserved for the server: rename the artifact directory's " + upload.ReservedDir + " entry"}
	}
	return jobID, path, nil
}

// KeyError is a key CheckKey refuses: the HTTP status and S3 error code an
// endpoint answers it with, and the message that says what to fix.
type KeyError struct {
	Status  int
	Code    string
	Message string
}

func (e *KeyError) Error() string { return e.Code + ": " + e.Message }

// CheckSegments returns why key is not a clean relative path, or "".
func CheckSegments(key string) string {
	for seg := range strings.SplitSeq(key, "/") {
		switch seg {
		case "":
			return "the key has an empty segment (a leading, trailing or doubled \"/\"): send the file's exact relative path"
		case ".", "..":
			return "the key has a \"" + seg + "\" segment: send the file's path relative to the artifact directory without \".\" or \"..\""
		}
	}
	return ""
}

// IsLowerHex reports whether s is only lowercase hex digits (an MD5 as S3
// writes it, an upload id).
func IsLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// CheckReadKey checks a key a reader asks for with the rules of a PUT's
// key (CheckKey): a clean <job-id>/<path>, not under <job-id>/.tether/ but
// for the archived trainer logs (<job-id>/.tether/logs/, upload.LogsDir),
// which only the controller writes.
func CheckReadKey(key string) error {
	if job, rest, ok := strings.Cut(key, "/"); ok {
		if log, ok := strings.CutPrefix(rest, upload.LogsDir); ok && log != "" && !strings.Contains(log, "/") {
			key = job + "/" + log // the rest of the rules, on the log's name
		}
	}
	if _, _, e := CheckKey(key); e != nil {
		return fmt.Errorf("%s", e.Message)
	}
	return nil
}

// JobUploadsPrefix holds job jobID's direct uploads until they are
// committed: upload.UploadsPrefix/<job-id>/.
func JobUploadsPrefix(jobID string) string { return upload.UploadsPrefix + jobID + "/" }

// UploadKey is the object direct upload id of job jobID is written to.
func UploadKey(jobID, id string) string { return JobUploadsPrefix(jobID) + id }

// CheckJobID refuses a job id that cannot prefix keys (empty, "." or "..",
// or holding a slash or NUL) with ErrInvalidKey.
func CheckJobID(jobID string) error {
	if jobID == "" || jobID == "." || jobID == ".." || strings.ContainsAny(jobID, "/\x00") {
		return fmt.Errorf("%w: job id %q", ErrInvalidKey, jobID)
	}
	return nil
}
