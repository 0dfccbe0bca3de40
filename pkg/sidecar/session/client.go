package session

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/sidecar/credentials"
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

// PermanentError is a refusal that retrying cannot fix: the server answered
// a registration or session upgrade with 400, 401, 403 or 410, closed the
// session with CloseReplaced, CloseRevoked or CloseFinished, or the token file
// holds no well-formed token.
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
	}
	return "close code " + strconv.Itoa(code)
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
}

type commandRequest struct {
	cmd binding.Command
	s   *session
}

// NewClient checks cfg and returns a Client.
func NewClient(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.ServerURL)
	switch {
	case cfg.ServerURL == "":
		return nil, errors.New("binding client: ServerURL is required")
	case err != nil:
		return nil, fmt.Errorf("binding client: ServerURL: %w", err)
	case u.Scheme != "https":
		// The token must never cross the network in clear text.
		return nil, fmt.Errorf("binding client: ServerURL %q: scheme must be https", cfg.ServerURL)
	case u.Host == "":
		return nil, fmt.Errorf("binding client: ServerURL %q has no host", cfg.ServerURL)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("binding client: ServerURL %q must not carry user info, a query or a fragment", cfg.ServerURL)
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

// ---- registration ----

// Register registers the worker: POST PathRegister. It retries network
// errors and every answer but 400, 401, 403 and 410 with backoff until ctx
// ends; those four are returned at once as a *PermanentError.
func (c *Client) Register(ctx context.Context) (binding.RegisterResponse, error) {
	return c.register(ctx, credentials.NewBackoff(c.cfg.BackoffInitial, c.cfg.BackoffMax))
}

func (c *Client) register(ctx context.Context, bo *credentials.Backoff) (binding.RegisterResponse, error) {
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
		if serr := credentials.Sleep(ctx, d); serr != nil {
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
func (c *Client) retryDelay(bo *credentials.Backoff, err error) time.Duration {
	d := bo.Next()
	var ra *retryAfterError
	if errors.As(err, &ra) && ra.after > d {
		d = min(ra.after, c.cfg.BackoffMax)
	}
	return d
}

// ---- credentials ----

// readToken reads and checks the token file. An unreadable file is a
// retryable error (the kubelet may be swapping it); a malformed token is
// permanent, as the server would refuse it with 401.
func (c *Client) readToken() (binding.Token, error) {
	token, err := credentials.ReadToken(c.cfg.TokenFile)
	switch {
	case errors.Is(err, credentials.ErrMalformedToken):
		return "", &PermanentError{Op: "read token", Response: &binding.ErrorResponse{
			Code:    binding.ErrUnauthorized,
			Message: "token file " + c.cfg.TokenFile + " does not hold a 64-character lowercase hex token",
		}}
	case err != nil:
		return "", fmt.Errorf("read token: %w", err)
	}
	return token, nil
}

func (c *Client) headers(token binding.Token) http.Header {
	h := http.Header{}
	h.Set(binding.HeaderAuthorization, token.BearerHeader())
	h.Set(binding.HeaderProtocolVersion, binding.ProtocolVersion)
	ua := "tether-sidecar"
	if c.cfg.SidecarVersion != "" {
		ua += "/" + c.cfg.SidecarVersion
	}
	h.Set("User-Agent", ua)
	return h
}

// sessionHeaders are headers plus the identity a session must claim.
func (c *Client) sessionHeaders(token binding.Token) http.Header {
	h := c.headers(token)
	h.Set(binding.HeaderJobID, c.cfg.JobID)
	h.Set(binding.HeaderWorkerID, c.cfg.WorkerID)
	h.Set(binding.HeaderPodNamespace, c.cfg.Pod.Namespace)
	h.Set(binding.HeaderPodName, c.cfg.Pod.Name)
	h.Set(binding.HeaderPodUID, c.cfg.Pod.UID)
	return h
}

// tlsConfig is a fresh TLS configuration with the CA file as it is now.
func (c *Client) tlsConfig() (*tls.Config, error) {
	pool, changed, err := c.ca.Pool()
	if err != nil {
		return nil, err
	}
	if changed {
		c.log.Info("CA bundle changed; using the new one", "file", c.ca.File())
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}, nil
}

func (c *Client) httpClient() (*http.Client, error) {
	if c.cfg.HTTPClient != nil {
		return c.cfg.HTTPClient, nil
	}
	tc, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	return &http.Client{
		// Registration is rare: no idle connections to keep or leak. No
		// proxy: the binding server is in the cluster.
		Transport: &http.Transport{
			TLSClientConfig:     tc,
			DisableKeepAlives:   true,
			TLSHandshakeTimeout: c.cfg.RequestTimeout,
			DialContext:         (&net.Dialer{Timeout: c.cfg.RequestTimeout, KeepAlive: 30 * time.Second}).DialContext,
		},
		// Never follow a redirect: the answer is the server's or an error.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, nil
}

func (c *Client) dialer() (*websocket.Dialer, error) {
	if c.cfg.Dialer != nil {
		return c.cfg.Dialer, nil
	}
	tc, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	return &websocket.Dialer{
		TLSClientConfig:  tc,
		HandshakeTimeout: c.cfg.RequestTimeout,
		ReadBufferSize:   4 << 10,
		WriteBufferSize:  4 << 10,
	}, nil
}

// ---- session ----

// session is one open WebSocket connection. Only its writer goroutine (the
// one running Client.runSession) writes data frames; others hand frames to it
// through out. Control frames (pong, close) use WriteControl, which gorilla
// allows concurrently.
type session struct {
	conn *websocket.Conn
	out  chan writeRequest
	done chan struct{} // closed when the session has ended

	sentMu sync.Mutex
	sent   []sentHeartbeat // recent heartbeats, for the RTT estimate
}

type sentHeartbeat struct {
	seq uint64
	at  time.Time
}

type writeRequest struct {
	frame binding.Frame
	done  chan error
}

var errSessionClosed = errors.New("session closed")

// send hands f to the session's writer and waits until it was written.
func (s *session) send(ctx context.Context, f binding.Frame) error {
	req := writeRequest{frame: f, done: make(chan error, 1)}
	select {
	case s.out <- req:
	case <-s.done:
		return errSessionClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-req.done:
		return err
	case <-s.done:
		select {
		case err := <-req.done:
			return err
		default:
			return errSessionClosed
		}
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *session) noteSent(seq uint64, at time.Time) {
	s.sentMu.Lock()
	defer s.sentMu.Unlock()
	if len(s.sent) >= 16 {
		s.sent = append(s.sent[:0], s.sent[1:]...)
	}
	s.sent = append(s.sent, sentHeartbeat{seq, at})
}

// takeSent returns when seq was sent and forgets it and everything older.
func (s *session) takeSent(seq uint64) (time.Time, bool) {
	s.sentMu.Lock()
	defer s.sentMu.Unlock()
	for i, h := range s.sent {
		if h.seq == seq {
			s.sent = append(s.sent[:0], s.sent[i+1:]...)
			return h.at, true
		}
	}
	return time.Time{}, false
}

// Run registers, then keeps a session open and heartbeats on it until ctx is
// cancelled (it then closes the session with 1000 and returns nil) or the
// binding ends for good (it returns a *PermanentError). Lost connections,
// server errors, CloseProtocolError and CloseHeartbeatTimeout lead to a new
// registration and session after a backoff. Run must not be called twice at
// once.
func (c *Client) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("binding client: Run is already running")
	}
	defer c.running.Store(false)

	var wg sync.WaitGroup
	defer wg.Wait() // after cancel, below
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if c.cfg.Progress != nil || c.cfg.UploadedBytes != nil || c.cfg.ArtifactError != nil {
		go c.sampleLoop(ctx) // not waited for: see Config.Progress
	}
	c.cmds = make(chan commandRequest, commandQueue)
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.commandLoop(ctx)
	}()

	bo := credentials.NewBackoff(c.cfg.BackoffInitial, c.cfg.BackoffMax)
	for {
		rr, err := c.register(ctx, bo)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err // permanent
		}
		c.log.Info("registered", "job", c.cfg.JobID, "worker", c.cfg.WorkerID, "phase", rr.Phase,
			"lastSeq", rr.LastSeq, "heartbeatInterval", c.HeartbeatInterval())
		healthy, err := c.runSession(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if IsPermanent(err) {
			c.log.Error("binding ended", "error", err)
			return err
		}
		if healthy {
			bo.Reset()
		}
		d := c.retryDelay(bo, err)
		c.log.Warn("session lost; reconnecting", "error", err, "retryIn", d)
		if credentials.Sleep(ctx, d) != nil {
			return nil
		}
	}
}

// runSession opens one session and serves it until it ends. healthy reports
// that the server acknowledged at least one heartbeat, i.e. the backoff can
// start over.
func (c *Client) runSession(ctx context.Context) (healthy bool, err error) {
	token, err := c.readToken()
	if err != nil {
		return false, err
	}
	d, err := c.dialer()
	if err != nil {
		return false, err
	}
	dctx, dcancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	conn, resp, err := d.DialContext(dctx, c.sessionURL, c.sessionHeaders(token))
	dcancel()
	if err != nil {
		if resp != nil && errors.Is(err, websocket.ErrBadHandshake) {
			defer resp.Body.Close()
			return false, statusError("open session", resp)
		}
		return false, fmt.Errorf("open session: %w", err)
	}

	interval := c.HeartbeatInterval()
	readTimeout := 3 * interval
	writeTimeout := min(max(interval, time.Second), 10*time.Second)
	s := &session{conn: conn, out: make(chan writeRequest), done: make(chan struct{})}
	var acked atomic.Bool

	conn.SetReadLimit(binding.MaxFrameSize)
	extend := func() { _ = conn.SetReadDeadline(time.Now().Add(readTimeout)) }
	extend()
	conn.SetPingHandler(func(data string) error {
		extend()
		err := conn.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(writeTimeout))
		var ne net.Error
		if errors.Is(err, websocket.ErrCloseSent) || errors.As(err, &ne) && ne.Timeout() {
			return nil
		}
		return err
	})

	readErr := make(chan error, 1)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			_, data, err := conn.ReadMessage()
			if err != nil {
				readErr <- err
				return
			}
			extend()
			c.handleFrame(ctx, s, data, &acked)
		}
	}()

	c.mu.Lock()
	c.sess = s
	c.mu.Unlock()
	if c.sessions.Add(1) > 1 {
		c.log.Info("session reopened", "reconnects", c.Reconnects())
	} else {
		c.log.Info("session open")
	}
	defer func() {
		c.mu.Lock()
		if c.sess == s {
			c.sess = nil
		}
		c.mu.Unlock()
		close(s.done)
		conn.Close()
		<-readerDone
		healthy = acked.Load()
	}()

	write := func(b []byte) error {
		_ = conn.SetWriteDeadline(time.Now().Add(writeTimeout))
		return conn.WriteMessage(websocket.TextMessage, b)
	}
	heartbeat := func() error {
		b, seq := c.heartbeatFrame()
		s.noteSent(seq, time.Now())
		if err := write(b); err != nil {
			return fmt.Errorf("sending heartbeat %d: %w", seq, err)
		}
		return nil
	}

	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	if err := heartbeat(); err != nil {
		return false, err
	}
	for {
		select {
		case <-ctx.Done():
			// Clean stop: close 1000 and give the server a moment to answer.
			_ = conn.WriteControl(websocket.CloseMessage,
				websocket.FormatCloseMessage(websocket.CloseNormalClosure, "sidecar stopping"), time.Now().Add(closeWait))
			t := time.NewTimer(closeWait)
			select {
			case <-readerDone:
			case <-t.C:
			}
			t.Stop()
			return false, nil
		case <-ticker.C:
			if err := heartbeat(); err != nil {
				return false, err
			}
		case req := <-s.out:
			b, err := json.Marshal(req.frame)
			if err == nil {
				err = write(b)
			}
			req.done <- err
			if err != nil {
				return false, fmt.Errorf("sending %s: %w", req.frame.Type, err)
			}
		case err := <-readErr:
			return false, c.sessionEnded(err, readTimeout)
		}
	}
}

