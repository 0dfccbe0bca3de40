// Command trainer-standin takes the place of a training container in the
// local cluster (kwok runs no containers): it "trains" for a number of steps,
// writing a progress line every step, a checkpoint every few steps and a
// final model, into the artifact directory it shares with the sidecar, then
// exits with the code it was told to. SIGTERM ends it at once with 143, as
// it would a real trainer that does not handle the signal.
//
// For a multi-node job, --shards writes each checkpoint as a sharded one
// (PyTorch DCP's layout): every rank its own checkpoints/step-NNNN/__<rank>_0.distcp,
// rank 0 also the checkpoint's .metadata and the final model, so that with
// node-local storage each shard exists only on its own node. --fail-runs N
// fails the first N runs in one artifact directory (a container restarted in
// place keeps its emptyDir), counted in the file .standin-runs.
//
// Before it exits, by any path, it prints every file of the artifact
// directory with its size and MD5 ("trainer-standin: file <path> <md5>
// <size>"): on a real node the pod's emptyDir is gone once the pod ends, and
// the pod's log (the kubelet serves it through the pods/log API) is the
// record of what the trainer left for the sidecar.
package main

import (
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	mrand "math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// options are the command's flags.
type options struct {
	dir                                      string
	steps, startStep, every, size, modelSize int
	interval                                 time.Duration
	exitCode, failRuns, failAfter            int
	corrupt, resume, shards, latest          bool
	rank, smallFiles                         int
	stallAt                                  int
	stallFor                                 time.Duration
	checkpointPerm, modelPerm                os.FileMode
}

func parseFlags() *options {
	o := &options{}
	flag.StringVar(&o.dir, "artifacts", "", "artifact directory (shared with the sidecar)")
	flag.IntVar(&o.steps, "steps", 6, "training steps")
	flag.DurationVar(&o.interval, "step-interval", 500*time.Millisecond, "time per step")
	flag.IntVar(&o.every, "checkpoint-every", 2, "write a checkpoint every N steps")
	flag.IntVar(&o.size, "checkpoint-bytes", 256<<10, "size of a checkpoint")
	flag.IntVar(&o.modelSize, "model-bytes", 0, "size of the final model (0: three checkpoints)")
	flag.IntVar(&o.exitCode, "exit-code", 0, "exit code after the last step; non-zero skips the final model")
	flag.IntVar(&o.startStep, "start-step", 0, "first step (a resumed attempt continues the count)")
	flag.BoolVar(&o.corrupt, "corrupt-first-checkpoint", false, "with a non-zero exit code: first overwrite the first checkpoint of this run in place with garbage, as a crash while re-saving it would")
	flag.BoolVar(&o.resume, "resume", false, "continue after the last checkpoint found in the artifact directory (a volume kept across pods), up to --steps in all")
	checkpointMode := flag.String("checkpoint-mode", "0644", "file mode of checkpoints (octal)")
	modelMode := flag.String("model-mode", "0644", "file mode of the final model (octal)")
	flag.IntVar(&o.rank, "rank", envInt("JOB_COMPLETION_INDEX"), "node rank (default: the indexed Job's JOB_COMPLETION_INDEX)")
	flag.BoolVar(&o.shards, "shards", false, "write sharded checkpoints (a shard per rank; rank 0 also .metadata and the final model)")
	flag.IntVar(&o.failRuns, "fail-runs", 0, "with --exit-code: fail only the first N runs in this artifact directory, then succeed")
	flag.IntVar(&o.failAfter, "fail-after-steps", 0, "with --exit-code: a failing run stops after this many steps (0: all of them)")
	flag.StringVar(&recordPath, "record", "", "append \"<path> <md5> <size>\" of every file version closed, synced, to this file (outside the pod: the soak's checker reads it after a kill)")
	flag.BoolVar(&o.latest, "rewrite-latest", false, "at every checkpoint also replace checkpoints/latest.pt (a new version of the same file, often while the sidecar still uploads the one before)")
	flag.IntVar(&o.smallFiles, "small-files", 0, "after the first step, write this many small files (4 KiB each) under small/, as logs and metrics files accumulate")
	flag.IntVar(&o.stallAt, "stall-at-step", 0, "after this step, stand still for --stall-for (no progress line, no file), as a hung collective would, then go on")
	flag.DurationVar(&o.stallFor, "stall-for", 0, "how long to stand still at --stall-at-step")
	flag.Parse()
	if o.dir == "" {
		fmt.Fprintln(os.Stderr, "trainer-standin: --artifacts is required")
		os.Exit(2)
	}
	ckptPerm, err1 := strconv.ParseUint(*checkpointMode, 8, 32)
	modelPerm, err2 := strconv.ParseUint(*modelMode, 8, 32)
	if err1 != nil || err2 != nil {
		fmt.Fprintln(os.Stderr, "trainer-standin: --checkpoint-mode and --model-mode take an octal mode such as 0644")
		os.Exit(2)
	}
	o.checkpointPerm, o.modelPerm = os.FileMode(ckptPerm), os.FileMode(modelPerm)
	return o
}

func main() {
	o := parseFlags()
	artifactDir = o.dir
	exit := func(code int) {
		listFiles(o.dir)
		os.Exit(code)
	}
	fmt.Printf("trainer-standin: uid %d gid %d groups %v rank %d\n", os.Getuid(), os.Getgid(), groups(), o.rank)
	o.planRun()
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	for step := o.startStep + 1; step <= o.startStep+o.steps; step++ {
		select {
		case <-term:
			fmt.Println("trainer-standin: SIGTERM at step", step)
			exit(143)
		case <-time.After(o.interval):
		}
		o.trainStep(step)
		if step == o.stallAt && o.stallFor > 0 {
			fmt.Println("trainer-standin: standing still after step", step, "for", o.stallFor)
			select {
			case <-term:
				fmt.Println("trainer-standin: SIGTERM while standing still at step", step)
				exit(143)
			case <-time.After(o.stallFor):
			}
		}
	}
	if o.exitCode != 0 {
		if o.corrupt {
			o.corruptFirstCheckpoint()
		}
		fmt.Println("trainer-standin: failing with exit code", o.exitCode)
		exit(o.exitCode)
	}
	if o.shards && o.rank != 0 {
		fmt.Println("trainer-standin: done (the final model is rank 0's)")
		exit(0)
	}
	if o.modelSize == 0 {
		o.modelSize = 3 * o.size
	}
	must(writeFile(filepath.Join(o.dir, "model", "final.safetensors"), o.modelSize, o.modelPerm))
	fmt.Println("trainer-standin: final model written")
	exit(0)
}

// planRun settles this run's steps and exit code: a run past --fail-runs
// succeeds, a failing run stops after --fail-after-steps, and --resume
// continues after the last checkpoint.
func (o *options) planRun() {
	if o.failRuns > 0 && o.exitCode != 0 {
		runs := countRun(o.dir)
		if runs > o.failRuns {
			fmt.Printf("trainer-standin: run %d, after %d failing runs: succeeding\n", runs, o.failRuns)
			o.exitCode, o.corrupt = 0, false
		} else {
			fmt.Printf("trainer-standin: run %d of %d failing runs\n", runs, o.failRuns)
		}
	}
	if o.exitCode != 0 && o.failAfter > 0 {
		o.steps = min(o.steps, o.failAfter)
	}
	if o.resume {
		if last := lastCheckpoint(o.dir); last > 0 {
			o.startStep, o.steps = last, max(o.steps-last, 0)
			fmt.Println("trainer-standin: resuming after checkpoint", last)
		}
	}
}

// trainStep writes what one step leaves: a checkpoint every --checkpoint-every
// steps, the small files after the first, and a progress line.
func (o *options) trainStep(step int) {
	if step%o.every == 0 && o.shards {
		ckpt := filepath.Join(o.dir, "checkpoints", fmt.Sprintf("step-%04d", step))
		must(writeFile(filepath.Join(ckpt, fmt.Sprintf("__%d_0.distcp", o.rank)), o.size, o.checkpointPerm))
		if o.rank == 0 {
			must(writeFile(filepath.Join(ckpt, ".metadata"), 4<<10, o.checkpointPerm))
		}
		fmt.Println("trainer-standin: sharded checkpoint", step, "rank", o.rank)
	} else if step%o.every == 0 {
		must(writeFile(filepath.Join(o.dir, "checkpoints", fmt.Sprintf("step-%04d.pt", step)), o.size, o.checkpointPerm))
		fmt.Println("trainer-standin: checkpoint", step)
	}
	if step%o.every == 0 && o.latest {
		must(writeFile(filepath.Join(o.dir, "checkpoints", "latest.pt"), o.size, o.checkpointPerm))
	}
	if step == o.startStep+1 && o.smallFiles > 0 {
		for i := range o.smallFiles {
			must(writeFile(filepath.Join(o.dir, "small", fmt.Sprintf("file-%04d.txt", i)), 4<<10, o.checkpointPerm))
		}
		fmt.Println("trainer-standin: small files", o.smallFiles)
	}
	done := float64(step-o.startStep) / float64(o.steps)
	must(appendLine(filepath.Join(o.dir, "tether-progress.jsonl"),
		fmt.Sprintf(`{"step": %d, "epoch": %.2f, "loss": %.4f, "fraction": %.3f}`, step, float64(step)/10, 2.0/float64(step+1), done)))
}

// corruptFirstCheckpoint overwrites this run's first checkpoint in place
// with a partial write, as a crash while re-saving it would.
func (o *options) corruptFirstCheckpoint() {
	first := (o.startStep/o.every + 1) * o.every
	partial := []byte("partial write")
	ckpt := filepath.Join(o.dir, "checkpoints", fmt.Sprintf("step-%04d.pt", first))
	sum := md5.Sum(partial)
	must(record(ckpt, hex.EncodeToString(sum[:]), int64(len(partial))))
	must(os.WriteFile(ckpt, partial, 0o644))
	fmt.Println("trainer-standin: corrupted checkpoint", first)
}

// runsFile counts the runs in an artifact directory (for --fail-runs).
const runsFile = ".standin-runs"

// countRun records one more run in dir and returns how many there were.
// The count is a file of the artifact directory like any other: the
// sidecar uploads it, so its every version goes in the record too.
func countRun(dir string) int {
	path := filepath.Join(dir, runsFile)
	b, _ := os.ReadFile(path)
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	n++
	content := []byte(strconv.Itoa(n) + "\n")
	// Recorded before it is written (writeFile's rule): a kill in between
	// leaves a recorded version never stored, never a stored one unrecorded.
	sum := md5.Sum(content)
	must(record(path, hex.EncodeToString(sum[:]), int64(len(content))))
	must(os.WriteFile(path, content, 0o644))
	return n
}

func envInt(name string) int {
	n, _ := strconv.Atoi(os.Getenv(name))
	return n
}

// listFiles prints each file under dir (but *.tmp) with its MD5 and size.
func listFiles(dir string) {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, ".tmp") || d.Name() == runsFile {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			fmt.Printf("trainer-standin: file %s unreadable: %v\n", p, err)
			return nil
		}
		defer f.Close()
		h := md5.New()
		n, err := io.Copy(h, f)
		if err != nil {
			fmt.Printf("trainer-standin: file %s unreadable: %v\n", p, err)
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Printf("trainer-standin: file %s %s %d\n", filepath.ToSlash(rel), hex.EncodeToString(h.Sum(nil)), n)
		return nil
	})
}

