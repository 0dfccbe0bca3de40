package artifacts

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tether-dev/tether/pkg/binding"
	"github.com/tether-dev/tether/pkg/checkpoint"
	"github.com/tether-dev/tether/pkg/upload"
)

// Defaults of SyncerConfig.
const (
	DefaultSyncInterval = 10 * time.Second
	// DefaultWorkers: enough uploads at once to keep a round of small files
	// from waiting on one request's round trip (test/performance/sync), few
	// enough that their buffers and connections stay small.
	DefaultWorkers = 8
	// MaxWorkers bounds Workers.
	MaxWorkers = 64
	// DefaultFlushBudget is the time a final flush gets on SIGTERM by
	// default: within the pod's 30s termination grace period, with room to
	// stop.
	DefaultFlushBudget = 25 * time.Second
)

// SyncerConfig configures a Syncer. Scanner and Uploader are required; the
// Syncer owns neither (close the Scanner after the Syncer is done).
type SyncerConfig struct {
	Scanner  *Scanner
	Uploader *Uploader
	// JobID is the manifest's job id.
	JobID string
	// PodUID is the pod the sidecar runs in, recorded in the manifest.
	PodUID string
	// Interval between two rounds of Run; 0 means DefaultSyncInterval.
	Interval time.Duration
	// Workers uploading at once, all rounds and file events together; 0
	// means DefaultWorkers. The Uploader's connections should be sized to
	// it (UploaderConfig.MaxConns).
	Workers int
	// FileEvents makes Run upload a file as soon as the trainer closes it
	// after writing or renames it into place (inotify, watch.go), besides
	// the periodic rounds, whose settle rule still takes files never
	// closed. When events are unavailable (the per-uid inotify limits used
	// up, no inotify) Run says so and the settle rule alone decides (Mode).
	FileEvents bool
	// Checkpoints finds the newest verified checkpoint after each round
	// (Checkpoint); nil means checkpoint.NewDetector(), the default patterns.
	Checkpoints *checkpoint.Detector
	// Logger; nil discards.
	Logger *slog.Logger
}

// Syncer keeps the artifact directory uploaded: Run uploads finished files
// every Interval; FlushNow uploads the finished files at once; Flush
// uploads everything, then the manifest. Rounds never overlap.
type Syncer struct {
	cfg SyncerConfig
	log *slog.Logger

	sem          chan struct{} // held by the running round
	flushWaiting atomic.Int32  // a flush waits for the round: stop handing out files
	slots        chan struct{} // one per upload running, rounds and file events together
	paths        pathLocks     // one upload of a path at a time
	mode         atomic.Value  // string: ModeEvents or ModeSettle
	kick         chan struct{} // cap 1: run a round now (events lost)
	// addWatch replaces inotify_add_watch (tests); nil is the real one.
	addWatch  func(fd int, pathname string, mask uint32) (int, error)
	eventMu   sync.Mutex
	lastEvent map[string]time.Time // per path, when a file event last verified it
	// eventWorkers bounds the uploads file events have started (Workers);
	// eventsRunning is how many still run; uploadedOnClose counts those
	// that sent a file, and resumedOnClose the bytes they did not send
	// again (Result.Resumed), for the next round's log line.
	eventWorkers    chan struct{}
	eventsRunning   sync.WaitGroup
	uploadedOnClose atomic.Int64
	resumedOnClose  atomic.Int64

	logMu         sync.Mutex
	lastLoggedErr map[string]string // per path, the error last logged: not repeated every round
	lastError     string            // LastError
	lastRoundWarn string            // the round-level warning last logged: logged again only when it changes
	skipped       []SkippedFile     // the last round's (skipped.go)
	loggedSkipped map[string]string // per path, the reason last logged

	detector   *checkpoint.Detector
	checkpoint atomic.Pointer[binding.Checkpoint] // the last round's (checkpoint.go)
}

