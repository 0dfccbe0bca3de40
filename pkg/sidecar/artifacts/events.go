package artifacts

import (
	"context"
	"errors"
	"io/fs"
	"time"
)

// eventDelay is how long the event loop waits after an event before it
// takes the paths: a burst of closes is taken at once, and a file written
// then renamed at once is taken under its final name only.
const eventDelay = 50 * time.Millisecond

// Mode is how files are taken now: ModeEvents or ModeSettle.
func (s *Syncer) Mode() string { return s.mode.Load().(string) }

// setMode records the mode and logs a change: why events are unavailable
// (a per-uid inotify limit, named with the sysctl to raise) is a warning,
// since every file then waits for the settle time.
func (s *Syncer) setMode(mode string, why error) {
	prev := s.mode.Swap(mode)
	settle := s.cfg.Scanner.settle.String()
	switch {
	case mode == ModeEvents:
		s.log.Info("artifact uploads start when the trainer closes a file or renames it into place (inotify); "+
			"files never closed wait for the settle time", "mode", mode, "settleTime", settle)
	case why != nil:
		s.log.Warn("artifact uploads wait for the settle time: "+why.Error(), "mode", mode, "settleTime", settle)
	case prev != mode:
		s.log.Info("artifact uploads wait for the settle time (file events off)", "mode", mode, "settleTime", settle)
	}
}

// watch starts the watcher, or returns nil (settle mode) when it cannot.
func (s *Syncer) watch() *watcher {
	w, err := newWatcher(s.cfg.Scanner, s.addWatch)
	if err != nil {
		s.setMode(ModeSettle, err)
		return nil
	}
	s.setMode(ModeEvents, nil)
	s.log.Debug("watching the artifact directory", "directories", w.watches())
	return w
}

// runEvents uploads the files the watcher reports until ctx ends or
// watching stops for good (then the settle rule alone decides).
func (s *Syncer) runEvents(ctx context.Context, w *watcher) {
	ctx = withChangeEndsAttempts(ctx)
	defer s.eventsRunning.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.Ready():
		}
		t := time.NewTimer(eventDelay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		paths, overflow, err := w.Take()
		if overflow {
			// Closes were lost: watch again whatever directory appeared
			// meanwhile, and scan now; what was closed unseen is taken by
			// the settle rule (it cannot be told from a file still open).
			s.log.Warn("file events were lost (inotify queue overflow); rescanning: files closed meanwhile wait for the settle time",
				"settleTime", s.cfg.Scanner.settle.String())
			if err == nil {
				err = w.addTree("", false)
			}
			s.kickRound()
		}
		if len(paths) > 0 {
			s.uploadClosed(ctx, paths)
		}
		if err != nil {
			// Its watches count against the node's shared limit: give
			// them back now (Run closes it again, harmlessly).
			_ = w.Close()
			s.setMode(ModeSettle, err)
			s.kickRound()
			return
		}
	}
}

func (s *Syncer) kickRound() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// uploadClosed starts the uploads of files the trainer closed or renamed
// into place, each as soon as an event worker is free (at most Workers; the
// caller waits only for a free one, so a close is never held behind another
// file's upload). A file verified on an event less than the settle time ago
// and closed again (rewritten or appended again and again) is left to the
// settle rule. A file that changed while it was read is not retried: it is
// still being written, and its next close takes it. Other failures are
// retried, and reported, by the rounds.
func (s *Syncer) uploadClosed(ctx context.Context, paths []string) {
	for _, p := range paths {
		f, _, ok := s.cfg.Scanner.Closed(p)
		if !ok {
			continue // not an artifact, gone, or refused (the round reports it)
		}
		if _, done := s.cfg.Uploader.Verified(f.Path, f.Size, f.ModTime); done || s.recentlyVerified(f.Path, time.Now()) {
			continue
		}
		select {
		case s.eventWorkers <- struct{}{}:
		case <-ctx.Done():
			return
		}
		s.eventsRunning.Add(1)
		go func() {
			defer s.eventsRunning.Done()
			defer func() { <-s.eventWorkers }()
			start := time.Now()
			res, started, err := s.upload(ctx, f.Path)
			switch {
			case !started:
			case err != nil:
				if !errors.Is(err, fs.ErrNotExist) {
					s.log.Debug("upload on close failed; the sync rounds retry it", "path", f.Path, "error", err.Error())
				}
			case res.How == Uploaded:
				s.noteVerified(f.Path, time.Now())
				s.uploadedOnClose.Add(1)
				s.resumedOnClose.Add(res.Resumed)
				s.log.Debug("artifact uploaded on close", "path", f.Path, "size", res.Size,
					"duration", time.Since(start).Round(time.Millisecond).String())
			}
		}()
	}
}

// recentlyVerified reports whether a file event verified rel less than the
// settle time before now.
func (s *Syncer) recentlyVerified(rel string, now time.Time) bool {
	s.eventMu.Lock()
	defer s.eventMu.Unlock()
	t, ok := s.lastEvent[rel]
	return ok && now.Sub(t) < s.cfg.Scanner.settle
}

// noteVerified records that a file event verified rel at now.
func (s *Syncer) noteVerified(rel string, now time.Time) {
	settle := s.cfg.Scanner.settle
	s.eventMu.Lock()
	defer s.eventMu.Unlock()
	if len(s.lastEvent) >= maxPendingEvents {
		for p, t := range s.lastEvent {
			if now.Sub(t) >= settle {
				delete(s.lastEvent, p)
			}
		}
		if len(s.lastEvent) >= maxPendingEvents {
			clear(s.lastEvent) // bounded: forgetting only lets a file's next close upload it again
		}
	}
	s.lastEvent[rel] = now
}