// lastCheckpoint is the highest step of checkpoints/step-NNNN.pt in dir (0: none).
func lastCheckpoint(dir string) int {
	entries, _ := os.ReadDir(filepath.Join(dir, "checkpoints"))
	last := 0
	for _, e := range entries {
		var step int
		if _, err := fmt.Sscanf(e.Name(), "step-%d.pt", &step); err == nil && strings.HasSuffix(e.Name(), ".pt") {
			last = max(last, step)
		}
	}
	return last
}

func groups() []int {
	g, _ := os.Getgroups()
	return g
}

// recordPath, if set, is where every closed version is recorded (record).
var recordPath string

// artifactDir is --artifacts, for record's relative paths.
var artifactDir string

// record appends path's version to the record and syncs it, so it survives
// a kill of the process or its pod.
func record(path, md5hex string, size int64) error {
	if recordPath == "" {
		return nil
	}
	rel, err := filepath.Rel(artifactDir, path)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(recordPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(f, "%s %s %d\n", filepath.ToSlash(rel), md5hex, size); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// writeFile writes n random bytes to a temporary name and renames it, as
// careful trainers do, so the sidecar never sees a half-written checkpoint.
// The bytes are streamed: a checkpoint may be larger than the container's
// memory limit.
func writeFile(path string, n int, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	// The MD5 only for the record: the closing list reads every file again.
	w, h := io.Writer(f), md5.New()
	if recordPath != "" {
		w = io.MultiWriter(f, h)
	}
	if err := writeRandom(w, int64(n)); err != nil {
		_ = f.Close()
		return err
	}
	// Recorded before it can be seen: a kill in between leaves a recorded
	// version never stored, never a stored one unrecorded. Before the
	// close, so that the close is followed by the rename at once, as a
	// trainer's save does (the record's fsync in between held the file
	// under its temporary name long enough for the sidecar to take it).
	if err := record(path, hex.EncodeToString(h.Sum(nil)), int64(n)); err != nil {
		_ = f.Close()
		return err
	}
	// WriteFile's mode is filtered by the umask; the flag's mode is exact.
	if err := f.Chmod(perm); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// writeRandom writes n bytes of ChaCha8 from a random seed: incompressible
// as weights are, every file and every stretch of one different (a part of
// a file stored in parts put in another's place is caught), and over twice
// as fast as crypto/rand (1.2 against 0.5 GiB/s on a CI core), for the
// files past 5 GiB some scenarios write.
func writeRandom(w io.Writer, n int64) error {
	var seed [32]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return err
	}
	src := mrand.NewChaCha8(seed)
	buf := make([]byte, 1<<20)
	for n > 0 {
		b := buf[:min(int64(len(buf)), n)]
		_, _ = src.Read(b) // never fails
		if _, err := w.Write(b); err != nil {
			return err
		}
		n -= int64(len(b))
	}
	return nil
}

func appendLine(path, line string) error {
	if recordPath != "" {
		// Every version of an appended file is one the sidecar may
		// upload: recorded before it is written.
		b, err := os.ReadFile(path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		b = append(b, line+"\n"...)
		sum := md5.Sum(b)
		if err := record(path, hex.EncodeToString(sum[:]), int64(len(b))); err != nil {
			return err
		}
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(f, line); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "trainer-standin:", err)
		os.Exit(1)
	}
}