// Report is the outcome of a round.
type Report struct {
	// Final: every regular file was taken (Flush).
	Final bool
	// Verified are the files verified (now or earlier, unchanged since), in
	// path order: what a manifest lists.
	Verified []upload.ManifestFile
	// Uploaded counts the files sent in this round, AlreadyPresent those
	// found stored, and UploadedBytes the bytes sent.
	Uploaded, AlreadyPresent int
	UploadedBytes            int64
	// ResumedBytes are the bytes of the files sent that were not sent
	// again: an earlier PUT cut short had stored them in parts.
	ResumedBytes int64
	// Failed are the files that could not be verified, with why.
	Failed []*FileError
	// Missing lists every artifact that is not verified: failed, refused by
	// the scan (too large, reserved name, unreadable directory) or not
	// attempted before the deadline. A missing file is never in the
	// manifest.
	Missing []string
	// Pending are files still being written (not yet settled); only in a
	// non-final round.
	Pending []string
	// Skipped are entries that are not artifacts by policy (symlinks,
	// special files).
	Skipped []SkippedFile
	// Manifest is the manifest's key once it is verified; ManifestErr says
	// why it was not uploaded (Flush only).
	Manifest    string
	ManifestErr error
	Duration    time.Duration
}

// Err is nil when the round did what it was asked: every taken file
// verified and, for Flush, the manifest verified.
func (r *Report) Err() error {
	switch {
	case len(r.Missing) > 0:
		first := fmt.Sprintf("%q", r.Missing[0])
		for _, f := range r.Failed {
			if f.Path == r.Missing[0] {
				first = f.Error()
				break
			}
		}
		return fmt.Errorf("%d artifact(s) not verified; first: %s", len(r.Missing), first)
	case r.ManifestErr != nil:
		return r.ManifestErr
	}
	return nil
}

// NewSyncer checks cfg.
func NewSyncer(cfg SyncerConfig) (*Syncer, error) {
	switch {
	case cfg.Scanner == nil || cfg.Uploader == nil:
		return nil, errors.New("syncer: Scanner and Uploader are required")
	case !binding.ValidID(cfg.JobID):
		return nil, fmt.Errorf("syncer: invalid JobID %q", cfg.JobID)
	case cfg.Interval < 0 || cfg.Workers < 0:
		return nil, errors.New("syncer: negative Interval or Workers")
	case cfg.Workers > MaxWorkers:
		return nil, fmt.Errorf("syncer: %d Workers, at most %d", cfg.Workers, MaxWorkers)
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultSyncInterval
	}
	if uid := cfg.Uploader.podUID.Load(); cfg.PodUID != "" && (uid == nil || *uid == "") {
		cfg.Uploader.podUID.Store(&cfg.PodUID)
	}
	if cfg.Workers == 0 {
		cfg.Workers = DefaultWorkers
	}
	s := &Syncer{cfg: cfg, log: cfg.Logger, sem: make(chan struct{}, 1), lastLoggedErr: map[string]string{},
		slots: make(chan struct{}, cfg.Workers), eventWorkers: make(chan struct{}, cfg.Workers), kick: make(chan struct{}, 1), lastEvent: map[string]time.Time{}}
	s.mode.Store(ModeSettle)
	if s.detector = cfg.Checkpoints; s.detector == nil {
		s.detector = checkpoint.NewDetector()
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s, nil
}

// UploadedBytes is the total the Syncer has had verified (for heartbeats).
func (s *Syncer) UploadedBytes() int64 { return s.cfg.Uploader.VerifiedBytes() }

// Run syncs at once, then every Interval, until ctx ends; it returns nil.
// With FileEvents it also uploads each file as it is closed (events.go).
func (s *Syncer) Run(ctx context.Context) error {
	if s.cfg.FileEvents {
		// Watching starts before the first round's scan: a file closed
		// after the scan has its event.
		if w := s.watch(); w != nil {
			defer func() { _ = w.Close() }()
			done := make(chan struct{})
			go func() {
				defer close(done)
				s.runEvents(ctx, w)
			}()
			defer func() { <-done }()
		}
	} else {
		s.setMode(ModeSettle, nil)
	}
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		rep, err := s.round(ctx, false, false)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("artifact sync round failed", "error", err)
		} else if err == nil {
			s.logRound("artifact sync round", rep)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-s.kick:
		}
	}
}