// heartbeatFrame builds the next heartbeat. Progress the protocol would
// reject (DecodeFrame is the server's check) is left out rather than
// breaking the session.
func (c *Client) heartbeatFrame() ([]byte, uint64) {
	hb := &binding.Heartbeat{Seq: c.nextSeq(), SentAt: time.Now().UTC()}
	if smp := c.sample.Load(); smp != nil {
		hb.Progress = smp.progress.Sanitized()
		hb.UploadedBytes = max(smp.uploaded, 0)
		hb.ArtifactError = smp.artifactError
	}
	f := binding.Frame{Type: binding.FrameHeartbeat, Heartbeat: hb}
	b, err := json.Marshal(f)
	if err == nil {
		_, err = binding.DecodeFrame(b)
	}
	if err != nil {
		c.log.Warn("leaving invalid progress out of the heartbeat", "error", err)
		hb.Progress = nil
		b, _ = json.Marshal(f) // cannot fail: no floats left
	}
	return b, hb.Seq
}

// sessionEnded classifies the error that ended the reader.
func (c *Client) sessionEnded(err error, readTimeout time.Duration) error {
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		switch ce.Code {
		case binding.CloseReplaced, binding.CloseRevoked, binding.CloseFinished:
			return &PermanentError{Op: "session", CloseCode: ce.Code, CloseText: ce.Text}
		case binding.CloseProtocolError:
			c.log.Warn("the server closed the session for a protocol error", "reason", ce.Text)
		}
		return fmt.Errorf("server closed the session with %d (%s): %q", ce.Code, closeCodeMeaning(ce.Code), ce.Text)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("nothing read from the server for %s: connection presumed dead", readTimeout)
	}
	return fmt.Errorf("connection lost: %w", err)
}

