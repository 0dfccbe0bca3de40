package binding

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"k8s.io/client-go/kubernetes"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/bindingserver"
	"github.com/tether-dev/tether/pkg/workerauth"
)

// apiRequests is the API server's own count of requests for WorkerBindings
// (apiserver_request_total, every verb and subresource): what the binding
// server and the controller cost it.
func apiRequests(t *testing.T) float64 {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, l := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(l, "apiserver_request_total{") && strings.Contains(l, `resource="workerbindings"`) {
			v, _ := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
			n += v
		}
	}
	return n
}

func heartbeatFrame(seq uint64) []byte {
	b, _ := json.Marshal(binding.Frame{Type: binding.FrameHeartbeat, Heartbeat: &binding.Heartbeat{Seq: seq, SentAt: time.Now()}})
	return b
}

// bystander is a well-behaved worker on a raw session: a heartbeat every
// quarter interval (within its budget), each ack's latency recorded.
type bystander struct {
	conn      *websocket.Conn
	mu        sync.Mutex
	sent      map[uint64]time.Time
	latencies []time.Duration
	stop      chan struct{}
	done      chan error
}

func startBystander(t *testing.T, j *job) *bystander {
	p := newRawPeer(t, j)
	if code, e := p.register(p.headers(), p.registerBody()); code != http.StatusOK {
		t.Fatalf("bystander register: %d %+v", code, e)
	}
	b := &bystander{conn: p.dial(), sent: map[uint64]time.Time{}, stop: make(chan struct{}), done: make(chan error, 2)}
	t.Cleanup(func() { b.conn.Close() })
	go func() {
		for {
			_, data, err := b.conn.ReadMessage()
			if err != nil {
				b.done <- err
				return
			}
			f, err := binding.DecodeFrame(data)
			if err != nil || f.Type != binding.FrameAck {
				continue
			}
			b.mu.Lock()
			if at, ok := b.sent[f.Ack.Seq]; ok {
				b.latencies = append(b.latencies, time.Since(at))
				delete(b.sent, f.Ack.Seq)
			}
			b.mu.Unlock()
		}
	}()
	go func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for seq := uint64(1); ; seq++ {
			b.mu.Lock()
			b.sent[seq] = time.Now()
			b.mu.Unlock()
			if err := b.conn.WriteMessage(websocket.TextMessage, heartbeatFrame(seq)); err != nil {
				b.done <- err
				return
			}
			select {
			case <-b.stop:
				b.done <- nil
				return
			case <-tick.C:
			}
		}
	}()
	return b
}

