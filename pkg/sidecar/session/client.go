package session

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/sidecar/credentials"
)

// Client is the sidecar's half of the binding protocol: it registers, keeps
// one WebSocket session open, heartbeats on it, answers commands and
// reconnects with backoff until the binding ends or its context is
// cancelled.
type Client struct {
	cfg         Config
	log         *slog.Logger
	registerURL string
	sessionURL  string

	running atomic.Bool

	// seqMu guards lastSent, the highest heartbeat seq used by this process
	// or acknowledged by the server at registration.
	seqMu    sync.Mutex
	lastSent uint64

	registered atomic.Bool
	lastAcked  atomic.Uint64
	rtt        atomic.Int64 // smoothed, nanoseconds
	sessions   atomic.Int64
	takeovers  atomic.Int64
	phase      atomic.Pointer[string]
	interval   atomic.Int64 // effective heartbeat interval, nanoseconds

	mu   sync.Mutex
	sess *session

	ca *credentials.CA

	sample atomic.Pointer[progressSample]
	cmds   chan commandRequest
}

type progressSample struct {
	progress      *binding.Progress
	uploaded      int64
	artifactError string
	skipped       []binding.SkippedEntry
	skippedCount  int
	checkpoint    *binding.Checkpoint
}

type commandRequest struct {
	cmd binding.Command
	s   *session
}

// NewClient checks cfg and returns a Client.
func NewClient(cfg Config) (*Client, error) {
	u, err := binding.ParseServerURL(cfg.ServerURL)
	switch {
	case err != nil:
		return nil, fmt.Errorf("binding client: %w", err)
	case cfg.TokenFile == "":
		return nil, errors.New("binding client: TokenFile is required")
	case cfg.JobID == "" || cfg.WorkerID == "":
		return nil, errors.New("binding client: JobID and WorkerID are required")
	case cfg.HeartbeatInterval < 0 || cfg.RequestTimeout < 0:
		return nil, errors.New("binding client: negative HeartbeatInterval or RequestTimeout")
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = defaultRequestTimeout
	}
	if cfg.BackoffInitial <= 0 {
		cfg.BackoffInitial = DefaultBackoffInitial
	}
	if cfg.BackoffMax <= 0 {
		cfg.BackoffMax = DefaultBackoffMax
	}
	c := &Client{cfg: cfg, log: cfg.Logger, ca: credentials.NewCA(cfg.CAFile)}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	base := strings.TrimSuffix(u.Path, "/")
	u.Path = base + binding.PathRegister
	c.registerURL = u.String()
	u.Scheme, u.Path = "wss", base+binding.PathSession
	c.sessionURL = u.String()
	iv := cfg.HeartbeatInterval
	if iv == 0 {
		iv = DefaultHeartbeatInterval
	}
	c.interval.Store(int64(iv))
	return c, nil
}

// LastAckedSeq is the highest heartbeat seq the server has acknowledged to
// this process (not counting RegisterResponse.LastSeq).
func (c *Client) LastAckedSeq() uint64 { return c.lastAcked.Load() }

// Reconnects counts the sessions opened after the first one.
func (c *Client) Reconnects() int { return int(max(c.sessions.Load()-1, 0)) }

// Takeovers counts the times the server closed this process's session
// because another one of the same worker opened (CloseReplaced).
func (c *Client) Takeovers() int { return int(c.takeovers.Load()) }

// Connected reports whether a session is open now.
func (c *Client) Connected() bool { return c.currentSession() != nil }

// RTT is the smoothed heartbeat-to-ack round trip time; 0 before the first
// ack.
func (c *Client) RTT() time.Duration { return time.Duration(c.rtt.Load()) }

// Phase is the binding phase in the last ack or registration answer.
func (c *Client) Phase() string {
	if p := c.phase.Load(); p != nil {
		return *p
	}
	return ""
}

// HeartbeatInterval is the interval in use: the configured one, or the
// server's if shorter.
func (c *Client) HeartbeatInterval() time.Duration { return time.Duration(c.interval.Load()) }

func (c *Client) currentSession() *session {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sess
}
