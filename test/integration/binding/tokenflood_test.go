package binding

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-dev/tether/api/names"
	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/pkg/workerauth"
)

// madeUpTokens is more than the binding server ever kept limiters for
// (maxTrackedTokens, 50,000, in pkg/workerauth/ratelimit.go): a flood
// this size filled the table, and every token it had not seen yet shared
// one bucket with the flood.
const madeUpTokens = 52_000

// TestTenantCannotStarveRegistrationsWithMadeUpTokens is what any pod that
// reaches the binding server can do: send registrations and artifact HEADs
// with well-formed tokens it made up, as fast as it can, from one address.
// While the flood goes on, a real job that has not spoken to the server yet
// registers and opens its session: neither is answered 429, and the
// flood's own registrations are refused with 429 for their address.
func TestTenantCannotStarveRegistrationsWithMadeUpTokens(t *testing.T) {
	victim := newJob(t, nil)
	p := newRawPeer(t, victim)

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var sent, registers, limited, other atomic.Int64
	reached := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	const workers = 8
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hc := &http.Client{Transport: &http.Transport{TLSClientConfig: p.tls, MaxIdleConnsPerHost: 1}, Timeout: 10 * time.Second}
			defer hc.CloseIdleConnections()
			for i := w; ctx.Err() == nil; i += workers {
				tok, err := binding.NewToken()
				if err != nil {
					t.Error(err)
					return
				}
				var req *http.Request
				if i%2 == 0 {
					req, _ = http.NewRequestWithContext(ctx, http.MethodPost, p.cfg.ServerURL+binding.PathRegister, strings.NewReader("{}"))
					req.Header.Set(binding.HeaderAuthorization, tok.BearerHeader())
					req.Header.Set(names.HeaderProtocolVersion, binding.ProtocolVersion)
				} else {
					req, _ = http.NewRequestWithContext(ctx, http.MethodHead, p.cfg.ServerURL+"/"+upload.Bucket+"/"+p.cfg.JobID+"/model.bin", nil)
					req.Header.Set(names.HeaderArtifactToken, string(tok))
				}
				resp, err := hc.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("flood request: %v", err)
					}
					return
				}
				resp.Body.Close()
				if i%2 == 0 {
					registers.Add(1)
				}
				switch resp.StatusCode {
				case http.StatusTooManyRequests:
					limited.Add(1)
				case http.StatusUnauthorized:
				default:
					other.Add(1)
				}
				if sent.Add(1) >= madeUpTokens {
					once.Do(func() { close(reached) })
				}
			}
		}()
	}
	select {
	case <-reached:
	case <-time.After(5 * time.Minute):
		t.Fatalf("only %d made-up tokens sent in 5 minutes", sent.Load())
	}
	t.Logf("%d requests with made-up tokens (%d registrations, the rest artifact HEADs) in %s (%d answered 429, %d neither 401 nor 429); the flood goes on",
		sent.Load(), registers.Load(), time.Since(start).Round(time.Millisecond), limited.Load(), other.Load())

	// The victim's first registration and session, during the flood.
	if code, e := p.register(p.headers(), p.registerBody()); code != http.StatusOK {
		t.Errorf("the real job's registration during the flood: %d %s %q, want 200", code, e.Code, e.Message)
	} else {
		conn := p.dial()
		conn.Close()
	}
	stop()
	wg.Wait()
	elapsed := time.Since(start)
	// Only the artifact HEADs' answer is 401 without a limit: an index
	// lookup, no bucket. The registrations spend one address's budget.
	if passed := registers.Load() - limited.Load(); passed > int64(workerauth.UnknownBurst+workerauth.UnknownRate*elapsed.Seconds()+1) {
		t.Errorf("%d of %d made-up-token registrations from one address were let through in %s, want at most %d/s after a burst of %d",
			passed, registers.Load(), elapsed, workerauth.UnknownRate, workerauth.UnknownBurst)
	}
	if other.Load() != 0 {
		t.Errorf("%d made-up-token requests were answered neither 401 nor 429", other.Load())
	}
}
