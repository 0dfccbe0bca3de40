package localcluster

import (
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"
)

// hangEnv makes this test binary a program whose shutdown hangs: it ignores
// SIGTERM and waits.
const hangEnv = "TETHER_TEST_PROCESS_HANG"

func init() {
	if os.Getenv(hangEnv) == "1" {
		signal.Ignore(syscall.SIGTERM)
		os.Stdout.WriteString("ready\n")
		time.Sleep(time.Minute)
		os.Exit(0)
	}
}

func TestStopDumpingWritesTheGoroutinesOfAHungShutdown(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p, err := startProcess(dir, "hang", exe, nil, []string{hangEnv + "=1"})
	if err != nil {
		t.Fatal(err)
	}
	waitLog(t, p.LogFile, "ready")
	start := time.Now()
	dumped, err := p.StopDumping(10*time.Second, 500*time.Millisecond)
	if err != nil || !dumped {
		t.Fatalf("StopDumping = %v, %v; want dumped, no error", dumped, err)
	}
	if took := time.Since(start); took >= 10*time.Second {
		t.Errorf("the process was killed at the grace period (%s), not ended by SIGQUIT", took)
	}
	raw, _ := os.ReadFile(p.LogFile)
	if !strings.Contains(string(raw), "SIGQUIT") || !strings.Contains(string(raw), "goroutine 1 ") {
		t.Errorf("the log has no goroutine dump:\n%s", raw)
	}
	if exited, _ := p.Exited(); !exited {
		t.Error("the process is still running")
	}
	// The main goroutine sleeps in this test's init.
	sum := goroutineDumpSummary(p.LogFile)
	if !strings.Contains(sum, "[sleep]") || !strings.Contains(sum, "localcluster.init") {
		t.Errorf("the dump's summary does not show the sleeping main goroutine:\n%s", sum)
	}
	t.Logf("the dump by stack:\n%s", sum)
}

func TestStopDumpingLeavesAPromptShutdownAlone(t *testing.T) {
	p, err := startProcess(t.TempDir(), "sleep", "sleep", []string{"60"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dumped, err := p.StopDumping(10*time.Second, 5*time.Second)
	if err != nil || dumped {
		t.Fatalf("StopDumping = %v, %v; want a prompt exit on SIGTERM, no dump", dumped, err)
	}
}

func waitLog(t *testing.T, file, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if raw, _ := os.ReadFile(file); strings.Contains(string(raw), want) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s never said %q", file, want)
}