// FlushNow uploads every finished file now, without the manifest. The
// error says which file failed first.
func (s *Syncer) FlushNow(ctx context.Context) (*Report, error) {
	rep, err := s.round(ctx, false, true)
	if err != nil {
		return rep, err
	}
	s.logRound("artifact flush", rep)
	return rep, rep.Err()
}

// Flush takes every regular file as finished and uploads what is not
// verified yet, then, when every artifact is verified, the manifest (last,
// listing every verified file). When ctx ends first, the files not
// verified by then are reported missing. A manifest is never uploaded while
// an artifact is missing: it would certify an incomplete set.
func (s *Syncer) Flush(ctx context.Context) (*Report, error) {
	rep, err := s.round(ctx, true, true)
	if err != nil {
		return rep, err
	}
	switch {
	case len(rep.Missing) > 0:
		rep.ManifestErr = fmt.Errorf("manifest not uploaded: %d artifact(s) not verified", len(rep.Missing))
	case ctx.Err() != nil:
		rep.ManifestErr = fmt.Errorf("manifest not uploaded: %w", ctx.Err())
	default:
		m := NewManifest(s.cfg.JobID, rep.Verified)
		m.PodUID = s.cfg.PodUID
		res, err := s.cfg.Uploader.PutManifest(ctx, m)
		if err != nil {
			rep.ManifestErr = err
		} else {
			rep.Manifest = s.cfg.Uploader.Key(res.Path)
		}
	}
	s.logRound("artifact final flush", rep)
	return rep, rep.Err()
}

// LastError is the first failure of the last round ("" when it had none):
// the file, the error and what to do. Heartbeats carry it to the binding.
func (s *Syncer) LastError() string {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	return s.lastError
}

func (s *Syncer) logRound(what string, rep *Report) {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	s.lastError = ""
	if len(rep.Failed) > 0 {
		s.lastError = rep.Failed[0].Error()
	} else if rep.ManifestErr != nil {
		s.lastError = "manifest not uploaded: " + rep.ManifestErr.Error()
	}
	for _, f := range rep.Failed {
		msg := f.Error()
		if s.lastLoggedErr[f.Path] != msg {
			s.log.Warn("artifact not verified", "path", f.Path, "error", msg)
		}
	}
	failed := make(map[string]string, len(rep.Failed))
	for _, f := range rep.Failed {
		failed[f.Path] = f.Error()
	}
	s.lastLoggedErr = failed
	s.noteSkipped(rep.Skipped)
	onClose, resumedOnClose := s.uploadedOnClose.Swap(0), s.resumedOnClose.Swap(0)
	attrs := []any{"verified", len(rep.Verified), "uploaded", rep.Uploaded, "uploadedOnClose", onClose, "alreadyPresent", rep.AlreadyPresent,
		"uploadedBytes", rep.UploadedBytes, "resumedBytes", rep.ResumedBytes + resumedOnClose, "missing", len(rep.Missing), "pending", len(rep.Pending),
		"skipped", len(rep.Skipped), "duration", rep.Duration.Round(time.Millisecond).String()}
	incomplete := len(rep.Missing) > 0 || rep.ManifestErr != nil
	warning := ""
	if incomplete {
		warning = rep.Err().Error()
	}
	// A periodic round that fails the same way as the last one says so at
	// debug level: the per-file warnings above already named each failure.
	repeated := !rep.Final && warning == s.lastRoundWarn
	s.lastRoundWarn = warning
	switch {
	case incomplete && repeated:
		s.log.Debug(what+" still incomplete", append(attrs, "error", warning)...)
	case incomplete:
		s.log.Warn(what+" incomplete", append(attrs, "error", warning)...)
	case rep.Uploaded > 0 || rep.AlreadyPresent > 0 || rep.Final || onClose > 0:
		s.log.Info(what, append(attrs, "manifest", rep.Manifest)...)
	default:
		s.log.Debug(what, attrs...)
	}
}

