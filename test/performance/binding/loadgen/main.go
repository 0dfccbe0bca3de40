package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/trace"
	"slices"
	"strings"
	"time"

	"github.com/tether-dev/tether/pkg/sidecar/retry"
	"github.com/tether-dev/tether/test/framework/benchutil"
	bench "github.com/tether-dev/tether/test/performance/binding/loadproto"
)

func summarize(d []time.Duration) bench.Percentiles {
	slices.Sort(d)
	p := func(q float64) float64 {
		if len(d) == 0 {
			return 0
		}
		k := int(math.Ceil(q*float64(len(d)))) - 1
		return float64(d[max(0, min(k, len(d)-1))]) / float64(time.Millisecond)
	}
	return bench.Percentiles{N: len(d), P50: p(0.5), P90: p(0.9), P99: p(0.99), P999: p(0.999), Max: p(1)}
}

func emit(name string, v any) {
	raw, _ := json.Marshal(v)
	fmt.Fprintf(os.Stdout, "%s%s %s\n", bench.EventPrefix, name, raw)
}

func genLogf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s loadgen: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func main() {
	config := flag.String("config", "", "the benchmark's configuration of the run (JSON, bench.LoadgenConfig)")
	flag.Parse()
	if *config == "" {
		fmt.Fprintln(os.Stderr, "loadgen: -config is required; BenchmarkBindingSessions (test/performance/binding) starts this command")
		os.Exit(2)
	}
	os.Exit(run(*config))
}

// run is the generator's main; it returns the exit code.
func run(path string) int {
	res := &bench.LoadgenResult{}
	fail := func(format string, args ...any) int {
		res.Fatal = fmt.Sprintf(format, args...)
		emit("fatal", res.Fatal)
		return 1
	}
	cfg, hold, err := readConfig(path)
	if err != nil {
		return fail("%v", err)
	}
	ctx, cancel := context.WithDeadline(context.Background(), cfg.Deadline)
	defer cancel()
	res.Nofile, res.NofileNote = bench.RaiseNofile()

	ids, err := readIdentities(cfg.Identities)
	if err != nil {
		return fail("%v", err)
	}
	res.Sessions = len(ids)
	tc, err := bench.TLSConfig(cfg.CAFile)
	if err != nil {
		return fail("%v", err)
	}
	awaitCtl := controlChannel(ctx)

	g := newGenerator(cfg, tc, ids)
	defer g.closeAll()

	// 1. Register every worker.
	g.register(ctx, res)
	emit("registered", map[string]any{"registered": res.Registered, "failed": res.RegisterFailed, "seconds": res.RegisterSeconds})
	if err := awaitCtl("go", 10*time.Minute); err != nil {
		return fail("%v", err)
	}

	// 2. Open the sessions; heartbeats start on the schedule at once.
	g.startSenders(ctx)
	g.dial(ctx, res)
	emit("established", map[string]any{"established": res.Established, "failed": res.DialFailed, "seconds": res.EstablishSeconds})
	if res.Established == 0 {
		return fail("no session established: %v", res.DialErrors)
	}

	// 3. Settle, then the measured phase.
	if err := g.settleAndHold(ctx, cfg.Trace, hold, res); err != nil {
		return fail("%v", err)
	}

	// 4. Keep the sessions (and heartbeats) up while the benchmark measures.
	if err := awaitCtl("done", 10*time.Minute); err != nil {
		return fail("%v", err)
	}
	g.stopSenders()
	g.finish(res)
	g.closeAll()

	out, _ := json.MarshalIndent(res, "", "  ")
	if err := os.WriteFile(cfg.Result, out, 0o600); err != nil {
		genLogf("writing %s: %v", cfg.Result, err)
	}
	emit("result", res)
	return 0
}

