package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRelayRefusesAnIncompleteCommandLine runs the built command as
// StartTrainerV20 does (status pipe on file descriptor 3) with a flag
// missing: it reports "error ..." on the pipe and exits 2 before it
// touches a namespace or a mount (so this needs no root).
func TestRelayRefusesAnIncompleteCommandLine(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "trainerv20relay")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command(bin, "-workdir="+t.TempDir(), "--", "/bin/true")
	cmd.ExtraFiles = []*os.File{w}
	err = cmd.Run()
	_ = w.Close()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Fatalf("exit: %v, want exit status 2", err)
	}
	line, _ := bufio.NewReader(r).ReadString('\n')
	if !strings.HasPrefix(line, "error ") || !strings.Contains(line, "is required") {
		t.Errorf("status line %q, want \"error -<flag> is required\"", line)
	}

	// Without the status pipe it says who starts it.
	out, err := exec.Command(bin).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "StartTrainerV20") {
		t.Errorf("without fd 3: %v, %s", err, out)
	}
}
