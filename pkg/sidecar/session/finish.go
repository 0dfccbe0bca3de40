package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/pkg/binding"
)

// Finish tells the server the pod is terminating (FrameFinishing with
// reason). It uses the open session when there is one; otherwise it opens a
// short-lived session of its own (registering first if this process never
// registered), sends the frame and closes it with 1000 (the server takes it
// only once the session it still holds for this worker has gone silent), so
// call Finish when shutting down, right before cancelling Run. The frame
// carries the progress file as it is now.
func (c *Client) Finish(ctx context.Context, reason string) error {
	return c.FinishWith(ctx, binding.Finishing{Reason: reason})
}

// FinishWith is Finish with a whole Finishing payload: the final flush's
// unverified files, sent after the flush. It keeps the payload within the
// protocol's bounds (the first MaxReportedUnverified paths that fit, the
// error cut at MaxArtifactErrorLength).
func (c *Client) FinishWith(ctx context.Context, fin binding.Finishing) error {
	var paths []string
	for _, p := range fin.Unverified {
		if len(paths) < binding.MaxReportedUnverified && p != "" && len(p) <= binding.MaxReportedPathLength {
			paths = append(paths, p)
		}
	}
	fin.Unverified = paths
	fin.UnverifiedCount = max(fin.UnverifiedCount, len(paths))
	fin.ArtifactError = truncateUTF8(fin.ArtifactError, binding.MaxArtifactErrorLength)
	var all int
	fin.Skipped, all = binding.BoundSkipped(fin.Skipped)
	fin.SkippedCount = max(fin.SkippedCount, all)
	if fin.Progress == nil && c.cfg.Progress != nil {
		// Read now: the trainer's last line, written just before it exited,
		// is newer than the last heartbeat's sample.
		fin.Progress = c.cfg.Progress().Sanitized()
	}
	f := binding.Frame{Type: binding.FrameFinishing, Finishing: &fin}
	if s := c.currentSession(); s != nil {
		err := s.send(ctx, f)
		if err == nil || ctx.Err() != nil {
			return err
		}
		c.log.Warn("session ended while finishing; trying a new one", "error", err)
	}
	if !c.registered.Load() {
		if _, err := c.registerOnce(ctx); err != nil {
			return fmt.Errorf("finish: %w", err)
		}
	}
	token, err := c.readToken()
	if err != nil {
		return fmt.Errorf("finish: %w", err)
	}
	d, err := c.dialer()
	if err != nil {
		return fmt.Errorf("finish: %w", err)
	}
	dctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	conn, resp, err := d.DialContext(dctx, c.sessionURL, c.sessionHeaders(token))
	if err != nil {
		if resp != nil && errors.Is(err, websocket.ErrBadHandshake) {
			defer resp.Body.Close()
			return fmt.Errorf("finish: %w", statusError("open session", resp))
		}
		return fmt.Errorf("finish: open session: %w", err)
	}
	defer conn.Close()
	deadline := time.Now().Add(closeWait)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	b, _ := json.Marshal(f)
	_ = conn.SetWriteDeadline(deadline)
	if err := conn.WriteMessage(websocket.TextMessage, b); err != nil {
		return fmt.Errorf("finish: %w", err)
	}
	_ = conn.WriteControl(websocket.CloseMessage,
		websocket.FormatCloseMessage(websocket.CloseNormalClosure, "sidecar stopping"), deadline)
	// Wait for the server's close so the frame is not cut off by a reset.
	_ = conn.SetReadDeadline(deadline)
	for {
		if _, _, err := conn.ReadMessage(); err != nil {
			return nil
		}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// Cut at a rune boundary.
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}

// truncateUTF8 cuts s to at most n bytes on a UTF-8 boundary.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
