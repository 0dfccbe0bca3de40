package credentials

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/tether-dev/tether/pkg/binding"
)

// ErrMalformedToken is wrapped by ReadToken when the file is readable but
// holds no well-formed token: retrying cannot help, the server would refuse it.
var ErrMalformedToken = errors.New("does not hold a 64-character lowercase hex token")

// ReadToken reads the token file (surrounding white space is ignored). An
// unreadable file is returned as the file system's error (retryable: the
// kubelet may be swapping it); a malformed token wraps ErrMalformedToken.
// No error ever holds the token.
func ReadToken(file string) (binding.Token, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, binding.MaxTokenLength+64))
	if err != nil {
		return "", err
	}
	t, err := binding.ParseToken(strings.TrimSpace(string(b)))
	if err != nil {
		return "", fmt.Errorf("%s %w", file, ErrMalformedToken)
	}
	return t, nil
}
