package binding

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/sidecar/session"
	"github.com/tether-dev/tether/test/framework/testobj"
)

// rawPeer speaks the protocol by hand, to send what a correct client never would.
type rawPeer struct {
	t     *testing.T
	j     *job
	cfg   session.Config
	token string
	tls   *tls.Config
}

func newRawPeer(t *testing.T, j *job) *rawPeer {
	ca, err := os.ReadFile(j.caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	token, err := os.ReadFile(j.tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	return &rawPeer{t: t, j: j, cfg: j.clientConfig(), token: string(token), tls: &tls.Config{RootCAs: pool}}
}

func (p *rawPeer) headers() http.Header {
	h := http.Header{}
	h.Set(binding.HeaderAuthorization, "Bearer "+p.token)
	h.Set(names.HeaderProtocolVersion, binding.ProtocolVersion)
	h.Set(names.HeaderJobID, p.cfg.JobID)
	h.Set(names.HeaderWorkerID, p.cfg.WorkerID)
	h.Set(names.HeaderPodNamespace, p.cfg.Pod.Namespace)
	h.Set(names.HeaderPodName, p.cfg.Pod.Name)
	h.Set(names.HeaderPodUID, p.cfg.Pod.UID)
	h.Set(names.HeaderPodToken, p.j.podToken(p.t))
	return h
}

func (p *rawPeer) register(h http.Header, body []byte) (int, binding.ErrorResponse) {
	req, _ := http.NewRequest(http.MethodPost, p.cfg.ServerURL+binding.PathRegister, bytes.NewReader(body))
	req.Header = h
	resp, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: p.tls}, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	var e binding.ErrorResponse
	raw, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(raw, &e)
	return resp.StatusCode, e
}

func (p *rawPeer) registerBody() []byte {
	b, _ := json.Marshal(binding.RegisterRequest{JobID: p.cfg.JobID, WorkerID: p.cfg.WorkerID, Pod: p.cfg.Pod})
	return b
}

func (p *rawPeer) dial() *websocket.Conn {
	d := websocket.Dialer{TLSClientConfig: p.tls, HandshakeTimeout: 10 * time.Second}
	conn, resp, err := d.Dial(strings.Replace(p.cfg.ServerURL, "https://", "wss://", 1)+binding.PathSession, p.headers())
	if err != nil {
		p.t.Fatalf("dial: %v (%v)", err, resp)
	}
	return conn
}

// redial opens the worker's session again right after the test closed its
// previous one: until the server has read that close, the old session still
// holds the worker and a new open is refused as session_active (409), so
// such a refusal is retried for up to 10 s; anything else fails at once.
func (p *rawPeer) redial() *websocket.Conn {
	p.t.Helper()
	d := websocket.Dialer{TLSClientConfig: p.tls, HandshakeTimeout: 10 * time.Second}
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, resp, err := d.Dial(strings.Replace(p.cfg.ServerURL, "https://", "wss://", 1)+binding.PathSession, p.headers())
		if err == nil {
			return conn
		}
		if resp == nil || resp.StatusCode != http.StatusConflict || time.Now().After(deadline) {
			p.t.Fatalf("dial: %v (%v)", err, resp)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// closeCode sends raw and returns the close code the server answers with.
func closeCode(t *testing.T, conn *websocket.Conn, kind int, raw []byte) int {
	t.Helper()
	if err := conn.WriteMessage(kind, raw); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		_, _, err := conn.ReadMessage()
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			return ce.Code
		}
		if err != nil {
			t.Fatalf("read: %v, want a close frame", err)
		}
	}
}

func TestBadInputIsRefusedWithoutPhaseChange(t *testing.T) {
	j := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: "1s"})
	p := newRawPeer(t, j)

	// HTTP refusals at registration.
	h := p.headers()
	h.Set(names.HeaderProtocolVersion, "v0")
	if code, e := p.register(h, p.registerBody()); code != http.StatusBadRequest || e.Code != binding.ErrUnsupportedVersion {
		t.Errorf("wrong protocol version: %d %+v", code, e)
	}
	h = p.headers()
	h.Set(binding.HeaderAuthorization, "Bearer not-a-token")
	if code, e := p.register(h, p.registerBody()); code != http.StatusUnauthorized || e.Code != binding.ErrUnauthorized {
		t.Errorf("malformed token: %d %+v", code, e)
	}
	if code, e := p.register(p.headers(), []byte(`{"jobID":`)); code != http.StatusBadRequest || e.Code != binding.ErrBadRequest {
		t.Errorf("malformed body: %d %+v", code, e)
	}
	if code, e := p.register(p.headers(), bytes.Repeat([]byte("x"), 1<<20)); code != http.StatusBadRequest {
		t.Errorf("oversized body: %d %+v", code, e)
	}
	if ph := j.binding(t).Status.Phase; ph != tetherv1.PhasePending {
		t.Fatalf("phase %s after refused registrations, want Pending", ph)
	}

	if code, e := p.register(p.headers(), p.registerBody()); code != http.StatusOK {
		t.Fatalf("valid registration: %d %+v", code, e)
	}
	j.waitPhase(t, tetherv1.PhaseRegistered, "")

	for name, tc := range map[string]struct {
		kind int
		raw  []byte
		want int
	}{
		"malformed":      {websocket.TextMessage, []byte(`{"type":`), binding.CloseProtocolError},
		"unknown type":   {websocket.TextMessage, []byte(`{"type":"teleport","teleport":{}}`), binding.CloseProtocolError},
		"server-only":    {websocket.TextMessage, []byte(`{"type":"ack","ack":{"seq":1}}`), binding.CloseProtocolError},
		"zero seq":       {websocket.TextMessage, []byte(`{"type":"heartbeat","heartbeat":{"seq":0}}`), binding.CloseProtocolError},
		"oversized":      {websocket.TextMessage, bytes.Repeat([]byte("x"), binding.MaxFrameSize+1), websocket.CloseMessageTooBig},
		"binary garbage": {websocket.BinaryMessage, []byte{0xff, 0x00, 0x13}, binding.CloseProtocolError},
	} {
		conn := p.redial()
		if got := closeCode(t, conn, tc.kind, tc.raw); got != tc.want {
			t.Errorf("%s: close %d, want %d", name, got, tc.want)
		}
		conn.Close()
	}
	// Out of order within a session.
	conn := p.redial()
	for _, seq := range []string{"5", "6"} {
		if err := conn.WriteMessage(websocket.TextMessage, []byte(`{"type":"heartbeat","heartbeat":{"seq":`+seq+`}}`)); err != nil {
			t.Fatal(err)
		}
	}
	if got := closeCode(t, conn, websocket.TextMessage, []byte(`{"type":"heartbeat","heartbeat":{"seq":4}}`)); got != binding.CloseProtocolError {
		t.Errorf("out-of-order heartbeat: close %d, want %d", got, binding.CloseProtocolError)
	}
	conn.Close()
	// The valid heartbeats moved it to Running; none of the bad frames moved it further or back.
	if wb := j.waitPhase(t, tetherv1.PhaseRunning, ""); wb.Status.Phase != tetherv1.PhaseRunning {
		t.Fatal(wb.Status.Phase)
	}
}

