package admission_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/tether-dev/tether/pkg/mutate"
	"github.com/tether-dev/tether/test/framework/benchutil"
)

// The load generator runs in a child process (this test binary again, see
// TestMain), so that the benchmark process's CPU time (getrusage RUSAGE_SELF)
// is the servers' alone: the webhook servers, the TrainJob informer and the
// Events broadcaster live in the benchmark process, kube-apiserver and etcd in
// their own, and the client (TLS, HTTP/2, response checks) in the child.
const (
	loadgenEnv      = "TETHER_BENCH_LOADGEN" // set in the child: run the load generator, not the tests
	loadgenBodyEnv  = "TETHER_BENCH_LOADGEN_BODY"
	loadgenCertEnv  = "TETHER_BENCH_LOADGEN_CERT"
	loadgenWorkers  = "TETHER_BENCH_LOADGEN_WORKERS"
	loadgenProtoEnv = "TETHER_BENCH_LOADGEN_PROTO"
	// maxResultLine bounds one result line from the child: three latency
	// arrays of int64 nanoseconds in JSON for the longest slice at the
	// highest rate a run allows (loadConfig caps both).
	maxResultLine = 64 << 20
)

func TestMain(m *testing.M) {
	if os.Getenv(loadgenEnv) != "" {
		if err := runLoadGenerator(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "load generator:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// sliceCommand asks the child for one slice of open-loop load on one path.
type sliceCommand struct {
	Name      string        `json:"name"`
	URL       string        `json:"url"`
	WantPatch bool          `json:"wantPatch"`
	Rate      int           `json:"rate"`
	Duration  time.Duration `json:"duration"`
}

// sliceResult is what the child measured in one slice.
type sliceResult struct {
	Latency      []time.Duration `json:"latency"` // the reported latency: see BenchmarkPodAdmission
	FromDue      []time.Duration `json:"fromDue"` // due time -> full response read, always
	Lag          []time.Duration `json:"lag"`     // due time -> send started (client-side delay)
	Elapsed      time.Duration   `json:"elapsed"`
	ClientCPU    time.Duration   `json:"clientCPU"` // the child's CPU time in the slice
	Failures     int64           `json:"failures"`
	FirstFailure string          `json:"firstFailure,omitempty"`
}

// loadGenerator is the parent's handle on the child process.
type loadGenerator struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

// startLoadGenerator starts the child with the request body, the servers'
// certificate and the client settings, and stops it (closing its stdin, then
// waiting for it by PID) at cleanup.
func startLoadGenerator(b *testing.B, body, certPEM []byte, cfg benchConfig) *loadGenerator {
	b.Helper()
	dir := b.TempDir()
	bodyPath, certPath := dir+"/review.json", dir+"/ca.crt"
	for p, data := range map[string][]byte{bodyPath: body, certPath: certPEM} {
		if err := os.WriteFile(p, data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), loadgenEnv+"=1", loadgenBodyEnv+"="+bodyPath, loadgenCertEnv+"="+certPath,
		loadgenWorkers+"="+strconv.Itoa(cfg.workers), loadgenProtoEnv+"="+protoName(cfg))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal("starting the load generator:", err)
	}
	b.Cleanup(func() {
		_ = in.Close() // the child exits at EOF
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				b.Error("load generator:", err)
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			b.Error("load generator did not exit; killed it")
		}
	})
	return &loadGenerator{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<20)}
}

// run has the child send one slice and returns its result and the CPU time
// this process (the servers) used meanwhile. The parent does nothing else in
// the window but wait; the result is decoded after the second reading.
func (g *loadGenerator) run(cmd sliceCommand) (sliceResult, time.Duration, error) {
	line, err := json.Marshal(cmd)
	if err != nil {
		return sliceResult{}, 0, err
	}
	cpu0 := benchutil.ProcessCPU()
	if _, err := g.in.Write(append(line, '\n')); err != nil {
		return sliceResult{}, 0, fmt.Errorf("load generator: %w", err)
	}
	raw, err := readLine(g.out)
	cpu := benchutil.ProcessCPU() - cpu0
	if err != nil {
		return sliceResult{}, 0, fmt.Errorf("load generator: %w", err)
	}
	var res sliceResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return sliceResult{}, 0, fmt.Errorf("load generator result: %w", err)
	}
	return res, cpu, nil
}

