package binding

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

// TestSkippedEntriesAreNamedOnTheBinding puts a symlink out of the artifact
// directory and a FIFO next to a regular file: the sidecar's scan skips
// both, its heartbeats carry them, and the binding names each with its
// reason.
func TestSkippedEntriesAreNamedOnTheBinding(t *testing.T) {
	j := newJob(t, map[string]string{names.HeartbeatIntervalAnnotation: "1s"})
	j.write(t, "model.bin", []byte("weights"))
	if err := os.Symlink("/etc/passwd", filepath.Join(j.artifactDir, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(j.artifactDir, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := j.syncer(t)
	if _, err := s.FlushNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	cfg := j.clientConfig()
	cfg.Skipped = s.Skipped
	runningClient(t, cfg)
	var a *tetherv1.ArtifactsStatus
	eventually(t, 15*time.Second, func() error {
		a = j.binding(t).Status.Artifacts
		if a == nil || a.SkippedCount != 2 || len(a.Skipped) != 2 {
			return fmt.Errorf("status.artifacts %+v, want 2 skipped entries", a)
		}
		return nil
	})
	joined := strings.Join(a.Skipped, "\n")
	for _, want := range []string{"escape: ", "/etc/passwd", "pipe: ", "not a regular file"} {
		if !strings.Contains(joined, want) {
			t.Errorf("skipped entries %q do not say %q", a.Skipped, want)
		}
	}
}
