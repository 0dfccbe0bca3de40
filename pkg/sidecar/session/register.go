package session

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/sidecar/retry"
)

// Register registers the worker: POST PathRegister. It retries network
// errors and every answer but 400, 401, 403 and 410 with backoff until ctx
// ends; those four are returned at once as a *PermanentError.
func (c *Client) Register(ctx context.Context) (binding.RegisterResponse, error) {
	return c.register(ctx, retry.NewBackoff(c.cfg.BackoffInitial, c.cfg.BackoffMax))
}

func (c *Client) register(ctx context.Context, bo *retry.Backoff) (binding.RegisterResponse, error) {
	var last error // the last failure not caused by ctx, for the final error
	for {
		rr, err := c.registerOnce(ctx)
		if err == nil {
			return rr, nil
		}
		if IsPermanent(err) {
			return binding.RegisterResponse{}, err
		}
		if ctx.Err() != nil {
			if last == nil {
				last = err
			}
			return binding.RegisterResponse{}, fmt.Errorf("register: %w (last error: %v)", ctx.Err(), last)
		}
		last = err
		d := c.retryDelay(bo, err)
		c.log.Warn("registration failed; retrying", "error", err, "retryIn", d)
		if serr := retry.Sleep(ctx, d); serr != nil {
			return binding.RegisterResponse{}, fmt.Errorf("register: %w (last error: %v)", serr, last)
		}
	}
}

func (c *Client) registerOnce(ctx context.Context) (binding.RegisterResponse, error) {
	token, err := c.readToken()
	if err != nil {
		return binding.RegisterResponse{}, err
	}
	hc, err := c.httpClient()
	if err != nil {
		return binding.RegisterResponse{}, err
	}
	body, err := json.Marshal(binding.RegisterRequest{
		JobID: c.cfg.JobID, WorkerID: c.cfg.WorkerID, Pod: c.cfg.Pod, SidecarVersion: c.cfg.SidecarVersion,
	})
	if err != nil {
		return binding.RegisterResponse{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.registerURL, bytes.NewReader(body))
	if err != nil {
		return binding.RegisterResponse{}, err
	}
	req.Header = c.headers(token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return binding.RegisterResponse{}, fmt.Errorf("register: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return binding.RegisterResponse{}, statusError("register", resp)
	}
	var rr binding.RegisterResponse
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxResponseBody)).Decode(&rr); err != nil {
		return binding.RegisterResponse{}, fmt.Errorf("register: decoding the answer: %w", err)
	}
	c.registered.Store(true)
	c.noteRegistered(rr)
	return rr, nil
}

// noteRegistered resumes the heartbeat sequence after the server's LastSeq
// (never going back) and adopts the server's interval if shorter.
func (c *Client) noteRegistered(rr binding.RegisterResponse) {
	c.seqMu.Lock()
	c.lastSent = max(c.lastSent, rr.LastSeq)
	c.seqMu.Unlock()
	if rr.Phase != "" {
		c.phase.Store(&rr.Phase)
	}
	iv := c.cfg.HeartbeatInterval
	if s := rr.HeartbeatInterval.Duration; s > 0 && (iv == 0 || s < iv) {
		iv = s
	}
	if iv <= 0 {
		iv = DefaultHeartbeatInterval
	}
	c.interval.Store(int64(iv))
	if (rr.JobID != "" && rr.JobID != c.cfg.JobID) || (rr.WorkerID != "" && rr.WorkerID != c.cfg.WorkerID) {
		c.log.Warn("the server registered this sidecar under another identity than it was given",
			"job", c.cfg.JobID, "worker", c.cfg.WorkerID, "serverJob", rr.JobID, "serverWorker", rr.WorkerID)
	}
}

func (c *Client) nextSeq() uint64 {
	c.seqMu.Lock()
	defer c.seqMu.Unlock()
	c.lastSent++
	return c.lastSent
}

// statusError turns a non-success HTTP answer into a *PermanentError or a
// *retryAfterError.
func statusError(op string, resp *http.Response) error {
	var er *binding.ErrorResponse
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody))
	if len(bytes.TrimSpace(b)) > 0 {
		var e binding.ErrorResponse
		if json.Unmarshal(b, &e) == nil && e.Code != "" {
			er = &e
		} else {
			er = &binding.ErrorResponse{Message: truncate(strings.TrimSpace(string(b)), 256)}
		}
	}
	switch resp.StatusCode {
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusGone:
		return &PermanentError{Op: op, StatusCode: resp.StatusCode, Response: er}
	}
	e := &retryAfterError{op: op, status: resp.StatusCode, resp: er}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		e.after = time.Duration(s) * time.Second
	}
	return e
}

// retryDelay is the next backoff, or the server's Retry-After if longer
// (capped by BackoffMax).
func (c *Client) retryDelay(bo *retry.Backoff, err error) time.Duration {
	d := bo.Next()
	var ra *retryAfterError
	if errors.As(err, &ra) && ra.after > d {
		d = min(ra.after, c.cfg.BackoffMax)
	}
	return d
}