func TestRevokedAndFinishedBindingsAreRefused(t *testing.T) {
	ctx := context.Background()
	j := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: "1s"})
	_, _, done := runningClient(t, j.clientConfig())
	j.waitPhase(t, tetherv1.PhaseRunning, "")
	// Deleting the TrainJob garbage-collects its binding; this API server runs
	// no garbage collector, so delete the binding as the collector would.
	tj := testobj.MakeTrainJob(j.name, j.ns).Obj()
	if err := env.Client.Delete(ctx, tj); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, j.binding(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		var pe *session.PermanentError
		if !errors.As(err, &pe) || (pe.CloseCode != binding.CloseRevoked && pe.StatusCode != http.StatusUnauthorized) {
			t.Errorf("client ended with %v, want close %d or 401", err, binding.CloseRevoked)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("session of a deleted binding still open")
	}
	p := newRawPeer(t, j)
	if code, _ := p.register(p.headers(), p.registerBody()); code != http.StatusUnauthorized {
		t.Errorf("register with a revoked token: %d, want 401", code)
	}

	// A finished binding: 410.
	f := newJob(t, nil)
	pf := newRawPeer(t, f)
	if code, _ := pf.register(pf.headers(), pf.registerBody()); code != http.StatusOK {
		t.Fatal(code)
	}
	finishTrainer(t, f, 2)
	setTrainJobCondition(t, f, "Failed", "jobset failed: BackoffLimitExceeded")
	f.waitPhase(t, tetherv1.PhaseFailed, tetherv1.ReasonTrainerFailed)
	if code, e := pf.register(pf.headers(), pf.registerBody()); code != http.StatusGone || e.Code != binding.ErrBindingFinished {
		t.Errorf("register for a finished job: %d %+v, want 410 BindingFinished", code, e)
	}
}

// TestConnectionCutWithoutClose severs the TCP connections under a live
// session (no close frame either way): the client reconnects and its
// sequence numbers continue.
func TestConnectionCutWithoutClose(t *testing.T) {
	j := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: "1s"})
	proxy := newCutProxy(t, strings.TrimPrefix(env.BindingURL, "https://"))
	cfg := j.clientConfig()
	cfg.ServerURL = "https://" + proxy.addr
	c, _, _ := runningClient(t, cfg)
	j.waitPhase(t, tetherv1.PhaseRunning, "")
	eventually(t, 10*time.Second, func() error {
		if c.LastAckedSeq() < 2 {
			return errors.New("waiting for acks")
		}
		return nil
	})
	seq := c.LastAckedSeq()
	proxy.cut()
	eventually(t, 20*time.Second, func() error {
		if c.Reconnects() < 1 || c.LastAckedSeq() <= seq+1 {
			return errors.New("no reconnect with new acks yet")
		}
		return nil
	})
	if wb := j.binding(t); wb.Status.Phase != tetherv1.PhaseRunning || wb.Status.Attempt != 1 {
		t.Errorf("after the cut: %s attempt %d", wb.Status.Phase, wb.Status.Attempt)
	}
}

// cutProxy forwards TCP on loopback and can drop every connection at once.
type cutProxy struct {
	addr  string
	mu    sync.Mutex
	conns []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{addr: ln.Addr().String()}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
	return p
}

// cut resets every proxied connection (SO_LINGER 0: an RST, no FIN).
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		c.Close()
	}
	p.conns = nil
}
