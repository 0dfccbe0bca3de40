package binding

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/bindingserver"
)

// rawSession opens a session as the sidecar's pod with the job's token, as
// anyone who can read the token Secret can, and sends nothing on it.
func rawSession(t *testing.T, j *job) (*websocket.Conn, error) {
	t.Helper()
	e := j.sidecarEnv()
	token, err := os.ReadFile(j.tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(j.caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	u, err := url.Parse(e[names.EnvServerURL])
	if err != nil {
		t.Fatal(err)
	}
	u.Scheme, u.Path = "wss", strings.TrimSuffix(u.Path, "/")+binding.PathSession
	h := http.Header{}
	h.Set(binding.HeaderAuthorization, binding.Token(strings.TrimSpace(string(token))).BearerHeader())
	h.Set(names.HeaderProtocolVersion, binding.ProtocolVersion)
	h.Set(names.HeaderJobID, e[names.EnvJobID])
	h.Set(names.HeaderWorkerID, e[names.EnvWorkerID])
	h.Set(names.HeaderPodNamespace, e[names.EnvPodNamespace])
	h.Set(names.HeaderPodName, e[names.EnvPodName])
	h.Set(names.HeaderPodUID, e[names.EnvPodUID])
	h.Set(names.HeaderPodToken, j.podToken(t))
	d := websocket.Dialer{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}, HandshakeTimeout: 5 * time.Second}
	conn, resp, err := d.DialContext(context.Background(), u.String(), h)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err == nil {
		t.Cleanup(func() { conn.Close() })
	}
	return conn, err
}

// TestSidecarTakesItsSessionBack: a session opened with the job's token while
// the sidecar was away (restarting) holds the worker and sends nothing. The
// sidecar's session replaces it once it has been silent for 2 heartbeat
// intervals (the newcomer is refused before), and the replacement is a
// Warning Event and a metric, not silent.
func TestSidecarTakesItsSessionBack(t *testing.T) {
	j := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: "2s"})
	_, stop, done := runningClient(t, j.clientConfig())
	j.waitPhase(t, tetherv1.PhaseRunning, "")
	stop()
	<-done
	const replaced = "tether_binding_sessions_replaced_total"
	before := counter(t, replaced)
	var intruder *websocket.Conn
	eventually(t, 10*time.Second, func() error {
		var err error
		intruder, err = rawSession(t, j)
		return err
	})
	closed := make(chan int, 1)
	go func() {
		for {
			if _, _, err := intruder.ReadMessage(); err != nil {
				var ce *websocket.CloseError
				if errors.As(err, &ce) {
					closed <- ce.Code
				} else {
					closed <- 0
				}
				return
			}
		}
	}()
	sidecar, _, realDone := runningClient(t, j.clientConfig())
	select {
	case code := <-closed:
		if code != binding.CloseReplaced {
			t.Logf("refusals: %q", metrics(t, "tether_binding_refusals_total"))
			t.Fatalf("the silent session ended with %d, want %d (replaced by the sidecar's)", code, binding.CloseReplaced)
		}
	case err := <-realDone:
		t.Fatalf("the sidecar stopped: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the sidecar did not take its session back")
	}
	seq := sidecar.LastAckedSeq()
	eventually(t, 10*time.Second, func() error {
		if sidecar.LastAckedSeq() <= seq {
			return fmt.Errorf("no heartbeat acknowledged since the takeover (seq %d)", seq)
		}
		return nil
	})
	if got := counter(t, replaced); got <= before {
		t.Errorf("%s = %v, want more than %v", replaced, got, before)
	}
	waitForEvent(t, j, bindingserver.ReasonSessionReplaced)
}

// TestFinishCarriesTheTrainersLastLine: the trainer writes its last progress
// line and exits; the sidecar finishes and stops before a heartbeat carries
// it. The binding shows that line, not the last heartbeat's (a 12-step job
// once showed step 10).
func TestFinishCarriesTheTrainersLastLine(t *testing.T) {
	j := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: "1s"})
	writeProgress := func(step int) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(j.artifactDir, binding.ProgressFile), []byte(fmt.Sprintf(`{"step":%d}`+"\n", step)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	step := func() int64 {
		if p := j.binding(t).Status.Progress; p != nil && p.Step != nil {
			return *p.Step
		}
		return -1
	}
	writeProgress(10)
	c, stop, done := runningClient(t, j.clientConfig())
	eventually(t, 15*time.Second, func() error {
		if s := step(); s != 10 {
			return fmt.Errorf("progress step %d, want 10", s)
		}
		return nil
	})
	writeProgress(12)
	finishAndStop(t, c, stop, done)
	eventually(t, 10*time.Second, func() error {
		if s := step(); s != 12 {
			return fmt.Errorf("progress step %d after the pod finished, want 12 (the trainer's last line)", s)
		}
		return nil
	})
}
