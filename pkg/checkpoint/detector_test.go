package checkpoint

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/pkg/binding"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// ok is a verified file of size n, verified at t0 plus sec seconds.
func ok(path string, n int64, sec int) File {
	return File{Path: path, Size: n, Verified: true, VerifiedAt: t0.Add(time.Duration(sec) * time.Second)}
}

// pending is a file not verified (being written, uploading, or changed).
func pending(path string, n int64) File { return File{Path: path, Size: n} }

func TestNewest(t *testing.T) {
	for _, tc := range []struct {
		name     string
		patterns []Pattern
		files    []File
		want     *binding.Checkpoint // nil: none
	}{
		{name: "no files"},
		{name: "no checkpoint", files: []File{ok("tether-progress.jsonl", 10, 1), ok("logs/train.log", 5, 1)}},
		{
			name:  "a directory counts every file under it",
			files: []File{ok("checkpoint-100/model.safetensors", 1000, 1), ok("checkpoint-100/optimizer.pt", 200, 3), ok("checkpoint-100/sub/rng.pth", 7, 2), ok("train.log", 1, 9)},
			want:  &binding.Checkpoint{Path: "checkpoint-100/", Step: 100, Files: 3, Bytes: 1207, VerifiedAt: t0.Add(3 * time.Second)},
		},
		{
			name:  "one unverified file makes a directory incomplete",
			files: []File{ok("checkpoint-100/model.safetensors", 1000, 1), pending("checkpoint-100/optimizer.pt", 200)},
		},
		{
			name: "a newer partial checkpoint leaves the older complete one",
			files: []File{ok("checkpoint-100/model.safetensors", 1000, 1), ok("checkpoint-100/optimizer.pt", 200, 2),
				ok("checkpoint-200/model.safetensors", 1000, 5), pending("checkpoint-200/optimizer.pt", 200)},
			want: &binding.Checkpoint{Path: "checkpoint-100/", Step: 100, Files: 2, Bytes: 1200, VerifiedAt: t0.Add(2 * time.Second)},
		},
		{
			name:  "the highest step wins, not the last verified",
			files: []File{ok("checkpoint-900/model.pt", 1, 1), ok("checkpoint-1000/model.pt", 1, 2), ok("checkpoint-950/model.pt", 1, 3)},
			want:  &binding.Checkpoint{Path: "checkpoint-1000/", Step: 1000, Files: 1, Bytes: 1, VerifiedAt: t0.Add(2 * time.Second)},
		},
		{
			name:  "equal steps: the one verified last",
			files: []File{ok("a/checkpoint-5/m", 1, 4), ok("b/checkpoint-5/m", 2, 6), ok("c/checkpoint-5/m", 3, 5)},
			want:  &binding.Checkpoint{Path: "b/checkpoint-5/", Step: 5, Files: 1, Bytes: 2, VerifiedAt: t0.Add(6 * time.Second)},
		},
		{
			name:  "default: step directories at any depth",
			files: []File{ok("outputs/checkpoint/step-20/__0_0.distcp", 10, 1), ok("outputs/checkpoint/step-20/.metadata", 1, 2)},
			want:  &binding.Checkpoint{Path: "outputs/checkpoint/step-20/", Step: 20, Files: 2, Bytes: 11, VerifiedAt: t0.Add(2 * time.Second)},
		},
		{
			name: "a DCP directory without .metadata is incomplete, with any pattern",
			files: []File{ok("step-10/__0_0.distcp", 10, 1), ok("step-10/.metadata", 1, 1),
				ok("step-20/__0_0.distcp", 10, 2), ok("step-20/__1_0.distcp", 10, 2)},
			want: &binding.Checkpoint{Path: "step-10/", Step: 10, Files: 2, Bytes: 11, VerifiedAt: t0.Add(time.Second)},
		},
		{
			name:     "a preset's required file",
			patterns: []Pattern{HuggingFace},
			files: []File{ok("checkpoint-1/model.safetensors", 4, 1), ok("checkpoint-1/trainer_state.json", 1, 2),
				ok("checkpoint-2/model.safetensors", 4, 3), ok("checkpoint-2/sub/trainer_state.json", 1, 3)},
			want: &binding.Checkpoint{Path: "checkpoint-1/", Step: 1, Files: 2, Bytes: 5, VerifiedAt: t0.Add(2 * time.Second)},
		},
		{
			name:     "patterns together: the first names the step, every one adds its required files",
			patterns: append([]Pattern{DCP}, Default()...),
			files:    []File{ok("step-7/model.pt", 4, 1), ok("step-3/model.pt", 4, 1), ok("step-3/.metadata", 1, 1)},
			want:     &binding.Checkpoint{Path: "step-3/", Step: 3, Files: 2, Bytes: 5, VerifiedAt: t0.Add(time.Second)},
		},
		{
			name:     "file checkpoints",
			patterns: []Pattern{Lightning},
			files: []File{ok("ckpt/epoch=0-step=50.ckpt", 8, 1), pending("ckpt/epoch=1-step=100.ckpt", 8),
				ok("ckpt/last.ckpt", 8, 9)},
			want: &binding.Checkpoint{Path: "ckpt/epoch=0-step=50.ckpt", Step: 50, Files: 1, Bytes: 8, VerifiedAt: t0.Add(time.Second)},
		},
		{
			name:  "a path too long to report is passed over",
			files: []File{ok("checkpoint-1/m", 1, 1), ok(strings.Repeat("d/", 520)+"checkpoint-2/m", 1, 1)},
			want:  &binding.Checkpoint{Path: "checkpoint-1/", Step: 1, Files: 1, Bytes: 1, VerifiedAt: t0.Add(time.Second)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := NewDetector(tc.patterns...).Newest(tc.files)
			switch {
			case tc.want == nil && got != nil:
				t.Fatalf("got %+v, want none", *got)
			case tc.want == nil:
			case got == nil:
				t.Fatalf("got none, want %+v", *tc.want)
			case *got != *tc.want:
				t.Fatalf("got %+v, want %+v", *got, *tc.want)
			}
		})
	}
}

// Every checkpoint Newest reports passes the protocol's own check.
func TestNewestIsAValidHeartbeat(t *testing.T) {
	cp := NewDetector().Newest([]File{ok("checkpoint-0/empty", 0, 0)})
	if cp == nil {
		t.Fatal("an empty verified file in checkpoint-0/ is a checkpoint of step 0")
	}
	frame, err := json.Marshal(binding.Frame{Type: binding.FrameHeartbeat, Heartbeat: &binding.Heartbeat{Seq: 1, SentAt: t0, Checkpoint: cp}})
	if err != nil {
		t.Fatal(err)
	}
	if f, err := binding.DecodeFrame(frame); err != nil || *f.Heartbeat.Checkpoint != *cp {
		t.Fatalf("a heartbeat with %+v: %v", *cp, err)
	}
}
