package binding

import (
	"errors"
	"fmt"
	"net/url"
)

// ParseServerURL checks the binding server's base URL (names.EnvServerURL) as both
// of the sidecar's clients (the binding session and the artifact uploader)
// need it: https, because the token must never cross the network in clear
// text, with a host and without user info, query or fragment. Errors name
// the field ServerURL; callers prefix their own name.
func ParseServerURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	switch {
	case raw == "":
		return nil, errors.New("ServerURL is required")
	case err != nil:
		return nil, fmt.Errorf("ServerURL: %w", err)
	case u.Scheme != "https":
		return nil, fmt.Errorf("ServerURL %q: scheme must be https", raw)
	case u.Host == "":
		return nil, fmt.Errorf("ServerURL %q has no host", raw)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("ServerURL %q must not carry user info, a query or a fragment", raw)
	}
	return u, nil
}