// handleFrame runs on the reader goroutine and must not block on the writer
// for long.
func (c *Client) handleFrame(ctx context.Context, s *session, data []byte, acked *atomic.Bool) {
	f, err := binding.DecodeFrame(data)
	if err != nil {
		// Be lenient with the server: ignore the frame, but answer a
		// command we cannot read (e.g. one from a newer server) so that the
		// server does not wait for its ack.
		var raw struct {
			Type    string `json:"type"`
			Command *struct {
				ID   string `json:"id"`
				Name string `json:"name"`
			} `json:"command"`
		}
		if json.Unmarshal(data, &raw) == nil && raw.Type == binding.FrameCommand && raw.Command != nil && raw.Command.ID != "" {
			c.log.Warn("refusing an unsupported command", "id", raw.Command.ID, "command", truncate(raw.Command.Name, 64))
			go c.sendAck(ctx, s, binding.CommandAck{ID: raw.Command.ID, Error: "unsupported command " + strconv.Quote(truncate(raw.Command.Name, 64))})
			return
		}
		c.log.Warn("ignoring a malformed frame from the server", "error", err)
		return
	}
	switch f.Type {
	case binding.FrameAck:
		acked.Store(true)
		c.noteAck(s, f.Ack)
	case binding.FrameCommand:
		c.log.Info("command received", "id", f.Command.ID, "command", f.Command.Name, "reason", f.Command.Reason)
		select {
		case c.cmds <- commandRequest{cmd: *f.Command, s: s}:
		default:
			go c.sendAck(ctx, s, binding.CommandAck{ID: f.Command.ID, Error: "too many commands pending"})
		}
	default:
		c.log.Warn("ignoring a frame the server should not send", "type", f.Type)
	}
}

