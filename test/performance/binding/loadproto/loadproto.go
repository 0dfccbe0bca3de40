// Package loadproto is what the binding benchmark (test/performance/binding)
// and its load generator (./loadgen, a process of its own) share: the
// identities, the generator's configuration and result, the event lines on
// its stdout, and the client side of the binding server.
package loadproto

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/binding"
)

const (
	// WantNofile is the RLIMIT_NOFILE both processes ask for.
	WantNofile = 65536
	// EventPrefix marks the generator's stdout lines addressed to the
	// benchmark: "<prefix><name> <json>".
	EventPrefix = "@tether-loadgen "
	// MissedHeartbeats is the control plane's (production) setting: the
	// generator reads a session as dead after that many intervals.
	MissedHeartbeats = 3
	// MaxSettle bounds the generator's wait for every session's Running
	// transition before the measured phase.
	MaxSettle = 3 * time.Minute
)

// Identity is one worker: its token and the objects that make it valid.
type Identity struct {
	Token     string `json:"token"`
	Binding   string `json:"binding"`
	JobID     string `json:"jobID"`
	WorkerID  string `json:"workerID"`
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	UID       string `json:"uid"`
	// PodToken is the pod's projected ServiceAccount token, as the kubelet
	// would mount it (names.HeaderPodToken).
	PodToken string `json:"podToken"`
}

// HTTPSClient is a client of the binding server, trusting caFile, with up
// to conns connections.
func HTTPSClient(caFile string, conns int) (*http.Client, error) {
	tc, err := TLSConfig(caFile)
	if err != nil {
		return nil, err
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: tc, MaxIdleConns: conns, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns,
		IdleConnTimeout: time.Minute, DisableCompression: true,
	}}, nil
}

// TLSConfig trusts the CA in caFile.
func TLSConfig(caFile string) (*tls.Config, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no certificate", caFile)
	}
	return &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}, nil
}

// SessionHeader is what a sidecar sends with GET /v1/session.
func SessionHeader(id Identity) http.Header {
	h := http.Header{}
	h.Set(binding.HeaderAuthorization, "Bearer "+id.Token)
	h.Set(names.HeaderProtocolVersion, binding.ProtocolVersion)
	h.Set(names.HeaderJobID, id.JobID)
	h.Set(names.HeaderWorkerID, id.WorkerID)
	h.Set(names.HeaderPodName, id.Pod)
	h.Set(names.HeaderPodUID, id.UID)
	h.Set(names.HeaderPodToken, id.PodToken)
	return h
}

// LoadgenConfig is what the benchmark hands the generator, as a JSON file.
type LoadgenConfig struct {
	ServerURL  string    `json:"serverURL"`
	CAFile     string    `json:"caFile"`
	Identities string    `json:"identities"`
	Result     string    `json:"result"`
	Hold       string    `json:"hold"`
	Dialers    int       `json:"dialers"`
	DialRate   int       `json:"dialRate"`
	Registrars int       `json:"registrars"`
	Deadline   time.Time `json:"deadline"`
	// Trace is where the generator writes its execution trace of the
	// measured phase ("": none).
	Trace string `json:"trace,omitempty"`
}

// RaiseNofile raises RLIMIT_NOFILE to WantNofile, or as far as the hard
// limit allows without CAP_SYS_RESOURCE, and returns the soft limit.
func RaiseNofile() (uint64, string) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err.Error()
	}
	if lim.Cur >= WantNofile {
		return lim.Cur, "already high enough"
	}
	err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: WantNofile, Max: max(WantNofile, lim.Max)})
	if err == nil {
		return WantNofile, "raised"
	}
	note := fmt.Sprintf("raising to %d: %v; soft limit set to the hard limit", WantNofile, err)
	_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: lim.Max, Max: lim.Max})
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	return lim.Cur, note
}

// LoadgenResult is what the generator reports at the end.
type LoadgenResult struct {
	Sessions   int    `json:"sessions"`
	Nofile     uint64 `json:"nofile"`
	NofileNote string `json:"nofileNote"`

	Registered      int            `json:"registered"`
	RegisterFailed  int            `json:"registerFailed"`
	RegisterSeconds float64        `json:"registerSeconds"`
	RegisterErrors  map[string]int `json:"registerErrors"`

	Established      int            `json:"established"`
	DialFailed       int            `json:"dialFailed"`
	EstablishSeconds float64        `json:"establishSeconds"`
	DialErrors       map[string]int `json:"dialErrors"`

	HeartbeatInterval string  `json:"heartbeatInterval"`
	HoldSeconds       float64 `json:"holdSeconds"`
	// Held: sessions open from the start to the end of the measured phase.
	Held             int            `json:"held"`
	ClosedDuringHold int            `json:"closedDuringHold"`
	CloseCodes       map[string]int `json:"closeCodes"` // sessions the server or the network ended

	// Heartbeats sent in the measured phase, and what became of them.
	HeartbeatsSent int64 `json:"heartbeatsSent"`
	Acks           int64 `json:"acks"`
	// Unanswered: no ack by the time the benchmark finished measuring
	// (at least a few seconds after the phase); their latency enters the
	// percentiles as that lower bound. Late: acked after the next heartbeat
	// of the session was sent (more than one interval).
	Unanswered int64 `json:"unanswered"`
	Late       int64 `json:"late"`
	// Skipped: acks that never came although a later heartbeat's did.
	Skipped int64 `json:"skipped"`
	// StaleAcks: acks for no heartbeat awaiting one (a bug, if any).
	StaleAcks      int64 `json:"staleAcks"`
	NonRunningAcks int64 `json:"nonRunningAcks"`
	// SettleSeconds is how long after the warm-up interval the last
	// session's Running transition took; NotRunningAtStart counts those
	// still not acked Running when the hold started anyway.
	SettleSeconds     float64 `json:"settleSeconds"`
	NotRunningAtStart int     `json:"notRunningAtStart"`
	SendErrors        int64   `json:"sendErrors"`
	UnexpectedFrames  int64   `json:"unexpectedFrames"`

	Latency  Percentiles `json:"ackLatencyMs"`
	FirstAck Percentiles `json:"firstAckLatencyMs"` // sessions' first heartbeats, while opening
	SendLag  Percentiles `json:"sendLagMs"`

	CPUSeconds float64 `json:"cpuSeconds"`
	CPUCores   float64 `json:"cpuCores"`

	Fatal string `json:"fatal,omitempty"`
}

// Percentiles summarize latencies, in milliseconds.
type Percentiles struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}
