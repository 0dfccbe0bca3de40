package credentials

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/tether-dev/tether/pkg/binding"
)

// ErrMalformedPodToken is wrapped by ReadPodToken when the file is readable
// but holds nothing that can be a pod token (empty, too long, or not a
// printable header value).
var ErrMalformedPodToken = errors.New("does not hold a ServiceAccount token (a JWT of at most 8 KiB)")

// ReadPodToken reads the pod's projected ServiceAccount token
// (names.HeaderPodToken). The kubelet rotates the file, so it is read for
// every request, never cached. Surrounding white space is ignored. An
// unreadable file is the file system's error (retryable); a malformed one
// wraps ErrMalformedPodToken. No error ever holds the token.
func ReadPodToken(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, binding.MaxPodTokenLength+64))
	if err != nil {
		return "", err
	}
	t := strings.TrimSpace(string(b))
	if t == "" || len(t) > binding.MaxPodTokenLength || strings.IndexFunc(t, func(r rune) bool { return r <= ' ' || r > '~' }) >= 0 {
		return "", fmt.Errorf("%s %w", file, ErrMalformedPodToken)
	}
	return t, nil
}