func (c *Client) noteAck(s *session, a *binding.Ack) {
	c.seqMu.Lock()
	sent := c.lastSent
	c.seqMu.Unlock()
	if a.Seq > sent {
		c.log.Warn("ignoring an ack for a heartbeat never sent", "seq", a.Seq, "lastSent", sent)
		return
	}
	for {
		old := c.lastAcked.Load()
		if a.Seq <= old || c.lastAcked.CompareAndSwap(old, a.Seq) {
			break
		}
	}
	if a.Phase != "" {
		p := a.Phase
		c.phase.Store(&p)
	}
	if at, ok := s.takeSent(a.Seq); ok {
		sample := time.Since(at)
		if old := time.Duration(c.rtt.Load()); old > 0 {
			sample = old*7/8 + sample/8 // as TCP's SRTT
		}
		c.rtt.Store(int64(sample))
	}
}

// ---- commands and progress ----

func (c *Client) commandLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-c.cmds:
			ack := binding.CommandAck{ID: r.cmd.ID}
			if err := c.execute(ctx, r.cmd); err != nil {
				ack.Error = err.Error()
				c.log.Warn("command failed", "id", r.cmd.ID, "command", r.cmd.Name, "error", err)
			} else {
				ack.OK = true
				c.log.Info("command done", "id", r.cmd.ID, "command", r.cmd.Name)
			}
			c.sendAck(ctx, r.s, ack)
		}
	}
}

func (c *Client) execute(ctx context.Context, cmd binding.Command) (err error) {
	if c.cfg.OnCommand == nil {
		return errors.New("this sidecar executes no commands")
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("command handler panicked: %v", r)
		}
	}()
	return c.cfg.OnCommand(ctx, cmd)
}

// sendAck answers on the session the command came from. If that session has
// ended the ack is lost; the server has to push the command again.
func (c *Client) sendAck(ctx context.Context, s *session, ack binding.CommandAck) {
	ack.Error = truncate(ack.Error, maxAckError)
	if err := s.send(ctx, binding.Frame{Type: binding.FrameCommandAck, CommandAck: &ack}); err != nil {
		c.log.Warn("could not acknowledge a command", "id", ack.ID, "error", err)
	}
}

func (c *Client) sampleLoop(ctx context.Context) {
	for {
		smp := &progressSample{}
		if c.cfg.Progress != nil {
			smp.progress = c.cfg.Progress()
		}
		if c.cfg.UploadedBytes != nil {
			smp.uploaded = c.cfg.UploadedBytes()
		}
		if c.cfg.ArtifactError != nil {
			smp.artifactError = truncateUTF8(c.cfg.ArtifactError(), binding.MaxArtifactErrorLength)
		}
		c.sample.Store(smp)
		if credentials.Sleep(ctx, c.HeartbeatInterval()) != nil {
			return
		}
	}
}

// ---- finishing ----

// Finish tells the server the pod is terminating (FrameFinishing with
// reason). It uses the open session when there is one; otherwise it opens a
// short-lived session of its own (registering first if this process never
// registered), sends the frame and closes it with 1000. That session
// replaces any the server still holds for this worker, so call Finish when
// shutting down, right before cancelling Run.
func (c *Client) Finish(ctx context.Context, reason string) error {
	f := binding.Frame{Type: binding.FrameFinishing, Finishing: &binding.Finishing{Reason: reason}}
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
