package binding

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
)

// ProtocolVersion is the version of the wire protocol this package speaks.
// A peer announces its version in names.HeaderProtocolVersion on every request.
const ProtocolVersion = "v1"

// Endpoints and headers.
const (
	PathRegister = "/v1/register"
	PathSession  = "/v1/session"

	// HeaderAuthorization carries "Bearer <token>". The protocol's own
	// headers (the version, the worker's claimed identity, the pod token)
	// are in api/names with every other name that crosses a process.
	HeaderAuthorization = "Authorization"
	// MaxPodTokenLength bounds names.HeaderPodToken (a ServiceAccount JWT is
	// about 1 KiB).
	MaxPodTokenLength = 8 << 10
)

// Limits the server enforces.
const (
	// MaxRegisterBody bounds a registration request body.
	MaxRegisterBody = 16 << 10
	// MaxFrameSize bounds one WebSocket message; a larger one closes the
	// session with CloseMessageTooBig (1009).
	MaxFrameSize = 16 << 10
	// MaxTokenLength bounds the Authorization header's token.
	MaxTokenLength = 256
	// MaxBoundNodes bounds the nodes of one job that Tether binds (node
	// ranks 0..255; the WorkerBinding's status.nodes): the pod webhook
	// denies a pod of a higher rank, naming tether.dev/nodes=primary.
	MaxBoundNodes = 256
)

// WebSocket close codes (4000-4999 are application codes).
const (
	// CloseProtocolError: a malformed, unknown or out-of-order frame.
	CloseProtocolError = 4000
	// CloseReplaced: a newer session of the same worker took over.
	CloseReplaced = 4001
	// CloseRevoked: the binding no longer exists (TrainJob deleted) or the
	// token no longer matches it.
	CloseRevoked = 4003
	// CloseFinished: the binding reached Succeeded or Failed.
	CloseFinished = 4004
	// CloseHeartbeatTimeout: nothing was read within the read deadline.
	CloseHeartbeatTimeout = 4005
	// CloseTokenExpired: the token the session was opened with was
	// replaced and its overlap has ended; the worker reconnects with the
	// token file's current token (the kubelet has updated it by then).
	CloseTokenExpired = 4006
	// CloseRateLimited: the worker sent frames faster than the session's
	// budget (FramesPerInterval per heartbeat interval, FrameBurst at once).
	CloseRateLimited = 4007
)

// Error codes in an ErrorResponse (HTTP) and in close reasons.
const (
	ErrUnauthorized       = "Unauthorized"       // 401: no token, malformed token, or no binding has it
	ErrForbidden          = "Forbidden"          // 403: the token belongs to another job, worker or pod
	ErrBindingFinished    = "BindingFinished"    // 410: the binding is Succeeded or Failed
	ErrUnsupportedVersion = "UnsupportedVersion" // 400: names.HeaderProtocolVersion is not ProtocolVersion
	ErrBadRequest         = "BadRequest"         // 400: the body is not a valid request
	ErrUnavailable        = "Unavailable"        // 503: the server cannot decide now; retry
	ErrRateLimited        = "RateLimited"        // 429: too many requests with this token; retry after Retry-After
	ErrSessionActive      = "SessionActive"      // 409: the worker's session is open and heartbeating; retry after a backoff
)

// PodIdentity is the pod a sidecar runs in, from the downward API.
type PodIdentity struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	Node      string `json:"node,omitempty"`
}

// RegisterRequest is the body of POST PathRegister.
type RegisterRequest struct {
	// JobID and WorkerID are what the sidecar was told; the server checks
	// them against the binding and never takes them from here.
	JobID    string      `json:"jobID"`
	WorkerID string      `json:"workerID"`
	Pod      PodIdentity `json:"pod"`
	// SidecarVersion is informational.
	SidecarVersion string `json:"sidecarVersion,omitempty"`
}

// RegisterResponse is the 200 answer to a registration.
type RegisterResponse struct {
	JobID    string `json:"jobID"`
	WorkerID string `json:"workerID"`
	// Phase is the binding's phase after registration.
	Phase string `json:"phase"`
	// HeartbeatInterval is how often the server expects heartbeats.
	HeartbeatInterval Duration `json:"heartbeatInterval"`
	// LastSeq is the highest heartbeat sequence number the server has
	// acknowledged for this worker, so a restarted sidecar resumes after it.
	LastSeq uint64 `json:"lastSeq"`
	// NodeRank is the node rank the server took from the pod (its Job
	// completion index); NodeCount how many nodes of the job are bound (0
	// while unknown). Informational: the sidecar's keys come from its
	// TETHER_NODE_RANK, which the pod webhook derived the same way.
	NodeRank  int32 `json:"nodeRank"`
	NodeCount int32 `json:"nodeCount,omitempty"`
	// Attempt is the binding's attempt after registration.
	Attempt int32 `json:"attempt,omitempty"`
}

// ErrorResponse is the body of every non-200 HTTP answer.
type ErrorResponse struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *ErrorResponse) Error() string { return e.Code + ": " + e.Message }