// readConfig reads the benchmark's configuration of the run and its
// measured phase's length.
func readConfig(path string) (bench.LoadgenConfig, time.Duration, error) {
	var cfg bench.LoadgenConfig
	raw, err := os.ReadFile(path)
	if err != nil {
		return cfg, 0, err
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return cfg, 0, fmt.Errorf("%s: %w", path, err)
	}
	hold, err := time.ParseDuration(cfg.Hold)
	if err != nil {
		return cfg, 0, fmt.Errorf("hold: %w", err)
	}
	return cfg, hold, nil
}

// controlChannel reads the benchmark's commands from stdin (EOF: it is
// gone) and returns the function that waits for the next one, which must
// be want.
func controlChannel(ctx context.Context) func(want string, timeout time.Duration) error {
	ctl := make(chan string)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			ctl <- strings.TrimSpace(sc.Text())
		}
		close(ctl)
	}()
	return func(want string, timeout time.Duration) error {
		select {
		case msg, ok := <-ctl:
			if !ok {
				return errors.New("the benchmark closed stdin")
			}
			if msg != want {
				return fmt.Errorf("got %q from the benchmark, want %q", msg, want)
			}
			return nil
		case <-time.After(timeout):
			return fmt.Errorf("no %q from the benchmark within %s", want, timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// settleAndHold warms up until every session has sent its first heartbeat
// (which writes Registered -> Running) and an ack says that write was made
// (a server that queues its writes acks before it writes), at most
// bench.MaxSettle more; then holds for the measured phase, with an
// execution trace of it in tracePath if not empty. The measured phase is
// the steady state of sessions that only heartbeat, not the ramp's
// transitions.
func (g *generator) settleAndHold(ctx context.Context, tracePath string, hold time.Duration, res *bench.LoadgenResult) error {
	holdStart := time.Unix(0, g.lastOpen.Load()).Add(g.interval + time.Second)
	if err := retry.Sleep(ctx, time.Until(holdStart)); err != nil {
		return err
	}
	settleStart := time.Now()
	for {
		open, running := g.runningSessions()
		if running >= open || time.Since(settleStart) > bench.MaxSettle {
			res.SettleSeconds, res.NotRunningAtStart = time.Since(settleStart).Seconds(), open-running
			genLogf("%d of %d open sessions acked Running after %.1fs more", running, open, res.SettleSeconds)
			break
		}
		if err := retry.Sleep(ctx, time.Second); err != nil {
			return err
		}
	}
	holdStart = time.Now()
	g.holdStart.Store(holdStart.UnixNano())
	cpu0 := benchutil.ProcessCPU()
	openAtStart := g.openSessions()
	stopTrace := func() {}
	if tracePath != "" {
		if f, err := os.Create(tracePath); err != nil {
			genLogf("trace: %v", err)
		} else if err := trace.Start(f); err != nil {
			genLogf("trace: %v", err)
			_ = f.Close()
		} else {
			stopTrace = func() { trace.Stop(); _ = f.Close() }
		}
	}
	emit("hold-start", map[string]any{"open": openAtStart})
	genLogf("measured phase started with %d open sessions", openAtStart)
	if err := retry.Sleep(ctx, hold); err != nil {
		return err
	}
	stopTrace()
	holdEnd := time.Now()
	g.holdEnd.Store(holdEnd.UnixNano())
	res.CPUSeconds = (benchutil.ProcessCPU() - cpu0).Seconds()
	res.HoldSeconds = holdEnd.Sub(holdStart).Seconds()
	res.CPUCores = res.CPUSeconds / res.HoldSeconds
	res.Held, res.ClosedDuringHold = g.held(holdStart, holdEnd)
	emit("hold-end", map[string]any{"held": res.Held})
	return nil
}

func readIdentities(path string) ([]bench.Identity, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ids []bench.Identity
	dec := json.NewDecoder(bufio.NewReader(f))
	for {
		var id bench.Identity
		if err := dec.Decode(&id); errors.Is(err, io.EOF) {
			return ids, nil
		} else if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
}