// round scans and uploads. final takes every file; flush marks a round a
// flush asked for (a running periodic round then stops handing out files).
func (s *Syncer) round(ctx context.Context, final, flush bool) (*Report, error) {
	start := time.Now()
	release, err := s.takeTurn(ctx, final, flush)
	if err != nil {
		return &Report{Final: final, ManifestErr: ctx.Err()}, err
	}
	defer release()

	if final {
		ctx = withFinalFlush(ctx)
	} else {
		ctx = withChangeEndsAttempts(ctx)
	}
	scan, err := s.cfg.Scanner.Scan(final)
	if err != nil {
		return &Report{Final: final}, err
	}
	rep := &Report{Final: final, Skipped: scan.Skipped}
	var todo []LocalFile
	for _, f := range scan.Files {
		if f.Finished {
			todo = append(todo, f)
		} else {
			rep.Pending = append(rep.Pending, f.Path)
		}
	}
	for _, e := range scan.Errors {
		rep.Failed = append(rep.Failed, e)
		rep.Missing = append(rep.Missing, e.Path)
	}

	results := s.uploadAll(ctx, todo, flush)
	s.tally(ctx, rep, todo, results)
	// In a non-final round, files not taken this time but verified earlier
	// (or on their close event) and unchanged still count as verified.
	if !final {
		for _, f := range scan.Files {
			if !f.Finished {
				if v, ok := s.cfg.Uploader.VerifiedFile(f.Path, f.Size, f.ModTime); ok {
					rep.Verified = append(rep.Verified, v)
					rep.Pending = slices.DeleteFunc(rep.Pending, func(p string) bool { return p == f.Path })
				}
			}
		}
	}
	s.noteCheckpoint(&scan)
	slices.SortFunc(rep.Verified, func(a, b upload.ManifestFile) int { return strings.Compare(a.Path, b.Path) })
	slices.Sort(rep.Missing)
	slices.Sort(rep.Pending)
	rep.Duration = time.Since(start)
	return rep, nil
}

// takeTurn waits for the running round to end: rounds run one at a time. A
// flush counts itself waiting meanwhile, so that a running periodic round
// stops handing out files. release ends the turn.
func (s *Syncer) takeTurn(ctx context.Context, final, flush bool) (release func(), err error) {
	if flush {
		s.flushWaiting.Add(1)
		defer s.flushWaiting.Add(-1)
	}
	select {
	case s.sem <- struct{}{}:
		return func() { <-s.sem }, nil
	case <-ctx.Done():
		if !final {
			return nil, fmt.Errorf("waiting for the running sync round: %w", ctx.Err())
		}
		// A final flush whose time ran out before it could start still says
		// which files are not verified: with ctx done nothing is uploaded,
		// and the scan only reads, so it may run beside the other round.
		return func() {}, nil
	}
}

// uploadOutcome is what became of one file a round took: done is false
// when the round stopped before starting its upload.
type uploadOutcome struct {
	file LocalFile
	res  Result
	err  error
	done bool
}

