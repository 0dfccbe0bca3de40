package session

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tether-dev/tether/pkg/binding"
)

// PermanentError is a refusal that retrying cannot fix: the server answered
// a registration or session upgrade with 400, 401, 403 or 410, closed the
// session with CloseRevoked or CloseFinished, or with CloseReplaced and then
// refused it again as no longer the node's registered pod (CloseCode
// CloseReplaced), or the token file holds no well-formed token.
type PermanentError struct {
	// Op is what was refused: "register", "open session", "session",
	// "read token".
	Op string
	// StatusCode is the HTTP status of a refused request, 0 otherwise.
	StatusCode int
	// CloseCode and CloseText are the WebSocket close that ended the
	// session, 0 and "" otherwise.
	CloseCode int
	CloseText string
	// Response is the server's explanation of an HTTP refusal (nil when the
	// body was not an ErrorResponse) or, for "read token", a local one.
	Response *binding.ErrorResponse
}

func (e *PermanentError) Error() string {
	var b strings.Builder
	b.WriteString(e.Op)
	b.WriteString(": ")
	switch {
	case e.CloseCode != 0:
		fmt.Fprintf(&b, "server closed the session with %d (%s)", e.CloseCode, closeCodeMeaning(e.CloseCode))
		if e.CloseText != "" {
			fmt.Fprintf(&b, ": %q", e.CloseText)
		}
	case e.StatusCode != 0:
		fmt.Fprintf(&b, "HTTP %d", e.StatusCode)
		if e.Response != nil {
			b.WriteString(": " + e.Response.Error())
		}
	case e.Response != nil:
		b.WriteString(e.Response.Error())
	default:
		b.WriteString("refused")
	}
	return b.String()
}

// Unwrap returns the server's ErrorResponse, if any.
func (e *PermanentError) Unwrap() error {
	if e.Response == nil {
		return nil
	}
	return e.Response
}

// IsPermanent reports whether err is, or wraps, a *PermanentError.
func IsPermanent(err error) bool {
	var pe *PermanentError
	return errors.As(err, &pe)
}

func closeCodeMeaning(code int) string {
	switch code {
	case binding.CloseReplaced:
		return "replaced by a newer session of this worker"
	case binding.CloseRevoked:
		return "binding revoked: the TrainJob is gone or the token no longer matches it"
	case binding.CloseFinished:
		return "binding finished: the job succeeded or failed"
	case binding.CloseProtocolError:
		return "protocol error"
	case binding.CloseHeartbeatTimeout:
		return "heartbeat timeout"
	case binding.CloseTokenExpired:
		return "token reissued: reconnecting with the token file's current token"
	case binding.CloseRateLimited:
		return "too many frames: this sidecar sent frames faster than the server allows (a bug in the sender)"
	}
	return "close code " + strconv.Itoa(code)
}

// takenOverError: the server closed the session with CloseReplaced, a newer
// session of this worker having opened (Run opens it again).
type takenOverError struct{ text string }

func (e *takenOverError) Error() string {
	return fmt.Sprintf("session: server closed the session with %d (%s): %q", binding.CloseReplaced, closeCodeMeaning(binding.CloseReplaced), e.text)
}

// notRegistered reports whether err is the server refusing a session open
// because this pod is not the node's registered worker (409 BadRequest; a
// 409 SessionActive is another session being live, which passes).
func notRegistered(err error) bool {
	var ra *retryAfterError
	return errors.As(err, &ra) && ra.status == http.StatusConflict && (ra.resp == nil || ra.resp.Code != binding.ErrSessionActive)
}

// sessionActive reports whether err is the server refusing a session open
// because another session of this worker is live (409 SessionActive).
func sessionActive(err error) bool {
	var ra *retryAfterError
	return errors.As(err, &ra) && ra.status == http.StatusConflict && ra.resp != nil && ra.resp.Code == binding.ErrSessionActive
}

// responseOf is the server's explanation in err, if any.
func responseOf(err error) *binding.ErrorResponse {
	var er *binding.ErrorResponse
	if errors.As(err, &er) {
		return er
	}
	return nil
}

// retryAfterError is a retryable HTTP refusal; after is the server's
// Retry-After, 0 if none.
type retryAfterError struct {
	op     string
	status int
	resp   *binding.ErrorResponse
	after  time.Duration
}

func (e *retryAfterError) Error() string {
	s := fmt.Sprintf("%s: HTTP %d", e.op, e.status)
	if e.resp != nil {
		s += ": " + e.resp.Error()
	}
	return s
}

func (e *retryAfterError) Unwrap() error {
	if e.resp == nil {
		return nil
	}
	return e.resp
}