// readLine reads one newline-terminated line of at most maxResultLine bytes.
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		switch {
		case len(line) > maxResultLine:
			return nil, fmt.Errorf("result line longer than %d bytes", maxResultLine)
		case err == nil:
			return line, nil
		case !errors.Is(err, bufio.ErrBufferFull):
			return nil, err
		}
	}
}

// runLoadGenerator is the child: it reads slice commands, one JSON line each,
// from in until EOF and writes one result line per command to out.
func runLoadGenerator(in io.Reader, out io.Writer) error {
	body, err := os.ReadFile(os.Getenv(loadgenBodyEnv))
	if err != nil {
		return err
	}
	certPEM, err := os.ReadFile(os.Getenv(loadgenCertEnv))
	if err != nil {
		return err
	}
	workers, err := strconv.Atoi(os.Getenv(loadgenWorkers))
	if err != nil || workers <= 0 {
		return fmt.Errorf("%s=%q: want a positive integer", loadgenWorkers, os.Getenv(loadgenWorkers))
	}
	c := newClient(certPEM, os.Getenv(loadgenProtoEnv) == protoName(benchConfig{http1: true}), workers)
	sc := bufio.NewScanner(in)
	w := bufio.NewWriter(out)
	for sc.Scan() {
		var cmd sliceCommand
		if err := json.Unmarshal(sc.Bytes(), &cmd); err != nil {
			return fmt.Errorf("command %q: %w", sc.Bytes(), err)
		}
		if cmd.Rate <= 0 || cmd.Duration <= 0 {
			return fmt.Errorf("command %q: want a positive rate and duration", sc.Bytes())
		}
		p := &loadPath{name: cmd.Name, url: cmd.URL, wantPatch: cmd.WantPatch}
		res := p.runSlice(context.Background(), c, body, cmd.Rate, cmd.Duration, workers)
		if err := json.NewEncoder(w).Encode(res); err != nil {
			return err
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	return sc.Err()
}

// newClient is an HTTPS client trusting certPEM, HTTP/2 only unless http1.
func newClient(certPEM []byte, http1 bool, workers int) *http.Client {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(certPEM)
	var protos http.Protocols
	if http1 {
		protos.SetHTTP1(true)
	} else {
		protos.SetHTTP2(true) // HTTP/2 only: fail rather than fall back
	}
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		Protocols:           &protos,
		MaxIdleConns:        2 * workers,
		MaxIdleConnsPerHost: workers,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
	return &http.Client{Transport: tr, Timeout: requestTimeout}
}

// loadPath is one webhook path as the load generator sends to it.
type loadPath struct {
	name      string
	url       string
	wantPatch bool

	failures     atomic.Int64
	firstFailure atomic.Pointer[string]
}

var (
	allowedTrue = []byte(`"allowed":true`)
	patchField  = []byte(`"patch":"`)
)

// check validates a response. The cheap form looks for the fields in the
// bytes (both servers encode with encoding/json: no spaces, patch omitted
// when empty); full decodes the review.
func (p *loadPath) check(status int, out, reqBody []byte, full bool) error {
	if status != http.StatusOK {
		return fmt.Errorf("%s: HTTP %d: %.200s", p.name, status, out)
	}
	if !full {
		switch {
		case !bytes.Contains(out, allowedTrue):
			return fmt.Errorf("%s: not allowed: %.300s", p.name, out)
		case p.wantPatch && !bytes.Contains(out, patchField):
			return fmt.Errorf("%s: no patch: %.300s", p.name, out)
		}
		return nil
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(out, &review); err != nil {
		return fmt.Errorf("%s: undecodable response: %v: %.200s", p.name, err, out)
	}
	r := review.Response
	switch {
	case r == nil:
		return fmt.Errorf("%s: no response in %.200s", p.name, out)
	case review.APIVersion != "admission.k8s.io/v1" || review.Kind != "AdmissionReview":
		return fmt.Errorf("%s: response is a %s %s, not an admission.k8s.io/v1 AdmissionReview", p.name, review.APIVersion, review.Kind)
	case !bytes.Contains(reqBody, []byte(`"uid":"`+string(r.UID)+`"`)):
		return fmt.Errorf("%s: response uid %q is not the request's", p.name, r.UID)
	case !r.Allowed:
		return fmt.Errorf("%s: not allowed: %v", p.name, r.Result)
	case p.wantPatch && (len(r.Patch) == 0 || r.PatchType == nil || *r.PatchType != admissionv1.PatchTypeJSONPatch):
		return fmt.Errorf("%s: no JSON patch (allowed with reason %v)", p.name, r.Result)
	case p.wantPatch && !bytes.Contains(r.Patch, []byte(mutate.SidecarName)):
		return fmt.Errorf("%s: patch does not add %s: %.300s", p.name, mutate.SidecarName, r.Patch)
	case !p.wantPatch && len(r.Patch) != 0:
		return fmt.Errorf("%s: the floor changed the pod: %.300s", p.name, r.Patch)
	}
	return nil
}

func (p *loadPath) fail(err error) {
	p.failures.Add(1)
	msg := err.Error()
	p.firstFailure.CompareAndSwap(nil, &msg)
}

// runSlice sends rate*d requests on the open-loop schedule described on
// BenchmarkPodAdmission.
func (p *loadPath) runSlice(ctx context.Context, c *http.Client, body []byte, rate int, d time.Duration, workers int) sliceResult {
	n := int64(rate) * int64(d) / int64(time.Second)
	res := sliceResult{Latency: make([]time.Duration, n), FromDue: make([]time.Duration, n), Lag: make([]time.Duration, n)}
	ctx, cancel := context.WithTimeout(ctx, d+requestTimeout)
	defer cancel()
	tmpl, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, nil)
	if err != nil {
		panic(err)
	}
	tmpl.Header.Set("Content-Type", "application/json")
	tmpl.ContentLength = int64(len(body))
	tmpl.GetBody = func() (io.ReadCloser, error) { return &bodyReader{b: body}, nil }

	var next atomic.Int64
	var wg sync.WaitGroup
	cpu0 := benchutil.ProcessCPU()
	start := time.Now()
	for range workers {
		wg.Go(func() {
			var buf bytes.Buffer
			for {
				i := next.Add(1) - 1
				if i >= n {
					return
				}
				due := start.Add(time.Duration(i * int64(time.Second) / int64(rate)))
				early := false
				if wait := time.Until(due); wait > 0 {
					time.Sleep(wait)
					early = true
				}
				sent := time.Now()
				from := due // claimed late: count the queueing
				if early {
					from = sent // slept: exclude the timer's overshoot
				}
				// A shallow copy of the template shares its header and URL,
				// which the transport only reads: two small allocations a
				// request (the copy and the body reader over the shared bytes).
				req := new(http.Request)
				*req = *tmpl
				req.Body = &bodyReader{b: body}
				status, err := do(c, req, &buf)
				done := time.Now()
				res.Latency[i], res.FromDue[i], res.Lag[i] = done.Sub(from), done.Sub(due), sent.Sub(due)
				if err == nil {
					err = p.check(status, buf.Bytes(), body, i%fullCheckEvery == 0)
				}
				if err != nil {
					p.fail(err)
				}
			}
		})
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.ClientCPU = benchutil.ProcessCPU() - cpu0
	res.Failures = p.failures.Load()
	if f := p.firstFailure.Load(); f != nil {
		res.FirstFailure = *f
	}
	return res
}

// do sends req and reads the whole response into buf.
func do(c *http.Client, req *http.Request, buf *bytes.Buffer) (int, error) {
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	buf.Reset()
	_, err = buf.ReadFrom(resp.Body)
	if cerr := resp.Body.Close(); err == nil {
		err = cerr
	}
	return resp.StatusCode, err
}

// bodyReader reads a shared request body without copying it.
type bodyReader struct {
	b   []byte
	off int
}

func (r *bodyReader) Read(p []byte) (int, error) {
	if r.off >= len(r.b) {
		return 0, io.EOF
	}
	n := copy(p, r.b[r.off:])
	r.off += n
	return n, nil
}

func (*bodyReader) Close() error { return nil }