// uploadAll uploads todo on Workers goroutines; results[i] is todo[i]'s.
// A periodic round stops handing out files when a flush waits for its turn.
func (s *Syncer) uploadAll(ctx context.Context, todo []LocalFile, flush bool) []uploadOutcome {
	results := make([]uploadOutcome, len(todo))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(s.cfg.Workers, len(todo)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if ctx.Err() != nil || (!flush && s.flushWaiting.Load() > 0) {
					return
				}
				i := int(next.Add(1)) - 1
				if i >= len(todo) {
					return
				}
				res, started, err := s.upload(ctx, todo[i].Path)
				results[i] = uploadOutcome{file: todo[i], res: res, err: err, done: started}
			}
		}()
	}
	wg.Wait()
	return results
}

// tally adds the uploads' outcomes to rep: verified, pending, or missing
// with the reason.
func (s *Syncer) tally(ctx context.Context, rep *Report, todo []LocalFile, results []uploadOutcome) {
	final := rep.Final
	for i, o := range results {
		switch {
		case !o.done:
			if final {
				if v, ok := s.cfg.Uploader.VerifiedFile(todo[i].Path, todo[i].Size, todo[i].ModTime); ok {
					// Verified earlier and unchanged since: verified, though
					// this flush got no turn for it (its time ran out waiting
					// for a round stuck on the network). Called not uploaded,
					// it would be named missing while the store holds it.
					rep.Verified = append(rep.Verified, v)
					continue
				}
				cause := ctx.Err()
				if cause == nil {
					cause = errors.New("stopped")
				}
				rep.Failed = append(rep.Failed, &FileError{Path: todo[i].Path, Err: fmt.Errorf("not attempted: %w", cause),
					Hint: "the flush ran out of time; raise the flush budget (TETHER_FLUSH_BUDGET) and the pod's terminationGracePeriodSeconds"})
				rep.Missing = append(rep.Missing, todo[i].Path)
			} else {
				rep.Pending = append(rep.Pending, todo[i].Path)
			}
		case o.err != nil && !final && errors.Is(o.err, errChanged):
			rep.Pending = append(rep.Pending, o.file.Path) // being written after all
		case o.err != nil:
			var fe *FileError
			if !errors.As(o.err, &fe) {
				fe = &FileError{Path: o.file.Path, Err: o.err}
			}
			rep.Failed = append(rep.Failed, fe)
			rep.Missing = append(rep.Missing, o.file.Path)
		default:
			rep.Verified = append(rep.Verified, upload.ManifestFile{Path: o.res.Path, Size: o.res.Size, MD5: o.res.MD5, CRC64NVME: o.res.CRC64NVME})
			switch o.res.How {
			case Uploaded:
				rep.Uploaded++
				rep.UploadedBytes += o.res.Size
				rep.ResumedBytes += o.res.Resumed
			case AlreadyPresent:
				rep.AlreadyPresent++
			}
		}
	}
}

// upload runs one UploadFile within the bounds every upload shares: one
// upload of a path at a time (a file event and a round may both take it; the
// second finds it verified and unchanged, or changed and sends it again),
// at most Workers at once. started is false when ctx ended first.
func (s *Syncer) upload(ctx context.Context, rel string) (res Result, started bool, err error) {
	unlock, err := s.paths.lock(ctx, rel)
	if err != nil {
		return Result{}, false, nil
	}
	defer unlock()
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return Result{}, false, nil
	}
	defer func() { <-s.slots }()
	res, err = s.cfg.Uploader.UploadFile(ctx, s.cfg.Scanner.Root(), rel)
	return res, true, err
}

// pathLocks is a lock per path, taken with a context.
type pathLocks struct {
	mu   sync.Mutex
	held map[string]chan struct{} // closed on unlock
}

func (l *pathLocks) lock(ctx context.Context, p string) (unlock func(), err error) {
	for {
		l.mu.Lock()
		ch, busy := l.held[p]
		if !busy {
			if l.held == nil {
				l.held = map[string]chan struct{}{}
			}
			ch = make(chan struct{})
			l.held[p] = ch
			l.mu.Unlock()
			return func() {
				l.mu.Lock()
				delete(l.held, p)
				l.mu.Unlock()
				close(ch)
			}, nil
		}
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
