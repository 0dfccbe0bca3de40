package session

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/pkg/binding"
)

// Default reconnect backoff of the Client.
const (
	DefaultBackoffInitial = 500 * time.Millisecond
	DefaultBackoffMax     = 30 * time.Second
)

// DefaultHeartbeatInterval is the Client's heartbeat interval when neither
// its configuration nor the server says otherwise.
const DefaultHeartbeatInterval = 10 * time.Second

const (
	defaultRequestTimeout = 15 * time.Second
	// maxResponseBody bounds what the client reads of an HTTP answer.
	maxResponseBody = 64 << 10
	// maxAckError bounds CommandAck.Error so an ack always fits in a frame.
	maxAckError = 1 << 10
	// closeWait bounds the wait for the server's answer to our close frame.
	closeWait = time.Second
	// commandQueue is how many pushed commands may wait for OnCommand.
	commandQueue = 32
)

// Config configures a Client. ServerURL, TokenFile, JobID and WorkerID
// are required.
type Config struct {
	// ServerURL is the binding server's https base URL; PathRegister and
	// PathSession are appended to its path.
	ServerURL string
	// TokenFile holds the binding token (64 hex characters). It is read
	// again on every (re)connection, so a rotated token is picked up. The
	// token only ever travels in the Authorization header and is never
	// logged.
	TokenFile string
	// PodTokenFile holds the pod's projected ServiceAccount token (audience
	// names.PodTokenAudience), sent in names.HeaderPodToken on every
	// request: it proves the pod the client claims to be (Pod). It is read
	// again for every request (the kubelet rotates it) and never logged.
	// Empty sends none, and the server refuses the request.
	PodTokenFile string
	// CAFile holds the PEM CA bundle that verifies the server. It is read
	// again on every (re)connection (a rotated CA is picked up). Empty means
	// the system roots.
	CAFile string

	JobID    string
	WorkerID string
	Pod      binding.PodIdentity
	// SidecarVersion is sent at registration, for information.
	SidecarVersion string

	// HeartbeatInterval is how often a heartbeat is sent. When the server's
	// RegisterResponse asks for a shorter interval, the server's wins: the
	// client never heartbeats more slowly than the server expects. 0 means
	// the server's interval, or DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration
	// RequestTimeout bounds one registration request and one WebSocket
	// handshake; 0 means 15s.
	RequestTimeout time.Duration
	// BackoffInitial and BackoffMax shape the retry delays (exponential,
	// full jitter); 0 means DefaultBackoffInitial and DefaultBackoffMax.
	BackoffInitial time.Duration
	BackoffMax     time.Duration

	// Logger receives the client's logs; nil discards them.
	Logger *slog.Logger

	// Progress, if set, returns the trainer's progress for heartbeats (nil:
	// none). UploadedBytes, if set, returns the total uploaded so far. Both
	// are called from their own goroutine about once per heartbeat interval,
	// never from the one that writes heartbeats, so a slow file system delays
	// the reported progress and not the heartbeats. A call still running when
	// Run returns is not waited for.
	Progress      func() *binding.Progress
	UploadedBytes func() int64
	// ArtifactError, if set, returns the last artifact upload failure ("" when
	// none): the file, the error and what to do. It travels in heartbeats so
	// the binding shows it.
	ArtifactError func() string
	// Skipped, if set, returns the entries the last artifact scan skipped by
	// policy and how many in all; heartbeats carry the first
	// binding.MaxReportedSkipped so the binding names them.
	Skipped func() ([]binding.SkippedEntry, int)
	// Checkpoint, if set, returns the newest checkpoint whose every file is
	// verified (nil: none yet); heartbeats carry it. It should be cheap: the
	// artifact syncer computes it once per round and keeps it.
	Checkpoint func() *binding.Checkpoint

	// OnCommand, if set, executes a command the server pushed; its result
	// becomes the CommandAck (OK when it returns nil, else Error is its
	// message). Commands run one at a time, in the order they arrived, on a
	// goroutine of their own; ctx is Run's. Without OnCommand every command
	// is acknowledged with OK false.
	OnCommand func(ctx context.Context, cmd binding.Command) error

	// HTTPClient and Dialer replace the ones the client builds (tests). When
	// set, CAFile is not used for that connection and the caller owns their
	// TLS configuration.
	HTTPClient *http.Client
	Dialer     *websocket.Dialer
}