// Frame types.
const (
	FrameHeartbeat  = "heartbeat"  // client → server
	FrameAck        = "ack"        // server → client, answers a heartbeat
	FrameCommand    = "command"    // server → client
	FrameCommandAck = "commandAck" // client → server, answers a command
	FrameFinishing  = "finishing"  // client → server: the pod is terminating
)

// Commands the server can push.
const (
	CommandFlush  = "flush"  // upload every finished artifact now
	CommandCancel = "cancel" // the orchestrator is cancelling the job: a final flush (as drain); the orchestrator stops the job after it
	CommandDrain  = "drain"  // the worker should wrap up: flush, then report Finishing
)

// Frame is one WebSocket text message: a JSON object whose Type says which
// one payload field is set.
type Frame struct {
	Type       string      `json:"type"`
	Heartbeat  *Heartbeat  `json:"heartbeat,omitempty"`
	Ack        *Ack        `json:"ack,omitempty"`
	Command    *Command    `json:"command,omitempty"`
	CommandAck *CommandAck `json:"commandAck,omitempty"`
	Finishing  *Finishing  `json:"finishing,omitempty"`
}

// Heartbeat proves the worker alive and carries its progress.
type Heartbeat struct {
	// Seq increases with every heartbeat across the worker's life,
	// reconnects included (it resumes after RegisterResponse.LastSeq). Gaps
	// are allowed (a heartbeat lost with its connection is not resent);
	// within one session it must strictly increase.
	Seq      uint64    `json:"seq"`
	SentAt   time.Time `json:"sentAt"`
	Progress *Progress `json:"progress,omitempty"`
	// UploadedBytes is the total the sidecar has had verified so far.
	UploadedBytes int64 `json:"uploadedBytes,omitempty"`
	// ArtifactError is the last artifact upload failure, "" when none: the
	// file, the error and what to do (at most MaxArtifactErrorLength bytes).
	ArtifactError string `json:"artifactError,omitempty"`
	// Skipped names up to MaxReportedSkipped entries the last scan did not
	// upload by policy; SkippedCount counts them all (skipped.go).
	Skipped      []SkippedEntry `json:"skipped,omitempty"`
	SkippedCount int            `json:"skippedCount,omitempty"`
	// Checkpoint is the newest checkpoint in the artifact directory whose
	// every file the sidecar has had verified (checkpoint.go); nil until
	// there is one.
	Checkpoint *Checkpoint `json:"checkpoint,omitempty"`
}

// MaxArtifactErrorLength bounds Heartbeat.ArtifactError.
const MaxArtifactErrorLength = 1024

// Progress is what the trainer reported through the progress file.
type Progress struct {
	Step  *int64   `json:"step,omitempty"`
	Epoch *float64 `json:"epoch,omitempty"`
	Loss  *float64 `json:"loss,omitempty"`
	// Fraction is progress from 0 to 1 when the trainer knows its total.
	Fraction  *float64  `json:"fraction,omitempty"`
	UpdatedAt time.Time `json:"updatedAt,omitempty"`
}

// Sanitized is p without what a heartbeat cannot carry: NaN and infinities
// (JSON has none) and a fraction outside [0, 1]; nil when nothing is left.
func (p *Progress) Sanitized() *Progress {
	if p == nil {
		return nil
	}
	q := *p
	q.Epoch, q.Loss, q.Fraction = finite(q.Epoch), finite(q.Loss), finite(q.Fraction)
	if q.Fraction != nil && (*q.Fraction < 0 || *q.Fraction > 1) {
		q.Fraction = nil
	}
	if q.Step == nil && q.Epoch == nil && q.Loss == nil && q.Fraction == nil {
		return nil
	}
	return &q
}

// finite drops NaN and infinities.
func finite(f *float64) *float64 {
	if f == nil || math.IsNaN(*f) || math.IsInf(*f, 0) {
		return nil
	}
	return f
}

// Ack answers a heartbeat.
type Ack struct {
	Seq        uint64    `json:"seq"`
	ServerTime time.Time `json:"serverTime"`
	Phase      string    `json:"phase"`
}

// Command is pushed by the server; the client answers with a CommandAck of
// the same ID.
type Command struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Reason string `json:"reason,omitempty"`
}

