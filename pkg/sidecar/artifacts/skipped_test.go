package artifacts

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-dev/tether/pkg/upload"
)

// A periodic round that fails the same way as the last one, and entries
// skipped again, are not logged again at warning level; Skipped reports
// them with their reasons.
func TestSkippedLoggedOnceAndReported(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Too large for one PUT: the round is incomplete without any request.
	f, err := os.Create(filepath.Join(dir, "huge.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(upload.MaxObjectSize + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte(testToken), 0o600); err != nil {
		t.Fatal(err)
	}
	u, err := NewUploader(UploaderConfig{ServerURL: "https://127.0.0.1:1", JobID: "job-1", TokenFile: token})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	s, err := NewSyncer(SyncerConfig{Scanner: newTestScanner(t, dir, nil), Uploader: u, JobID: "job-1", Interval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := s.FlushNow(context.Background()); err == nil {
			t.Fatal("round with a too-large file reported no error")
		}
	}
	out := logs.String()
	for what, want := range map[string]int{`msg="artifact skipped" path=escape`: 1, `msg="artifact skipped" path=pipe`: 1, `msg="artifact flush incomplete"`: 1, `msg="artifact not verified"`: 1} {
		if got := strings.Count(out, what); got != want {
			t.Errorf("%q logged %d times in 3 rounds, want %d:\n%s", what, got, want, out)
		}
	}
	list, n := s.Skipped()
	if n != 2 || len(list) != 2 || list[0].Path != "escape" || !strings.Contains(list[0].Reason, "/etc/passwd") || list[1].Path != "pipe" {
		t.Errorf("Skipped() = %+v, %d; want escape (naming its target) and pipe", list, n)
	}
}