// finish stops sending, waits for the last acks and returns the latencies
// and how many heartbeats were never acknowledged.
func (b *bystander) finish(t *testing.T) ([]time.Duration, int) {
	close(b.stop)
	select {
	case err := <-b.done:
		if err != nil {
			t.Fatalf("bystander session ended during the flood: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("bystander writer did not stop")
	}
	eventually(t, 10*time.Second, func() error {
		b.mu.Lock()
		defer b.mu.Unlock()
		if len(b.sent) > 0 {
			return fmt.Errorf("%d bystander heartbeats not acknowledged yet", len(b.sent))
		}
		return nil
	})
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.latencies), len(b.sent)
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// flood sends frames from next as fast as the connection takes them until
// the server closes it, and returns how many acks came back, the close
// code, and how long the flood lasted.
func flood(t *testing.T, conn *websocket.Conn, next func(i int) []byte) (acks int, code int, elapsed time.Duration) {
	t.Helper()
	start := time.Now()
	var acked atomic.Int64
	closed := make(chan int, 1)
	go func() {
		for {
			_, data, err := conn.ReadMessage()
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				closed <- ce.Code
				return
			}
			if err != nil {
				closed <- -1
				return
			}
			if f, err := binding.DecodeFrame(data); err == nil && f.Type == binding.FrameAck {
				acked.Add(1)
			}
		}
	}()
	go func() {
		for i := 0; ; i++ {
			if err := conn.WriteMessage(websocket.TextMessage, next(i)); err != nil {
				return
			}
		}
	}()
	select {
	case code = <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("the flooding session was not closed")
	}
	conn.Close()
	return int(acked.Load()), code, time.Since(start)
}

// TestFloodIsClosedAndBystanderServed floods one session with heartbeats,
// then with acks of commands it was never sent, while another job's worker
// heartbeats on the same server. The flooding session is closed with
// CloseRateLimited after its burst; the acks cause no API calls; the
// bystander's every heartbeat is acknowledged.
func TestFloodIsClosedAndBystanderServed(t *testing.T) {
	a := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: "1s"})
	b := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: "1s"})
	by := startBystander(t, b)
	b.waitPhase(t, tetherv1.PhaseRunning, "")

	p := newRawPeer(t, a)
	if code, e := p.register(p.headers(), p.registerBody()); code != http.StatusOK {
		t.Fatalf("register: %d %+v", code, e)
	}
	a.waitPhase(t, tetherv1.PhaseRegistered, "")
	refusedBefore := counter(t, `tether_binding_refusals_total{reason="frame_rate"}`)
	heartbeatsBefore := counter(t, "tether_binding_heartbeats_total")
	counted := time.Now()
	apiBefore := apiRequests(t)

	// 1. A heartbeat flood on one session.
	acks, code, elapsed := flood(t, p.dial(), func(i int) []byte { return heartbeatFrame(uint64(i + 1)) })
	apiHeartbeats := apiRequests(t) - apiBefore
	// Heartbeats the server took (the bystander's few included): the acks
	// still queued when the session closed are not sent.
	accepted := counter(t, "tether_binding_heartbeats_total") - heartbeatsBefore
	// The counter is every session's: the bystander's heartbeats count over
	// the whole time between the two reads, not only while the flood lasted
	// (a fresh-clone CI under load took 13 against a limit of 12 that
	// allowed the bystander none, the flood having lasted 11 ms).
	window := time.Since(counted)
	if code != binding.CloseRateLimited {
		t.Errorf("heartbeat flood closed with %d, want %d (CloseRateLimited)", code, binding.CloseRateLimited)
	}
	// The bucket refills at FramesPerInterval per second (interval 1 s)
	// while the flood lasts; the bystander sends 4 a second.
	flooded := bindingserver.FrameBurst + int(float64(bindingserver.FramesPerInterval)*elapsed.Seconds()) + 2
	if acks > flooded {
		t.Errorf("%d heartbeats acknowledged before the close in %s, want at most %d", acks, elapsed, flooded)
	}
	if limit := flooded + int(math.Ceil(4*window.Seconds())); int(accepted) > limit {
		t.Errorf("%v heartbeats taken by the server in the %s around the flood (%s), want at most %d", accepted, window, elapsed, limit)
	}
	if got := counter(t, `tether_binding_refusals_total{reason="frame_rate"}`); got < refusedBefore+1 {
		t.Errorf("frame_rate refusals %v, want at least %v", got, refusedBefore+1)
	}
	t.Logf("heartbeat flood: %v heartbeats taken by the server (%d acks sent) before close %d after %s; %v WorkerBinding API requests meanwhile (all sources)",
		accepted, acks, code, elapsed.Round(time.Millisecond), apiHeartbeats)

	// 2. The flooder reconnects and floods again for 5 s: session opens past
	// the token's burst are refused with 429, each session is closed after
	// its frame burst.
	heartbeatsBefore = counter(t, "tether_binding_heartbeats_total")
	apiBefore = apiRequests(t)
	var opened, refusedOpens int
	for start := time.Now(); time.Since(start) < 5*time.Second; {
		d := websocket.Dialer{TLSClientConfig: p.tls, HandshakeTimeout: 10 * time.Second}
		conn, resp, err := d.Dial(strings.Replace(p.cfg.ServerURL, "https://", "wss://", 1)+binding.PathSession, p.headers())
		if err != nil {
			if resp == nil || resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("re-dial: %v (%v)", err, resp)
			}
			refusedOpens++
			time.Sleep(10 * time.Millisecond)
			continue
		}
		opened++
		if _, code, _ := flood(t, conn, func(i int) []byte { return heartbeatFrame(uint64(i + 1)) }); code != binding.CloseRateLimited {
			t.Errorf("re-flood closed with %d, want %d", code, binding.CloseRateLimited)
		}
	}
	sustained := counter(t, "tether_binding_heartbeats_total") - heartbeatsBefore
	t.Logf("5 s of re-floods: %d sessions opened, %d opens refused with 429, %v heartbeats taken (bystander's ~20 included), %v WorkerBinding API requests (all sources)",
		opened, refusedOpens, sustained, apiRequests(t)-apiBefore)
	if opened > workerauth.ControlBurst+int(workerauth.ControlRate*6) || refusedOpens == 0 {
		t.Errorf("%d sessions opened and %d refused in 5 s: the per-token limit (burst %d, %d/s) did not hold", opened, refusedOpens, workerauth.ControlBurst, workerauth.ControlRate)
	}

	// 3. Acks of commands this session was never sent, below the frame
	// budget so the session stays open: each is dropped before any API call.
	// (A third job: the flooder's token has spent its session opens.)
	c := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: "1s"})
	pc := newRawPeer(t, c)
	if code, e := pc.register(pc.headers(), pc.registerBody()); code != http.StatusOK {
		t.Fatalf("register: %d %+v", code, e)
	}
	c.waitPhase(t, tetherv1.PhaseRegistered, "")
	const sessions, perSession = 10, bindingserver.FrameBurst
	ackDropsBefore := counter(t, `tether_binding_refusals_total{reason="unsolicited_ack"}`)
	apiBefore = apiRequests(t)
	for s := range sessions {
		conn := pc.redial()
		for i := range perSession {
			raw, _ := json.Marshal(binding.Frame{Type: binding.FrameCommandAck, CommandAck: &binding.CommandAck{ID: fmt.Sprintf("forged-%d-%d", s, i), OK: true}})
			if err := conn.WriteMessage(websocket.TextMessage, raw); err != nil {
				t.Fatal(err)
			}
		}
		eventually(t, 10*time.Second, func() error {
			if got := counter(t, `tether_binding_refusals_total{reason="unsolicited_ack"}`); got < ackDropsBefore+float64((s+1)*perSession) {
				return fmt.Errorf("%v forged acks dropped, want %d", got-ackDropsBefore, (s+1)*perSession)
			}
			return nil
		})
		conn.Close()
	}
	apiAcks := apiRequests(t) - apiBefore
	// Before, every ack was a live GET of the binding (100 here); what is
	// left is the other job's status writes and the session opens.
	if apiAcks >= sessions*perSession/4 {
		t.Errorf("%d forged acks caused %v WorkerBinding API requests, want far fewer than one per ack", sessions*perSession, apiAcks)
	}
	if c := c.binding(t).Status.LastCommand; c != nil {
		t.Errorf("a forged ack changed status.lastCommand: %+v", c)
	}
	t.Logf("ack flood: %d forged commandAcks dropped; %v WorkerBinding API requests meanwhile (all sources, both jobs)", sessions*perSession, apiAcks)

	lat, lost := by.finish(t)
	if lost != 0 || len(lat) == 0 {
		t.Errorf("bystander: %d heartbeats acknowledged, %d not", len(lat), lost)
	}
	if ph := b.binding(t).Status.Phase; ph != tetherv1.PhaseRunning {
		t.Errorf("bystander binding %s, want Running", ph)
	}
	t.Logf("bystander: %d heartbeats, every one acknowledged; ack latency p50 %s p99 %s max %s",
		len(lat), percentile(lat, .5).Round(time.Microsecond), percentile(lat, .99).Round(time.Microsecond), percentile(lat, 1).Round(time.Microsecond))
}