// CommandAck answers a command.
type CommandAck struct {
	ID    string `json:"id"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// Finishing says the pod is terminating (SIGTERM). The sidecar sends it when
// the signal arrives and, if its final flush left files unverified, once
// more after the flush with what it could not verify: the binding then names
// them (a sidecar log line alone would be lost with the pod).
type Finishing struct {
	Reason string `json:"reason,omitempty"`
	// Unverified names up to MaxReportedUnverified files the final flush
	// could not verify, in path order; UnverifiedCount counts them all.
	Unverified      []string `json:"unverified,omitempty"`
	UnverifiedCount int      `json:"unverifiedCount,omitempty"`
	// ArtifactError is why the first of them failed and what to do (at
	// most MaxArtifactErrorLength bytes).
	ArtifactError string `json:"artifactError,omitempty"`
	// Skipped and SkippedCount are the final scan's, as in Heartbeat.
	Skipped      []SkippedEntry `json:"skipped,omitempty"`
	SkippedCount int            `json:"skippedCount,omitempty"`
	// Progress is the progress file as the pod stops: the trainer's last
	// line, which the next heartbeat's status write might never carry (the
	// binding may end first).
	Progress *Progress `json:"progress,omitempty"`
}

// MaxReportedUnverified bounds Finishing.Unverified (the WorkerBinding names
// at most that many missing files), and MaxReportedPathLength each path (an
// S3 key's limit).
const (
	MaxReportedUnverified = 10
	MaxReportedPathLength = 1024
)

// ErrMalformedFrame wraps every decoding failure.
var ErrMalformedFrame = errors.New("malformed frame")

// DecodeFrame parses and validates one frame. Unknown fields are ignored
// (forward compatibility); an unknown type, a missing or extra payload, or an
// invalid payload is an error wrapping ErrMalformedFrame.
func DecodeFrame(b []byte) (Frame, error) {
	var f Frame
	if len(b) > MaxFrameSize {
		return f, fmt.Errorf("%w: %d bytes, limit %d", ErrMalformedFrame, len(b), MaxFrameSize)
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return Frame{}, fmt.Errorf("%w: %v", ErrMalformedFrame, err)
	}
	payloads := 0
	for _, set := range []bool{f.Heartbeat != nil, f.Ack != nil, f.Command != nil, f.CommandAck != nil, f.Finishing != nil} {
		if set {
			payloads++
		}
	}
	bad := func(format string, args ...any) (Frame, error) {
		return Frame{}, fmt.Errorf("%w: "+format, append([]any{ErrMalformedFrame}, args...)...)
	}
	if payloads != 1 {
		return bad("type %q: exactly one payload must be set, found %d", f.Type, payloads)
	}
	switch f.Type {
	case FrameHeartbeat:
		if f.Heartbeat == nil {
			return bad("heartbeat frame without heartbeat payload")
		}
		if f.Heartbeat.Seq == 0 {
			return bad("heartbeat seq must be > 0")
		}
		if p := f.Heartbeat.Progress; p != nil && p.Fraction != nil && !(*p.Fraction >= 0 && *p.Fraction <= 1) {
			// Progress is advisory: a bad value is dropped, the heartbeat
			// (the worker's liveness) is kept.
			p.Fraction = nil
		}
		if f.Heartbeat.UploadedBytes < 0 {
			return bad("uploadedBytes must be >= 0")
		}
		if len(f.Heartbeat.ArtifactError) > MaxArtifactErrorLength {
			return bad("artifactError longer than %d bytes", MaxArtifactErrorLength)
		}
		if err := checkSkipped(f.Heartbeat.Skipped, f.Heartbeat.SkippedCount); err != nil {
			return bad("heartbeat: %v", err)
		}
		if err := f.Heartbeat.Checkpoint.check(); err != nil {
			return bad("heartbeat: %v", err)
		}
	case FrameAck:
		if f.Ack == nil {
			return bad("ack frame without ack payload")
		}
	case FrameCommand:
		if f.Command == nil || f.Command.ID == "" {
			return bad("command frame needs a command with an id")
		}
		switch f.Command.Name {
		case CommandFlush, CommandCancel, CommandDrain:
		default:
			return bad("unknown command %q", f.Command.Name)
		}
	case FrameCommandAck:
		if f.CommandAck == nil || f.CommandAck.ID == "" {
			return bad("commandAck frame needs a commandAck with an id")
		}
	case FrameFinishing:
		if f.Finishing == nil {
			return bad("finishing frame without finishing payload")
		}
		fin := f.Finishing
		switch {
		case len(fin.Unverified) > MaxReportedUnverified:
			return bad("finishing: %d unverified paths, at most %d", len(fin.Unverified), MaxReportedUnverified)
		case fin.UnverifiedCount < len(fin.Unverified):
			return bad("finishing: unverifiedCount %d below the %d paths listed", fin.UnverifiedCount, len(fin.Unverified))
		case len(fin.ArtifactError) > MaxArtifactErrorLength:
			return bad("finishing: artifactError longer than %d bytes", MaxArtifactErrorLength)
		}
		for _, p := range fin.Unverified {
			if p == "" || len(p) > MaxReportedPathLength {
				return bad("finishing: unverified path of %d bytes (1..%d)", len(p), MaxReportedPathLength)
			}
		}
		if err := checkSkipped(fin.Skipped, fin.SkippedCount); err != nil {
			return bad("finishing: %v", err)
		}
		if p := fin.Progress; p != nil && p.Fraction != nil && !(*p.Fraction >= 0 && *p.Fraction <= 1) {
			p.Fraction = nil // advisory, as in a heartbeat
		}
	default:
		return bad("unknown frame type %q", f.Type)
	}
	return f, nil
}

// Duration is a time.Duration that travels as a Go duration string ("10s").
type Duration struct{ time.Duration }

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}