// TestRegisterFloodIsRateLimited registers one worker far faster than a
// sidecar ever does: past the token's burst the server answers 429
// RateLimited with Retry-After, and nothing else changes.
func TestRegisterFloodIsRateLimited(t *testing.T) {
	j := newJob(t, nil)
	p := newRawPeer(t, j)
	before := counter(t, `tether_binding_refusals_total{reason="rate_limited"}`)
	start := time.Now()
	ok, limited := 0, 0
	for range 3 * workerauth.ControlBurst {
		req, _ := http.NewRequest(http.MethodPost, p.cfg.ServerURL+binding.PathRegister, strings.NewReader(string(p.registerBody())))
		req.Header = p.headers()
		resp, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: p.tls}, Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e binding.ErrorResponse
		_ = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
			limited++
			if e.Code != binding.ErrRateLimited || resp.Header.Get("Retry-After") == "" {
				t.Errorf("429 with code %q Retry-After %q, want %s and a delay", e.Code, resp.Header.Get("Retry-After"), binding.ErrRateLimited)
			}
		default:
			t.Errorf("register: %d %+v", resp.StatusCode, e)
		}
	}
	elapsed := time.Since(start)
	if limit := workerauth.ControlBurst + int(workerauth.ControlRate*elapsed.Seconds()) + 1; ok > limit || limited == 0 {
		t.Errorf("%d registrations accepted and %d refused in %s; want at most %d accepted", ok, limited, elapsed, limit)
	}
	if got := counter(t, `tether_binding_refusals_total{reason="rate_limited"}`); got < before+float64(limited) {
		t.Errorf("rate_limited refusals %v, want %v", got-before, limited)
	}
	if wb := j.binding(t); wb.Status.Phase != tetherv1.PhaseRegistered || wb.Status.Attempt != 1 {
		t.Errorf("after the flood: %s attempt %d, want Registered attempt 1", wb.Status.Phase, wb.Status.Attempt)
	}
	t.Logf("register flood: %d accepted, %d refused with 429 in %s", ok, limited, elapsed.Round(time.Millisecond))
}
